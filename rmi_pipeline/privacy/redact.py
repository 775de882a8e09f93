"""Personal data out of feedback text before anything keeps it: Presidio finds it, a typed placeholder replaces it.

Bulk first: one cheap test over whole columns (polars) picks the cells that could hold an entity (`CANDIDATES`: an
`@`, four digits close together, ...); Presidio's recognizers read those cells alone, asked only for the types whose
test the cell passed. Each test is a superset of what its recognizer can match (tests/test_redaction.py holds them to
that on a corpus), so the cells skipped hold nothing to find. A team's pattern that polars cannot run, and named
entities (a spaCy model, when one is named), make every cell a candidate.

A row whose prompt the recipe knows (its tier is set) holds task text in prompt, completion and correction: a sum's
digits are not a phone number, so the number-shaped types are not looked for there; e-mail, a team's patterns and
named entities still are, and comment and meta are always read.
"""

from __future__ import annotations

import functools
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ..schema.fields import GATEWAY_META

TEXT_COLUMNS = ("prompt", "completion", "correction", "comment", "meta")  # meta: each string (or number) in it
TASK_COLUMNS = ("prompt", "completion", "correction")  # task text, in a row whose prompt the recipe knows
IDS = ("schema_version", "event_id", "ts", "user_id", "model_version", "rating", "source", "skill")  # not read
NUMBER_SHAPED = frozenset({"PHONE_NUMBER", "CREDIT_CARD", "IBAN_CODE", "IP_ADDRESS"})
NER_ENTITIES = ("PERSON", "LOCATION", "NRP")  # what a spaCy model's named entities become
CANDIDATES = {  # what a cell must contain for each recognizer to have anything to find (polars' and Python's syntax)
    "EMAIL_ADDRESS": r"@",
    "PHONE_NUMBER": r"\d(?:\D{0,4}\d){3}",  # four digits close together: no valid number in any region has fewer
    "CREDIT_CARD": r"\d(?:[- ]?\d){12}",  # thirteen digits, a space or dash between groups
    "IBAN_CODE": r"(?i:[a-z]{2})\d{2}",  # a country code and two check digits
    "IP_ADDRESS": r"\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}|::|(?i:[0-9a-f]{1,4}):(?i:[0-9a-f]{0,4}):",
}
ANY = r"(?s:.)"  # the test of a type no narrower test exists for
OWN_META = re.compile('"(?:' + "|".join(GATEWAY_META) + r')":(?:"[^"]*"|[^,}]*)')  # what meta's test skips


@dataclass
class Redacted:
    """What a pass redacted: placeholders written per entity type; the distinct texts Presidio read, of how many
    non-empty cells."""

    found: Counter = field(default_factory=Counter)
    texts_read: int = 0
    cells: int = 0

    def add(self, other: Redacted) -> None:
        self.found.update(other.found)
        self.texts_read += other.texts_read
        self.cells += other.cells

    def metadata(self) -> dict:
        return {"redacted": dict(sorted(self.found.items())), "redacted_total": sum(self.found.values()),
                "redaction_texts_read": self.texts_read, "redaction_cells": self.cells}


