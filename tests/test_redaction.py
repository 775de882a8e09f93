"""Personal data is redacted before anything keeps it: the recall per type on a corpus, no placeholder where there
was nothing, the bulk route equal to Presidio read cell by cell, task text left alone, and the original file gone."""

import json
from collections import Counter

import polars as pl
import pytest
from dagster import instance_for_test, materialize
from pii_corpus import FIELDS, TYPES, rows

from rmi_pipeline.assets import FEEDBACK
from rmi_pipeline.privacy.redact import Redactor, redactor
from rmi_pipeline.resources import build_resources, layout
from rmi_pipeline.settings import Settings

WITH, WITHOUT = 250, 250


@pytest.fixture(scope="module")
def corpus():
    return rows(WITH, WITHOUT, seed=0)


@pytest.fixture
def intake(rmi_env):
    resources = build_resources(rmi_env)
    with instance_for_test() as instance:
        def ingest(name: str, events: list[dict], extra_lines: tuple[str, ...] = ()):
            lines = [json.dumps(e, ensure_ascii=False) for e in events] + list(extra_lines)
            resources["storage"].write_bytes(layout.incoming(name), "\n".join(lines).encode())
            instance.add_dynamic_partitions("feedback_batch", [name])
            result = materialize(FEEDBACK, partition_key=name, instance=instance, resources=resources)
            return {e.asset_key.to_user_string(): {k: v.value for k, v in e.materialization.metadata.items()}
                    for e in result.get_asset_materialization_events()}

        yield ingest, resources


def field_text(row: dict, field: str) -> str:
    return row[field] if field != "meta" else json.dumps(row["meta"], ensure_ascii=False)


def test_every_type_is_found_in_every_field_and_nothing_where_there_was_nothing(intake, corpus):
    ingest, resources = intake
    events, planted = corpus
    meta = ingest("corpus.jsonl", events)
    stored = resources["warehouse"].query("SELECT * FROM feedback_events ORDER BY event_id")
    by_id = {r["event_id"]: {**r, "meta": json.loads(r["meta"])} for r in stored.to_dicts()}
    assert len(by_id) == WITH + WITHOUT

    found, total = Counter(), Counter()
    for event, values in zip(events, planted, strict=True):
        row = by_id[event["event_id"]]
        for p in values:
            total[p.type] += 1
            text = field_text(row, p.field)
            found[p.type] += p.value not in text and f"<{p.type}>" in text
    recall = {t: found[t] / total[t] for t in TYPES}
    print("recall per type:", recall, "of", dict(total))
    assert all(r >= 0.95 for r in recall.values()), recall
    assert total == {t: WITH for t in TYPES}  # each type in each field, WITH / 5 times
    for event in events[WITH:]:  # rows with no personal data come out as they went in
        row = by_id[event["event_id"]]
        assert all(field_text(row, f) == field_text(event, f) for f in FIELDS), row

    counts = meta["feedback_batch"]["redacted"]
    assert sum(counts.values()) == meta["feedback_batch"]["redacted_total"] >= 0.95 * WITH * len(FIELDS)
    assert set(counts) == set(TYPES)
    # the original file is gone from incoming/ (its name stays for the sensor); nothing stored holds a value
    storage = resources["storage"]
    assert storage.read_bytes(layout.incoming("corpus.jsonl")) == b""
    validated = storage.read_bytes(layout.validated("corpus.jsonl"))
    leaked = [p.value for values in planted for p in values if p.value.encode() in validated]
    assert len(leaked) <= 0.05 * WITH * len(FIELDS), leaked[:5]


def test_the_bulk_route_reads_every_cell_presidio_would_change(corpus):
    """The cheap tests skip cells; Presidio on every cell, all types asked, changes no cell they skipped."""
    events, _ = corpus
    frame = pl.DataFrame([{**e, "meta": json.dumps(e["meta"], ensure_ascii=False), "tier": None} for e in events],
                         infer_schema_length=None)
    r = Redactor()
    bulk, _ = r.events(frame)
    everything = r.types_in("@ 1234 ab12 :: 1.2.3.4 4111 1111 1111 1111")
    assert set(everything) == set(TYPES)
    for name in ("prompt", "completion", "correction", "comment"):
        for text, redacted in zip(frame[name], bulk[name], strict=True):
            assert r.text(text, everything)[0] == redacted, (name, text)


