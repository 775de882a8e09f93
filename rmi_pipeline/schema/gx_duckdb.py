"""`duckdb+rmi://`: duckdb-engine with the two fixes Great Expectations needs to compile the suite for DuckDB.

The dialect is registered under this module's name and served by its `__getattr__`, so that importing the module
stays light: the class subclasses duckdb-engine's and is built on first use.
"""

from __future__ import annotations

from functools import lru_cache


def register_dialect() -> None:
    """`duckdb+rmi://`: duckdb-engine with two fixes GX needs (see DuckDBForGX)."""
    from sqlalchemy.dialects import registry

    registry.register("duckdb.rmi", __name__, "DuckDBForGX")


def __getattr__(name: str):
    # the dialect class subclasses duckdb-engine's: built on first use so that importing this module stays light
    if name == "DuckDBForGX":
        return _dialect_class()
    raise AttributeError(name)


@lru_cache(maxsize=1)
def _dialect_class():
    from duckdb_engine import Dialect
    from sqlalchemy.dialects import postgresql
    from sqlalchemy.engine import cursor

    class BufferedResults(Dialect.execution_ctx_cls):
        """GX fetches a result after its connection went back to the pool, whose rollback empties a DuckDB
        cursor: every expectation failed with 'list index out of range' (great_expectations issue #11579)."""

        def post_exec(self):
            super().post_exec()
            if self.cursor.description is not None:
                self.cursor_fetch_strategy = cursor.FullyBufferedCursorFetchStrategy(self.cursor,
                                                                                     self.cursor.description)

    class RegexAsDuckDB(Dialect.statement_compiler):
        """GX writes Postgres regex operators (`~`, `!~`); DuckDB's are functions."""

        def visit_custom_op_binary(self, element, operator, **kw):
            if operator.opstring in ("~", "!~"):
                match = f"regexp_matches({self.process(element.left, **kw)}, {self.process(element.right, **kw)})"
                return match if operator.opstring == "~" else f"NOT {match}"
            return super().visit_custom_op_binary(element, operator, **kw)

    class DuckDBForGX(Dialect):
        execution_ctx_cls = BufferedResults
        statement_compiler = RegexAsDuckDB
        supports_statement_cache = False

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            # GX picks a regex operator by asking whether `dialect.dialect` is Postgres (duckdb-engine's base)
            self.dialect = postgresql.dialect

    return DuckDBForGX
