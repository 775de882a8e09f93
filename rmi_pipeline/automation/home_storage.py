"""Dagster's storage for a home: its sqlite files with each database's connection kept open, its compute logs
mirrored to the terminal by a thread.

Dagster's own sqlite storage builds a SQLAlchemy engine and opens and closes a sqlite connection on every call, and
closing a database's last connection checkpoints its WAL and deletes it: 5-8 ms for each of the ~100 events a cycle
writes, the largest part of a cycle's orchestration in `make bench`; and each run's new log took 50 ms to create.
Here each database keeps one engine whose pool keeps the connection, and a run's log starts as a copy of an empty one.
The files and tables are Dagster's: a home written by either storage is read by the other. A run's stdout and
stderr (the UI's compute logs) go to Dagster's files as before; what Dagster mirrors to the terminal with a `tail -F`
and a watcher process per stream (four processes started and stopped, 40-60 ms a run) a thread copies here.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
from collections import OrderedDict
from contextlib import contextmanager
from functools import cached_property
from pathlib import Path

import sqlalchemy
import yaml
from dagster.version import __version__ as dagster_version
from packaging.specifiers import SpecifierSet

# the Dagster this module's private names and overrides were written against (pyproject.toml pins the same range)
SUPPORTED_DAGSTER = ">=1.13.27,<1.14"


def check_dagster_version(version: str) -> None:
    """Refuse a Dagster outside SUPPORTED_DAGSTER: its private storage classes may differ, and a home's runs and
    events would be written by code nobody ran against them."""
    if version not in SpecifierSet(SUPPORTED_DAGSTER):
        raise RuntimeError(f"Dagster {version} is installed, but the home's storage (rmi_pipeline.automation."
                           f"home_storage) supports dagster{SUPPORTED_DAGSTER} only: pip install "
                           f"'dagster{SUPPORTED_DAGSTER}' (the production profile on PostgreSQL does not use it)")


check_dagster_version(dagster_version)  # before the private imports below, which a changed Dagster may lack

from dagster import DagsterInstance
from dagster._core.execution.compute_logs import redirect_to_file
from dagster._core.instance.ref import InstanceRef, compute_logs_directory
from dagster._core.storage.compute_log_manager import CapturedLogContext, ComputeIOType
from dagster._core.storage.event_log import SqliteEventLogStorage
from dagster._core.storage.event_log.sqlite.sqlite_event_log import INDEX_SHARD_NAME
from dagster._core.storage.local_compute_log_manager import IO_TYPE_EXTENSION, LocalComputeLogManager
from dagster._core.storage.runs import SqliteRunStorage
from dagster._core.storage.schedules import SqliteScheduleStorage
from dagster._core.storage.sqlite import SQLITE_BUSY_TIMEOUT_SECONDS
from dagster._core.storage.sqlite_storage import (
    DagsterSqliteStorage,
    _event_logs_directory,
    _runs_directory,
    _schedule_directory,
)
from dagster._serdes import ConfigurableClassData
from dagster._utils import ensure_file, touch_file
from sqlalchemy.pool import NullPool

KEPT_OPEN = 5  # event databases a process keeps open, the least recently used closed (the UI reads many runs' logs)


class HomeInstance(DagsterInstance):
    """The instance of a home (dagster.yaml's `instance_class`): Dagster's defaults for the folder dagster.yaml is in,
    with the storage and compute logs of this module (a folder an instance is loaded from, never an environment
    variable that may name another home)."""

    @classmethod
    def config_schema(cls) -> dict:
        return {}

    @staticmethod
    def config_defaults(base_dir: str) -> dict:
        return {**InstanceRef.config_defaults(base_dir),
                "storage": ConfigurableClassData(__name__, HomeStorage.__name__, yaml.dump({"base_dir": base_dir})),
                "compute_logs": ConfigurableClassData(__name__, HomeComputeLogs.__name__,
                                                      yaml.dump({"base_dir": compute_logs_directory(base_dir)}))}


class HomeStorage(DagsterSqliteStorage):
    """Dagster's sqlite storage in `base_dir` (the folder of the home's dagster.yaml), its connections kept."""

    def __init__(self, base_dir: str, inst_data=None):
        self.base_dir = base_dir
        self._run_storage = KeptRunStorage.from_local(_runs_directory(base_dir))
        self._event_log_storage = KeptEventLogStorage(_event_logs_directory(base_dir))
        self._schedule_storage = KeptScheduleStorage.from_local(_schedule_directory(base_dir))
        self._inst_data = inst_data
        super(DagsterSqliteStorage, self).__init__()

    @classmethod
    def from_config_value(cls, inst_data, config_value) -> HomeStorage:
        return cls.from_local(inst_data=inst_data, **config_value)

    def dispose(self) -> None:
        super().dispose()
        self.schedule_storage.dispose()


def kept_engine(conn_string: str) -> sqlalchemy.Engine:
    """An engine whose pool keeps its sqlite connection open between uses (SQLAlchemy's pool for a file)."""
    return sqlalchemy.create_engine(conn_string, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS})


class _KeptConnection:
    """`connect()` of Dagster's sqlite run and schedule storage on one engine for the storage's life."""

    _conn_string: str

    @cached_property
    def _engine(self) -> sqlalchemy.Engine:
        return kept_engine(self._conn_string)

    @contextmanager
    def connect(self):
        with self._engine.connect() as conn, conn.begin():
            yield conn

    def dispose(self) -> None:
        super().dispose()
        if "_engine" in self.__dict__:
            self._engine.dispose()