class Redactor:
    """Presidio's analyzer and anonymizer with the built-in types, a team's patterns and optionally a spaCy model's
    named entities; built on first use (importing spaCy takes seconds), once per process."""

    def __init__(self, patterns: dict[str, str] | None = None, ner_model: str | None = None,
                 cache_dir: Path | None = None, phone_regions: tuple[str, ...] | None = None):
        self.patterns = dict(patterns or {})
        self.phone_regions = phone_regions
        self.ner_model = ner_model
        self.cache_dir = Path(cache_dir) if cache_dir else None
        self.candidates = {**CANDIDATES, **{name: _bulk_test(p) for name, p in self.patterns.items()}}
        if ner_model:
            self.candidates["NER"] = ANY
        self._tests = {name: re.compile(test) for name, test in self.candidates.items()}

    @functools.cached_property
    def _engines(self):
        import logging
        import sys

        if "transformers" not in sys.modules:  # Presidio's optional Hugging Face pipeline, never used here, would
            sys.modules["transformers"] = None  # import transformers: 3 s more on every process's first batch
            try:
                import presidio_analyzer  # noqa: F401
            finally:
                del sys.modules["transformers"]
        from presidio_analyzer import AnalyzerEngine, Pattern, PatternRecognizer, RecognizerRegistry
        from presidio_analyzer.predefined_recognizers import (
            CreditCardRecognizer,
            IbanRecognizer,
            IpRecognizer,
            PhoneRecognizer,
            SpacyRecognizer,
        )
        from presidio_anonymizer import AnonymizerEngine

        logging.getLogger("presidio-analyzer").setLevel(logging.ERROR)  # it warns of languages it was not given
        phones = PhoneRecognizer(**({"supported_regions": self.phone_regions} if self.phone_regions else {}))
        recognizers = [_offline_email_recognizer(), phones, CreditCardRecognizer(), IbanRecognizer(), IpRecognizer()]
        recognizers += [PatternRecognizer(supported_entity=name, name=name, patterns=[Pattern(name, regex, 1.0)])
                        for name, regex in self.patterns.items()]
        if self.ner_model:
            recognizers.append(SpacyRecognizer(supported_entities=list(NER_ENTITIES)))
        analyzer = AnalyzerEngine(nlp_engine=_nlp_engine(self.ner_model, self.cache_dir),
                                  registry=RecognizerRegistry(recognizers, supported_languages=["en"]),
                                  supported_languages=["en"])
        return analyzer, AnonymizerEngine()

    def types_in(self, text: str, task_text: bool = False) -> list[str]:
        """The entity types whose cheap test `text` passes (for task text, none of the number-shaped ones)."""
        return [name for name, test in self._tests.items()
                if not (task_text and name in NUMBER_SHAPED) and test.search(text)]

    def text(self, text: str, types: list[str] | None = None) -> tuple[str, Counter]:
        """`text` with every entity of `types` (default all) replaced by <TYPE>, and how many of each."""
        types = self.types_in(text) if types is None else types
        entities = [e for t in types for e in (NER_ENTITIES if t == "NER" else (t,))]
        if not entities:
            return text, Counter()
        analyzer, anonymizer = self._engines
        results = _surest(text, analyzer.analyze(text, language="en", entities=entities))
        if not results:
            return text, Counter()
        out = anonymizer.anonymize(text, results)
        return out.text, Counter(item.entity_type for item in out.items)

    def json_text(self, text: str, types: list[str]) -> tuple[str, Counter]:
        """A JSON object with each string and number in it redacted (a number found becomes its placeholder), but
        for the keys the gateway writes."""
        found = Counter()

        def walk(value):
            if isinstance(value, dict):
                return {key: item if key in GATEWAY_META else walk(item) for key, item in value.items()}
            if isinstance(value, list):
                return [walk(item) for item in value]
            if isinstance(value, str | int | float) and not isinstance(value, bool):
                redacted, counts = self.text(str(value), types)
                if counts:
                    found.update(counts)
                    return redacted
            return value

        value = walk(json.loads(text))
        return (json.dumps(value, ensure_ascii=False, separators=(",", ":")) if found else text), found

    def events(self, frame) -> tuple[object, Redacted]:
        """A polars frame of feedback events with its text columns redacted (columns it lacks are skipped); a
        `tier` column marks the rows whose prompt the recipe knows."""
        import polars as pl

        stats = Redacted()
        known = frame["tier"].is_not_null() if "tier" in frame.columns else pl.repeat(False, frame.height, eager=True)
        columns = {}
        for name in TEXT_COLUMNS:
            if name not in frame.columns:
                continue
            task = name in TASK_COLUMNS
            column, redacted = self.column(frame[name], known if task else None, as_json=name == "meta")
            columns[name] = column
            stats.add(redacted)
        return frame.with_columns(**columns), stats

    def raw_rows(self, raws: list[str], recipe) -> tuple[list[str], Redacted]:
        """Quarantined rows' input text redacted: a JSON object as an event is (its prompt, completion and
        correction as task text where the recipe knows the prompt, every other value but the ids read), any other
        line whole."""
        import polars as pl

        records, at = [], []
        for i, raw in enumerate(raws):
            try:  # a line too deep, or whose escapes decode to text no column holds, is read whole
                value = json.loads(raw)
                json.dumps(value, ensure_ascii=False).encode()
            except (ValueError, RecursionError, UnicodeEncodeError):
                continue
            if isinstance(value, dict):
                records.append(value)
                at.append(i)
        out, stats = list(raws), Redacted()
        for i in sorted(set(range(len(raws))) - set(at)):
            out[i], found = self.text(raws[i])
            stats.found.update(found)
            stats.texts_read += 1
        if records:
            task = {n: [r[n] if isinstance(r.get(n), str) else None for r in records] for n in TASK_COLUMNS}
            rest = [json.dumps({k: v for k, v in r.items()
                                if k not in IDS and (k not in task or task[k][j] is None)},
                               ensure_ascii=False, separators=(",", ":"))
                    for j, r in enumerate(records)]
            frame = pl.DataFrame({**task, "meta": rest}, schema={n: pl.String for n in (*TASK_COLUMNS, "meta")})
            redacted, found = self.events(frame.with_columns(tier=recipe.parse_prompts(frame["prompt"])["tier"]))
            stats.add(found)
            for j, (i, row) in enumerate(zip(at, redacted.iter_rows(named=True), strict=True)):
                fields = {n: row[n] for n in TASK_COLUMNS if task[n][j] is not None} | json.loads(row["meta"])
                redacted_row = {k: fields.get(k, v) for k, v in records[j].items()}
                if redacted_row != records[j]:  # a row with nothing found keeps its text as it came
                    out[i] = json.dumps(redacted_row, ensure_ascii=False)
        return out, stats

    def parquet(self, data: bytes, recipe) -> bytes:
        """A Parquet file of schema-v1 events redacted, meta kept a struct, the recipe saying which prompts are its
        tasks (the gateway writes its batch files so)."""
        import io

        import polars as pl

        frame = pl.read_parquet(io.BytesIO(data))
        struct = isinstance(frame.schema.get("meta"), pl.Struct)
        tiers = recipe.parse_prompts(frame["prompt"])["tier"]
        redacted, stats = self.events(frame.with_columns(
            tier=tiers, **({"meta": pl.col("meta").struct.json_encode()} if struct else {})))
        if not stats.found:
            return data
        redacted = redacted.drop("tier")
        if struct:  # back to a struct: a number found in it is now its placeholder, a string
            rows = [{**row, "meta": row["meta"] and json.loads(row["meta"])} for row in redacted.to_dicts()]
            redacted = pl.DataFrame(rows, infer_schema_length=None).select(frame.columns)
        buffer = io.BytesIO()
        redacted.write_parquet(buffer)
        return buffer.getvalue()

    def column(self, column, task_rows=None, as_json: bool = False):
        """A polars String Series redacted; `task_rows` (a Boolean Series) marks cells of task text."""
        import polars as pl

        stats = Redacted(cells=int(column.drop_nulls().len()))
        every = _union(self.candidates.values())
        lenient = _union(test for name, test in self.candidates.items() if name not in NUMBER_SHAPED)
        task_rows = task_rows if task_rows is not None else pl.repeat(False, column.len(), eager=True)
        frame = pl.DataFrame({"text": column.cast(pl.String), "task": task_rows})
        tested = pl.col("text").str.replace_all(OWN_META.pattern, "") if as_json else pl.col("text")
        hits = frame.with_row_index("i").filter(
            pl.when(pl.col("task")).then(tested.str.contains(lenient))
            .otherwise(tested.str.contains(every)).fill_null(False))
        if hits.is_empty():
            return column, stats
        done: dict[tuple[str, bool], tuple[str, Counter]] = {}  # the same text is read once
        rows, values = [], []
        for i, text, task in hits.iter_rows():
            if (text, task) not in done:
                types = self.types_in(OWN_META.sub("", text) if as_json else text, task)
                stats.texts_read += bool(types)
                done[(text, task)] = (self.json_text if as_json else self.text)(text, types) if types else (
                    text, Counter())
            redacted, found = done[(text, task)]
            if found:
                stats.found.update(found)
                rows.append(i)
                values.append(redacted)
        if not rows:
            return column, stats
        return column.cast(pl.String).scatter(rows, values), stats


