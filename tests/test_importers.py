"""Feedback collected in Langfuse, Arize Phoenix and OpenTelemetry becomes schema-v1 events (rmi_pipeline/schema/
importers/): thumbs, corrections, comments, users, model versions and sources mapped as docs/how-to/import-feedback.md
says; every score read is an event or skipped with its reason and id; a re-import makes the same event ids; a
malformed export is refused with its file, record and field; `rmi feedback import` lands the batch in the warehouse.

The files under tests/importers/ are shaped as the tools write them: a Langfuse API page of scores, the UI's JSONL
export of traces and CSV export of scores, an API page of observations; Phoenix REST pages of spans, span and trace
annotations, and the client's dataframes written with pandas; OTLP JSON lines of spans and log records as the
Collector's file exporter writes them."""

import gzip
import json
from pathlib import Path

import pytest
from test_feedback_cli import rmi

from rmi_pipeline.schema import parse_batch
from rmi_pipeline.schema.importers import ExportError, Mapping, convert, labels
from rmi_pipeline.schema.importers.common import DOWN_LABELS

FILES = Path(__file__).parent / "importers"
LANGFUSE = [FILES / "langfuse-scores.json", FILES / "langfuse-traces.jsonl", FILES / "langfuse-observations.json"]
PHOENIX = [FILES / "phoenix-span-annotations.json", FILES / "phoenix-trace-annotations.json",
           FILES / "phoenix-spans.json"]
OTEL = [FILES / "otel-logs.jsonl", FILES / "otel-traces.jsonl"]
SCORE = "langfuse:3c0e0d8e-5f7a-4a51-9b55-2f6f2f1a0a0"  # + the score's last digit


def by_id(conversion) -> dict[str, dict]:
    return {e["event_id"]: e for e in conversion.events}


def reasons(conversion) -> dict[str, str]:
    return {source_id: reason for source_id, reason, _ in conversion.skipped}


def fields(event: dict, *names: str) -> tuple:
    return tuple(event[n] for n in names)


def assert_valid_batch(conversion) -> None:
    """What the importer writes passes the pipeline's own validation, every row."""
    parsed = parse_batch(conversion.batch_name(), conversion.jsonl(), None, 4096)
    assert parsed.frame.height == len(conversion.events) and not parsed.quarantined and not parsed.duplicates


def test_langfuse_scores_become_thumbs_corrections_and_comments(tmp_path):
    conversion = convert("langfuse", LANGFUSE, Mapping())
    assert conversion.read == 7 == len(conversion.events) + len(conversion.skipped)
    assert conversion.context == {"traces": 2, "observations": 1}
    events = by_id(conversion)
    names = ("rating", "correction", "comment", "user_id", "model_version", "source", "prompt", "completion")
    # BOOLEAN true from the app (source API): a user's thumbs-up; the model is the trace's release (no generation)
    assert fields(events[SCORE + "1"], *names) == ("up", None, "quick and right", "ann", "2026.11.3", "user",
                                                   "123+456=", "579")
    assert events[SCORE + "1"]["ts"] == "2026-11-30T10:00:05.120000+00:00"
    # BOOLEAN false on a trace whose one generation says which model answered
    assert fields(events[SCORE + "2"], *names) == ("down", None, None, "bob", "ledger-arith-5", "user", "901-45=",
                                                   "866")
    # CORRECTION from an annotation queue: its stringValue is the correction, with no thumb of its own
    assert fields(events[SCORE + "3"], *names) == (None, "856", "901 - 45 is 856", "bob", "ledger-arith-5", "user",
                                                   "901-45=", "866")
    assert events[SCORE + "3"]["meta"] == {
        "imported_from": "langfuse", "langfuse_score_id": SCORE.removeprefix("langfuse:") + "3",
        "langfuse_trace_id": "0b1c2d3e4f5a46b7c8d9e0f1a2b3c4d5", "langfuse_observation_id": "a1b2c3d4e5f60718",
        "langfuse_score_name": "output", "langfuse_data_type": "CORRECTION", "langfuse_score_source": "ANNOTATION",
        "langfuse_environment": "production"}
    assert {k.removeprefix("3c0e0d8e-5f7a-4a51-9b55-2f6f2f1a0a0"): v for k, v in reasons(conversion).items()} == {
        "4": "a number other than 1, 0 or -1 and no --threshold",
        "5": "a label in neither --up-labels nor --down-labels",
        "6": "a score of a session or dataset run, not of a trace",
        "7": "its trace is not in the files (or has no input and output)"}
    assert_valid_batch(conversion)

    # a threshold makes the evaluator's NUMERIC score a thumb, reported by an evaluator; a label list, the category
    mapped = convert("langfuse", LANGFUSE, Mapping(threshold=0.5, up_labels=labels("neutral", frozenset())))
    assert fields(by_id(mapped)[SCORE + "4"], "rating", "source", "comment") == (
        "up", "report", "The answer is correct and direct.")
    assert by_id(mapped)[SCORE + "5"]["rating"] == "up" and len(mapped.skipped) == 2
    # only the names a team counts; the others are skipped, counted
    only = convert("langfuse", LANGFUSE, Mapping(names=frozenset({"user-feedback"}), model_version="7",
                                                 source="report"))
    assert sorted(by_id(only)) == [SCORE + "1", SCORE + "2"] and only.read == 7
    assert {e["model_version"] for e in only.events} == {"7"} and {e["source"] for e in only.events} == {"report"}
    assert list(reasons(only).values()).count("a score name not in --names") == 3

    # a re-import, the traces gzipped this time, makes the same events under the same batch name
    (tmp_path / "traces.jsonl.gz").write_bytes(gzip.compress(LANGFUSE[1].read_bytes()))
    again = convert("langfuse", [LANGFUSE[0], tmp_path / "traces.jsonl.gz", LANGFUSE[2]], Mapping())
    assert again.jsonl() == conversion.jsonl() and again.batch_name() == conversion.batch_name()
    assert conversion.batch_name().startswith("langfuse-") and conversion.batch_name().endswith(".jsonl")