class KeptRunStorage(_KeptConnection, SqliteRunStorage):
    """Runs, their tags and status."""


class KeptScheduleStorage(_KeptConnection, SqliteScheduleStorage):
    """Sensor and schedule ticks and cursors."""


class KeptEventLogStorage(SqliteEventLogStorage):
    """Events, one database per run and an index of them all. After each write to a run's log a passive checkpoint
    copies it into the database file: Dagster's watcher of a run's events (the UI's live run view) waits for that
    file to change, as it did when the last connection's close checkpointed."""

    def __init__(self, base_dir: str, inst_data=None):
        self._engines: OrderedDict[str, sqlalchemy.Engine] = OrderedDict()  # least recently used first
        self._tables: set[str] = set()
        super().__init__(base_dir, inst_data)

    def has_table(self, table_name: str) -> bool:
        """Dagster asks before most writes (an asset event's tags, a partition, a check), each time with an engine
        of its own; a table that exists stays."""
        if table_name not in self._tables and super().has_table(table_name):
            self._tables.add(table_name)
        return table_name in self._tables

    @contextmanager
    def _connect(self, shard: str):
        with self._db_lock:
            engine = self._engines.pop(shard, None)
            if engine is None:
                engine = kept_engine(self.conn_string_for_shard(shard))
                if shard not in self._initialized_dbs:
                    if not self._copy_empty_log(shard):
                        self._initdb(engine)
                    self._initialized_dbs.add(shard)
            self._engines[shard] = engine
            while len(self._engines) > KEPT_OPEN:
                self._engines.popitem(last=False)[1].dispose()
            with engine.connect() as conn:
                sqlite = conn.connection.dbapi_connection
                changes = sqlite.total_changes
                with conn.begin():
                    yield conn
                if shard != INDEX_SHARD_NAME and sqlite.total_changes != changes:  # a run's log was written
                    conn.exec_driver_sql("PRAGMA wal_checkpoint(PASSIVE)")

    def _copy_empty_log(self, shard: str) -> bool:
        """A new run's log is a copy of an empty one Dagster's `_initdb` made once in this process (its tables,
        indexes, WAL mode and alembic stamp): making each anew took 50 ms a run. False for a log that exists."""
        path = self.path_for_shard(shard)
        if shard == INDEX_SHARD_NAME or os.path.exists(path):
            return False
        partial = f"{path}.{os.getpid()}.partial"
        Path(partial).write_bytes(self._empty_log)
        try:
            os.link(partial, path)  # never over a log another process made meanwhile
        except FileExistsError:
            pass
        finally:
            os.unlink(partial)
        return True

    @cached_property
    def _empty_log(self) -> bytes:
        with tempfile.TemporaryDirectory() as folder:
            engine = sqlalchemy.create_engine(f"sqlite:///{folder}/empty.db", poolclass=NullPool)
            self._initdb(engine)
            engine.dispose()  # the last connection's close moves the WAL into the file
            return Path(folder, "empty.db").read_bytes()

    def dispose(self) -> None:
        self._close_all()
        super().dispose()

    def _close_all(self) -> None:
        with self._db_lock:
            while self._engines:
                self._engines.popitem()[1].dispose()


class HomeComputeLogs(LocalComputeLogManager):
    """A run's stdout and stderr in Dagster's files, mirrored by a thread."""

    @classmethod
    def from_config_value(cls, inst_data, config_value) -> HomeComputeLogs:
        return cls(inst_data=inst_data, **config_value)

    @contextmanager
    def capture_logs(self, log_key):
        out = self.get_captured_local_path(log_key, IO_TYPE_EXTENSION[ComputeIOType.STDOUT])
        err = self.get_captured_local_path(log_key, IO_TYPE_EXTENSION[ComputeIOType.STDERR])
        with _mirrored(sys.stdout, out), _mirrored(sys.stderr, err):
            yield CapturedLogContext(log_key)
        touch_file(self.complete_artifact_path(log_key))  # Dagster's sign that the capture is complete


@contextmanager
def _mirrored(stream, path: str):
    """Whatever this process and its children write to `stream`'s file descriptor goes to `path`, and a thread
    copies it from there to where the descriptor went before, every 0.1 s and at the end. Nothing waits on the
    thread's reader: a terminal that stops reading cannot stall the run (the thread is left behind after 5 s)."""
    ensure_file(path)
    try:
        terminal = os.dup(stream.fileno())
    except (AttributeError, OSError, ValueError):  # not a file (a test's stand-in): captured, not mirrored
        with redirect_to_file(stream, path):
            yield
        return
    stop, start = threading.Event(), os.path.getsize(path)

    def copy() -> None:
        with open(path, "rb") as source:
            source.seek(start)
            while True:
                last = stop.wait(0.1)
                while chunk := source.read(1 << 16):
                    try:
                        while chunk:
                            chunk = chunk[os.write(terminal, chunk):]
                    except OSError:  # the terminal went away: the file still has it all
                        return
                if last:
                    return

    mirror = threading.Thread(target=copy, name=f"mirror {Path(path).name}", daemon=True)
    mirror.start()
    try:
        with redirect_to_file(stream, path):
            yield
    finally:
        stop.set()
        mirror.join(timeout=5)
        if not mirror.is_alive():  # a descriptor the thread may still write to is never closed under it
            os.close(terminal)