def redactor(settings) -> Redactor:
    """This process's redactor for these settings: Presidio's engines are built once and kept."""
    privacy = settings.privacy
    return _cached(tuple(sorted(privacy.redact_patterns.items())), privacy.redact_ner_model, settings.cache_dir,
                   privacy.redact_phone_regions)


@functools.lru_cache(maxsize=4)
def _cached(patterns: tuple, ner_model: str | None, cache_dir: Path, phone_regions: tuple[str, ...]) -> Redactor:
    return Redactor(dict(patterns), ner_model, cache_dir, phone_regions)


def _surest(text: str, results: list) -> list:
    """Where two types claim the same characters, the claim covering more letters and digits stands (a phone
    number's digits around an IP-shaped part of it), then the surer recognizer's (Presidio scores a phone number
    0.4, an IP address 0.6, a card or IBAN that passed its checksum 1.0: "(10.0.0.1" is an IP address)."""
    def weight(r):
        return sum(ch.isalnum() for ch in text[r.start:r.end]), r.score, r.end - r.start

    kept = []
    for result in sorted(results, key=weight, reverse=True):
        if all(result.end <= k.start or result.start >= k.end for k in kept):
            kept.append(result)
    return kept


def _union(tests) -> str:
    return "|".join(f"(?:{test})" for test in tests) or r"[^\s\S]"