def test_the_langfuse_ui_csv_export_of_scores_reads_as_the_api_page_does():
    from_api = convert("langfuse", LANGFUSE, Mapping(threshold=0.5))
    from_csv = convert("langfuse", [FILES / "langfuse-scores.csv", *LANGFUSE[1:]], Mapping(threshold=0.5))
    assert from_csv.events == from_api.events and from_csv.skipped == from_api.skipped


def test_phoenix_annotations_become_events_by_who_annotated():
    conversion = convert("phoenix", PHOENIX, Mapping())
    assert conversion.read == 6 == len(conversion.events) + len(conversion.skipped)
    events = by_id(conversion)
    names = ("rating", "comment", "user_id", "model_version", "source", "prompt", "completion")
    # a person's thumbs on the LLM span: the prompt is the last user message, the user the span's user.id
    assert fields(events["phoenix:U3BhbkFubm90YXRpb246MQ=="], *names) == (
        "up", None, "ann", "ledger-arith-5", "user", "123+456=", "579")
    # an LLM judge's label, its explanation as the comment; the prompt from message contents (text parts)
    assert fields(events["phoenix:U3BhbkFubm90YXRpb246Mg=="], *names) == (
        "down", "901 - 45 is 856, not 866.", "bob", "ledger-arith-5", "report", "901-45=", "866")
    # a trace annotation judges the root span (JSON input.value); its model is the one its LLM span names
    assert fields(events["phoenix:VHJhY2VBbm5vdGF0aW9uOjE="], *names) == (
        "up", "what I needed", "ann", "ledger-arith-5", "user", "123+456=", "579")
    assert events["phoenix:VHJhY2VBbm5vdGF0aW9uOjE="]["meta"]["phoenix_span_id"] == "051581bf3cb55c13"
    assert reasons(conversion) == {"U3BhbkFubm90YXRpb246Mw==": "a number other than 1, 0 or -1 and no --threshold",
                                   "U3BhbkFubm90YXRpb246NA==": "no label and no value",
                                   "U3BhbkFubm90YXRpb246NQ==": "its span is not in the files"}
    assert_valid_batch(conversion)
    # a CODE evaluator's score with a threshold: a report
    scored = by_id(convert("phoenix", PHOENIX, Mapping(threshold=0.5)))["phoenix:U3BhbkFubm90YXRpb246Mw=="]
    assert fields(scored, "rating", "source") == ("up", "report")