def test_task_text_is_left_alone_and_the_gateway_s_own_meta_too(rmi_env):
    """A sum's digits in a row whose prompt the recipe knows are not a phone number; an e-mail there still goes."""
    r = redactor(rmi_env)
    frame = pl.DataFrame({
        "prompt": ["4155552671+1=", "4155552671+1=", "mail ann@example.com 1+1="],
        "completion": ["4155552672", "4155552672", "2"],
        "correction": ["4111111111111111", None, None],
        "comment": [None, "call 4155552671", None],
        "meta": ['{"response_id":"r6753a1b2c4d5e6f70a8b9c0d1e","sample_seed":4155552671,"arm":"champion"}',
                 '{"phone":4155552671}', None],
        "tier": [10, None, 1]})
    out, stats = r.events(frame)
    assert out.row(0) == frame.row(0)  # task text and the gateway's own meta, untouched
    assert out["prompt"][1] == "<PHONE_NUMBER>+1=" and out["comment"][1] == "call <PHONE_NUMBER>"
    assert json.loads(out["meta"][1]) == {"phone": "<PHONE_NUMBER>"}
    assert out["prompt"][2] == "mail <EMAIL_ADDRESS> 1+1="
    assert stats.found == {"PHONE_NUMBER": 4, "EMAIL_ADDRESS": 1}


def test_a_team_s_patterns_and_a_spacy_model_s_names(tmp_path):
    import spacy

    nlp = spacy.blank("en")
    nlp.add_pipe("entity_ruler").add_patterns([{"label": "PERSON", "pattern": [{"LOWER": "ada"},
                                                                               {"LOWER": "lovelace"}]}])
    nlp.to_disk(tmp_path / "names")
    # a pattern polars can run, and one it cannot (a look-behind): every cell is then read
    r = Redactor({"EMPLOYEE_ID": r"\bEMP-\d{6}\b", "TICKET": r"(?<![A-Z])TK\d{4}"}, str(tmp_path / "names"),
                 tmp_path / "cache")
    text, found = r.text("Ada Lovelace (EMP-123456) filed TK1234, not XTK1234")
    assert text == "<PERSON> (<EMPLOYEE_ID>) filed <TICKET>, not XTK1234"
    assert found == {"PERSON": 1, "EMPLOYEE_ID": 1, "TICKET": 1}


def test_bad_patterns_are_refused_when_read(monkeypatch):
    monkeypatch.setenv("RMI_REDACT_PATTERNS", '{"EMPLOYEE_ID": "EMP-(\\\\d"}')
    with pytest.raises(ValueError, match=r"RMI_REDACT_PATTERNS\[EMPLOYEE_ID\]"):
        Settings()
    monkeypatch.setenv("RMI_REDACT_PATTERNS", '{"employee id": "x"}')
    with pytest.raises(ValueError, match="must be upper case"):
        Settings()


def test_originals_move_to_their_own_store_and_a_rerun_keeps_the_check(intake, rmi_env, tmp_path, monkeypatch):
    """With RMI_REDACT_ORIGINALS_URL the original goes there, byte for byte; quarantined rows are redacted too; a
    rerun of the batch after the original left finds the same counts."""
    from rmi_pipeline.assets.feedback import check_batch
    from rmi_pipeline.resources.storage import ObjectStore

    monkeypatch.setenv("RMI_REDACT_ORIGINALS_URL", f"file://{tmp_path / 'originals'}")
    settings = Settings()
    _, resources = intake
    events = rows(3, 0, seed=5)[0]
    broken = '{"event_id": "x", "comment": "write to ann@example.com'
    data = "\n".join([json.dumps(e) for e in events] + [broken]).encode()
    storage = resources["storage"]
    storage.write_bytes(layout.incoming("b.jsonl"), data)
    summary, check = check_batch(storage, "b.jsonl", settings)
    assert ObjectStore(url=f"file://{tmp_path / 'originals'}").read_bytes(layout.incoming("b.jsonl")) == data
    assert storage.read_bytes(layout.incoming("b.jsonl")) == b""
    assert summary["original"].startswith("moved to file://")
    quarantine = storage.read_bytes(layout.quarantine("b.jsonl")).decode()
    assert "ann@example.com" not in quarantine and "<EMAIL_ADDRESS>" in quarantine
    again, check_again = check_batch(storage, "b.jsonl", settings)
    assert (again, check_again) == (summary, check) and again["valid"] == 3 and again["quarantined"] == 1