def _bulk_test(pattern: str) -> str:
    """A team's pattern as its own cheap test where polars can run it (no look-around or back-references), else
    every cell is read."""
    import polars as pl

    try:
        pl.Series([""]).str.contains(pattern)
        re.compile(pattern)
    except (pl.exceptions.ComputeError, re.error):
        return ANY
    return pattern


def _offline_email_recognizer():
    """Presidio's e-mail recognizer, checking the domain against the public suffix list its library ships with
    (tldextract would otherwise download a fresh one on first use, from the network)."""
    import tldextract
    from presidio_analyzer.predefined_recognizers import EmailRecognizer

    extract = tldextract.TLDExtract(suffix_list_urls=())

    class OfflineEmailRecognizer(EmailRecognizer):
        def validate_result(self, pattern_text: str) -> bool:
            return extract(pattern_text).fqdn != ""

    return OfflineEmailRecognizer()


def _nlp_engine(model: str | None, cache_dir: Path | None):
    """spaCy as Presidio runs it: the named model, or a blank English tokenizer (the patterns need no model), saved
    once under the cache so no model is ever downloaded."""
    import spacy
    from presidio_analyzer.nlp_engine import SpacyNlpEngine

    if model is None:
        folder = (cache_dir or Path.home() / ".cache" / "rmi-pipeline") / f"spacy-blank-en-{spacy.__version__}"
        if not folder.exists():  # written beside it and renamed: another process never loads half of it
            import tempfile

            folder.parent.mkdir(parents=True, exist_ok=True)
            staged = Path(tempfile.mkdtemp(dir=folder.parent))
            spacy.blank("en").to_disk(staged)
            try:
                staged.rename(folder)
            except OSError:  # another process saved it first
                import shutil

                shutil.rmtree(staged, ignore_errors=True)
        model = str(folder)
    engine = SpacyNlpEngine(models=[{"lang_code": "en", "model_name": model}])
    engine.load()
    return engine