def test_phoenix_dataframes_written_by_pandas_read_as_the_rest_pages_do(tmp_path):
    import polars as pl

    rest = by_id(convert("phoenix", [PHOENIX[0], PHOENIX[2]], Mapping()))
    frames = [FILES / "phoenix-annotations-dataframe.jsonl", FILES / "phoenix-spans-dataframe.jsonl"]
    dataframes = convert("phoenix", frames, Mapping())
    assert dataframes.read == 3 and len(dataframes.events) == 2
    for event_id, event in by_id(dataframes).items():
        assert event == rest[event_id]
    # the annotations dataframe as Parquet
    rows = [json.loads(line) for line in frames[0].read_text().splitlines()]
    pl.DataFrame([{k: v for k, v in r.items() if k != "metadata"} for r in rows]).write_parquet(
        tmp_path / "annotations.parquet")
    parquet = convert("phoenix", [tmp_path / "annotations.parquet", frames[1]], Mapping())
    assert [fields(e, "event_id", "rating", "ts") for e in parquet.events] == [
        fields(e, "event_id", "rating", "ts") for e in dataframes.events]


def test_opentelemetry_evaluation_events_judge_the_generation_spans():
    conversion = convert("otel", OTEL, Mapping())
    assert conversion.read == 6 == len(conversion.events) + len(conversion.skipped)
    events = {e["meta"]["otel_span_id"]: e for e in conversion.events}
    names = ("rating", "comment", "user_id", "model_version", "source", "prompt", "completion", "ts")
    # a log record linked by span id; gen_ai.input/output.messages as JSON text on the span (v1.37+)
    assert fields(events["051581bf3cb55c13"], *names) == (
        "up", "123 + 456 is 579.", "ann", "ledger-arith-5", "report", "123+456=", "579", "2026-11-30T10:00:05+00:00")
    # a span event of the evaluated span; its content in gen_ai.user.message / gen_ai.choice log events (v1.36)
    assert fields(events["9a0b1c2d3e4f5061"], *names) == (
        "down", "901 - 45 is 856, not 866.", "anonymous", "ledger-arith-4", "report", "901-45=", "866",
        "2026-11-30T10:05:00+00:00")
    # the older `event.name` attribute; gen_ai.prompt.<i> / gen_ai.completion.<i> attributes on the span
    assert fields(events["b7ad6b7169203331"], "rating", "prompt", "completion", "model_version") == (
        "up", "7+8=", "15", "ledger-arith-3")
    assert sorted(reasons(conversion).values()) == [
        "a number other than 1, 0 or -1 and no --threshold", "the evaluated span is not in the files",
        "the evaluation ended in an error"]
    assert_valid_batch(conversion)
    # a threshold, and the span found by gen_ai.response.id where the event has no span id
    mapped = convert("otel", OTEL, Mapping(threshold=3, anonymous_user="unknown-user", source="user"))
    relevance = next(e for e in mapped.events if e["meta"]["otel_evaluation_name"] == "Relevance")
    assert fields(relevance, "rating", "source", "prompt", "model_version") == ("up", "user", "123+456=",
                                                                                "ledger-arith-5")
    assert {e["user_id"] for e in mapped.events} == {"ann", "unknown-user"}
    # the same files again: the same event ids (an evaluation has no id of its own; they are derived from it)
    assert [e["event_id"] for e in convert("otel", OTEL, Mapping()).events] == [e["event_id"] for e in
                                                                                 conversion.events]