def test_with_redaction_off_the_text_and_the_original_stay(rmi_env, monkeypatch):
    from rmi_pipeline.assets.feedback import check_batch

    monkeypatch.setenv("RMI_REDACT", "false")
    storage = build_resources(Settings())["storage"]
    events = rows(2, 0, seed=6)[0]
    data = "\n".join(json.dumps(e) for e in events).encode()
    storage.write_bytes(layout.incoming("raw.jsonl"), data)
    summary, _ = check_batch(storage, "raw.jsonl", Settings())
    assert "redacted" not in summary and storage.read_bytes(layout.incoming("raw.jsonl")) == data
    assert storage.read_parquet(layout.validated("raw.jsonl"))["prompt"].to_list() == [e["prompt"] for e in events]


def test_the_gateway_writes_its_batch_files_redacted(rmi_env):
    """Personal data a user typed into the app leaves the gateway only as placeholders; its own ids stay."""
    import asyncio

    from rmi_pipeline.serving.app import build_app

    app = build_app(rmi_env)
    gateway = app.state.gateway
    try:
        asked = [{"response_id": "r0000000100000000000000ab", "user_id": "ann", "model_version": "1",
                  "prompt": "my card is 4111 1111 1111 1111, what is 12+3=", "completion": "15", "skill": None,
                  "arm": "champion", "sampling": {"temperature": 0.7, "seed": 4155552671}},
                 {"response_id": "r0000000100000000000000cd", "user_id": "bo", "model_version": "1",
                  "prompt": "4155552671+1=", "completion": "4155552672", "skill": "add", "arm": "champion",
                  "sampling": None}]
        gateway.log.record_answers(asked).result()
        gateway.log.record_feedback(asked[0]["response_id"], "down", "reach me at ann@example.com",
                                    "or +44 20 7946 0958", "user", None, {"note": "IP 10.1.2.3"}).result()
        [name] = asyncio.run(gateway.flush())
    finally:
        gateway.log.close()
    written = build_resources(rmi_env)["storage"].read_parquet(layout.incoming(name)).to_dicts()
    text = json.dumps(written)
    assert "4111 1111 1111 1111" not in text and "ann@example.com" not in text and "7946" not in text
    assert "10.1.2.3" not in text
    rated = next(e for e in written if e["rating"] == "down")
    assert rated["prompt"] == "my card is <CREDIT_CARD>, what is 12+3="
    assert (rated["correction"], rated["comment"]) == ("reach me at <EMAIL_ADDRESS>", "or <PHONE_NUMBER>")
    meta = json.loads(rated["meta"]) if isinstance(rated["meta"], str) else rated["meta"]
    assert meta["note"] == "IP <IP_ADDRESS>" and meta["response_id"] == asked[0]["response_id"]
    assert meta["sample_seed"] == 4155552671  # the gateway's own: how the answer was sampled
    sum_row = next(e for e in written if e["user_id"] == "bo")
    assert (sum_row["prompt"], sum_row["completion"]) == ("4155552671+1=", "4155552672")  # task text


def test_the_warehouse_counts_what_was_redacted_once_per_batch(intake):
    from rmi_pipeline.assets.feedback import land_batch

    ingest, resources = intake
    meta = ingest("counted.jsonl", rows(5, 5, seed=7)[0])
    land_batch(resources["storage"], resources["warehouse"], "counted.jsonl")  # landed again: counted once
    view = resources["warehouse"].query("SELECT entity_type, found, batches FROM feedback_redactions")
    assert dict(zip(view["entity_type"], view["found"], strict=True)) == meta["feedback_batch"]["redacted"]
    assert set(view["batches"]) == {1} and sum(view["found"]) == 25