MALFORMED = [
    ("langfuse", "scores.json", json.dumps({"data": [
        {"id": "s1", "name": "x", "dataType": "BOOLEAN", "value": 1, "timestamp": "2026-11-30T10:00:00Z"},
        {"name": "x", "dataType": "BOOLEAN", "value": 1, "timestamp": "2026-11-30T10:00:00Z"}]}),
     "scores.json record 2, field id: missing"),
    ("langfuse", "scores.jsonl",
     '{"id": "s1", "name": "x", "dataType": "BOOLEAN", "value": 1, "timestamp": "2026-11-30 10:00:00"}\n',
     "scores.jsonl line 1, field timestamp: not a timestamp with a time zone"),
    ("langfuse", "traces.jsonl", '{"id": "t1", "timestamp": "2026-11-30T10:00:00Z"}\n{"id": "t2", "timest\n',
     "traces.jsonl line 2: malformed JSON"),
    ("langfuse", "sessions.json", '[{"id": "sess-1", "createdAt": "2026-11-30T10:00:00Z"}]',
     "sessions.json record 1: neither a Langfuse score"),
    ("phoenix", "annotations.json", json.dumps({"data": [
        {"id": "a1", "span_id": "051581bf3cb55c13", "name": "x", "annotator_kind": "ROBOT",
         "created_at": "2026-11-30T10:00:00+00:00"}]}),
     "annotations.json record 1, field annotator_kind: must be HUMAN, LLM or CODE"),
    ("phoenix", "annotations.jsonl",
     '{"id": "a1", "annotation_name": "x", "annotator_kind": "HUMAN", "created_at": "2026-11-30T10:00:00+00:00"}\n',
     "annotations.jsonl line 1, field span_id: missing"),
    ("otel", "traces.jsonl", json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [
        {"traceId": "5b8aa5a2d2c872e8321cf37308d69df2", "spanId": "051581bf3cb55c13",
         "attributes": [{"key": "gen_ai.usage.input_tokens", "value": {"intValue": "twelve"}}]}]}]}]}) + "\n",
     "traces.jsonl line 1, field resourceSpans[0].scopeSpans[0].spans[0].attributes[0].value: intValue is not an"),
    ("otel", "logs.jsonl", json.dumps({"resourceLogs": [{"scopeLogs": [{"logRecords": [
        {"eventName": "gen_ai.evaluation.result", "timeUnixNano": "1796032800000000000",
         "attributes": [{"key": "gen_ai.evaluation.score.label", "value": {"stringValue": "pass"}}]}]}]}]}) + "\n",
     "logs.jsonl line 1, resourceLogs[0].scopeLogs[0].logRecords[0], attribute gen_ai.evaluation.name: missing"),
    ("otel", "metrics.json", '{"resourceMetrics": []}', "metrics.json record 1: not an OTLP JSON export request"),
]


@pytest.mark.parametrize("tool,name,text,message", MALFORMED, ids=[f"{t}-{n}" for t, n, *_ in MALFORMED])
def test_a_malformed_export_is_refused_naming_file_record_and_field(tool, name, text, message, tmp_path):
    (tmp_path / name).write_text(text)
    with pytest.raises(ExportError) as refused:
        convert(tool, [tmp_path / name], Mapping())
    assert str(refused.value).startswith(message), str(refused.value)


def test_labels_are_compared_whatever_their_case_and_spacing():
    mapping = Mapping(up_labels=labels("Thumbs Up, very-good", frozenset()), down_labels=DOWN_LABELS)
    assert [mapping.from_label(x) for x in ("thumbs up", "VERY GOOD", "Not relevant", "meh")] == [
        "up", "up", "down", None]


def test_rmi_feedback_import_lands_the_events_in_the_warehouse_once(rmi_env, tmp_path, capsys):
    from rmi_pipeline.resources import build_resources, layout

    args = ["feedback", "import", "langfuse", *map(str, LANGFUSE), "--threshold", "0.5"]
    assert rmi(*args, "--dry-run", "--output", str(tmp_path)) == 0
    out = capsys.readouterr().out
    assert ("langfuse: 7 scores read (2 traces, 1 observations for their prompts and answers): 4 events, "
            "3 skipped") in out
    written = list(tmp_path.glob("langfuse-*.jsonl"))
    assert len(written) == 1 and len(written[0].read_text().splitlines()) == 4  # a team may drop it in incoming/
    storage = build_resources(rmi_env)["storage"]
    assert storage.list(layout.INCOMING) == []

    assert rmi(*args) == 0
    out = capsys.readouterr().out
    assert "ingested 1 batch(es): 4 rows in, 4 new events, 0 duplicates, 0 quarantined" in out
    warehouse = build_resources(rmi_env)["warehouse"]
    rows = warehouse.query("SELECT event_id, rating, correction, source, batch_id FROM feedback_events "
                           "ORDER BY event_id").rows()
    assert [r[:4] for r in rows] == [(SCORE + "1", "up", None, "user"), (SCORE + "2", "down", None, "user"),
                                     (SCORE + "3", None, "856", "user"), (SCORE + "4", "up", None, "report")]
    assert {r[4] for r in rows} == {written[0].name}

    assert rmi(*args) == 0  # the same export again: nothing new, nothing twice
    assert "has landed before" in capsys.readouterr().out
    assert len(warehouse.query("SELECT * FROM feedback_events")) == 4

    (tmp_path / "broken.json").write_text('[{"id": "s9", "dataType": "BOOLEAN"}]')
    assert rmi("feedback", "import", "langfuse", str(tmp_path / "broken.json")) == 2
    assert "broken.json record 1, field name: missing" in capsys.readouterr().err
