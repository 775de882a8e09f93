"""Arize Phoenix: span (and trace) annotations, with the spans that hold the prompts and answers they judge.

Shapes read, as Phoenix 20 and its client 3.3 write them (src/phoenix/server/api/routers/v1/spans.py,
packages/phoenix-client/.../resources/spans): a page of `GET /v1/projects/{project}/span_annotations` or
`.../trace_annotations` ({"data": [...], "next_cursor": ...}: id, span_id or trace_id, name, annotator_kind, result
{label, score, explanation}, metadata, identifier, source, user_id, created_at, updated_at), a page of
`GET /v1/projects/{project}/spans` (name, context {trace_id, span_id}, parent_id, span_kind, start_time, attributes
flattened to dotted OpenInference keys), or the client's dataframes written with pandas (`to_json(orient=
"records")`, JSON lines, CSV or Parquet, after `reset_index()` so that the span id is a column): annotations as
span_id, annotation_name, annotator_kind, result.label, result.score, result.explanation...; spans as
context.span_id, context.trace_id, parent_id, attributes.input.value, attributes.llm.model_name... A record is an
annotation if it has `annotator_kind`, a span if it has a span context. docs/how-to/import-feedback.md has the
mapping field by field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from .common import Conversion, Mapping, Record, event, number, read_records, stable_id, text_of, timestamp

KINDS = {"HUMAN": "user", "LLM": "report", "CODE": "report"}  # annotator_kind: a person, or an evaluator
MODEL_KEYS = ("llm.model_name", "gen_ai.response.model", "gen_ai.request.model")
USER_KEYS = ("user.id", "enduser.id")


@dataclass
class Span:
    span_id: str
    trace_id: str | None
    parent_id: str | None
    attributes: dict = field(default_factory=dict)

    def first(self, keys: tuple[str, ...]) -> str | None:
        return next((v for k in keys if isinstance(v := self.attributes.get(k), str) and v), None)


def convert(paths: list[Path], mapping: Mapping) -> Conversion:
    annotations: list[Record] = []
    spans: dict[str, Span] = {}
    for path in paths:
        for record in read_records(path):
            if "annotator_kind" in record.data:
                annotations.append(record)
            elif isinstance(record.data.get("context"), dict) or "context.span_id" in record.data:
                span = _span(record)
                spans.setdefault(span.span_id, span)
            else:
                raise record.fail(None, "neither a Phoenix annotation (it has annotator_kind) nor a span (context."
                                        "span_id)")
    traces: dict[str, list[Span]] = {}
    for span in spans.values():
        traces.setdefault(span.trace_id or "", []).append(span)
    out = Conversion("phoenix", "annotations", context={"spans": len(spans)})
    seen: set[str] = set()
    for record in annotations:
        out.read += 1
        _annotation(record, out, mapping, spans, traces, seen)
    return out


def _span(record: Record) -> Span:
    data = record.data
    if isinstance(data.get("context"), dict):  # the REST API's span
        context = data["context"]
        span_id, trace_id = context.get("span_id"), context.get("trace_id")
        if not isinstance(span_id, str) or not span_id:
            raise record.fail("context.span_id", "missing or not text")
        attributes = data.get("attributes") or {}
        if not isinstance(attributes, dict):
            raise record.fail("attributes", "must be an object")
    else:  # a row of get_spans_dataframe: attributes as columns "attributes.<key>"
        span_id, trace_id = record.string("context.span_id", required=True), record.string("context.trace_id")
        attributes = {k.removeprefix("attributes."): record.get(k) for k in data if k.startswith("attributes.")}
    return Span(span_id, trace_id if isinstance(trace_id, str) else None, record.string("parent_id"),
                {k: v for k, v in _flat(attributes).items() if v is not None})


def _flat(values: dict, prefix: str = "") -> dict:
    """Nested objects as dotted keys, the way OpenInference names attributes (lists are left as they are)."""
    out = {}
    for key, value in values.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _annotation(record: Record, out: Conversion, mapping: Mapping, spans: dict[str, Span],
                traces: dict[str, list[Span]], seen: set[str]) -> None:
    data = record.data
    name = record.string("name", "annotation_name", required=True)
    kind = record.string("annotator_kind", required=True).upper()
    if kind not in KINDS:
        raise record.fail("annotator_kind", f"must be HUMAN, LLM or CODE, not {kind!r}")
    ts = timestamp(record, "created_at", "updated_at")
    annotation_id = record.string("id")
    span_id, trace_id = record.string("span_id", "context.span_id"), record.string("trace_id")
    if not span_id and not trace_id:
        if record.string("session_id"):
            out.skip(annotation_id or name, "an annotation of a session, not of a span or trace")
            return
        raise record.fail("span_id", "missing (write the annotations dataframe with its index: "
                                     "df.reset_index().to_json(...))")
    result = data.get("result")
    if result is None:
        result = {k.removeprefix("result."): record.get(k) for k in data if k.startswith("result.")}
    if not isinstance(result, dict):
        raise record.fail("result", "must be an object with label, score and explanation")
    label = result.get("label") if isinstance(result.get("label"), str) and result.get("label") else None
    score = number(result.get("score"))
    explanation = result.get("explanation") if isinstance(result.get("explanation"), str) else None
    identifier = record.string("identifier") or ""
    event_id = (f"phoenix:{annotation_id}" if annotation_id
                else stable_id("phoenix", span_id or "", trace_id or "", name, identifier))
    source_id = annotation_id or f"{name} on {span_id or trace_id}"
    if event_id in seen:
        return out.skip(source_id, "the same annotation twice in the files")
    seen.add(event_id)
    if not mapping.counts(name):
        return out.skip(source_id, "an annotation name not in --names", name)
    rating, reason, detail = mapping.rating(label, score)
    if rating is None:
        return out.skip(source_id, reason, f"{name}: {detail}" if detail else name)

    span = spans.get(span_id) if span_id else _root(traces.get(trace_id or "", []))
    if span is None:
        return out.skip(source_id, "its span is not in the files", f"span {span_id}" if span_id else
                        f"trace {trace_id}")
    prompt, completion = _prompt(span.attributes), _answer(span.attributes)
    if prompt is None:
        return out.skip(source_id, "no prompt text in its span (input.value, llm.input_messages)",
                        f"span {span.span_id}")
    if completion is None:
        return out.skip(source_id, "no answer text in its span (output.value, llm.output_messages)",
                        f"span {span.span_id}")
    family = traces.get(span.trace_id or "", []) if span.trace_id else [span]
    model = mapping.model_version or span.first(MODEL_KEYS) or _only(s.first(MODEL_KEYS) for s in family)
    if model is None:
        return out.skip(source_id, "no model version (no llm.model_name in its trace); pass --model-version",
                        f"span {span.span_id}")
    user = span.first(USER_KEYS) or _only(s.first(USER_KEYS) for s in family) or mapping.anonymous_user
    meta = {"imported_from": "phoenix", "phoenix_annotation_id": annotation_id, "phoenix_span_id": span.span_id,
            "phoenix_trace_id": span.trace_id, "phoenix_annotation_name": name, "phoenix_annotator_kind": kind,
            "phoenix_label": label, "phoenix_score": score, "phoenix_identifier": identifier or None,
            "phoenix_annotator_user_id": record.string("user_id")}
    out.events.append(event(
        event_id=event_id, ts=ts, user_id=user, model_version=model, prompt=prompt, completion=completion,
        rating=rating, comment=explanation or None, source=mapping.source or KINDS[kind],
        meta={k: v for k, v in meta.items() if v is not None}))
    return None


def _root(spans: list[Span]) -> Span | None:
    """A trace's root span: the one without a parent among those in the files."""
    ids = {s.span_id for s in spans}
    roots = [s for s in spans if not s.parent_id or s.parent_id not in ids]
    return roots[0] if len(roots) == 1 else None


def _only(values) -> str | None:
    """The value a trace's spans agree on, where exactly one is found."""
    found = {v for v in values if v}
    return found.pop() if len(found) == 1 else None


def _prompt(attributes: dict) -> str | None:
    return (text_of(_messages(attributes, "llm.input_messages"), "prompt")
            or _value_text(attributes, "input", "prompt")
            or text_of(_json(attributes.get("gen_ai.input.messages")), "prompt"))


def _answer(attributes: dict) -> str | None:
    return (text_of(_messages(attributes, "llm.output_messages"), "answer")
            or _value_text(attributes, "output", "answer")
            or text_of(_json(attributes.get("gen_ai.output.messages")), "answer"))


def _value_text(attributes: dict, kind: str, want: str) -> str | None:
    """input.value / output.value: text, or JSON text where the span's mime type says so (or it reads as JSON)."""
    value = attributes.get(f"{kind}.value")
    if not isinstance(value, str):
        return text_of(value, want)
    if attributes.get(f"{kind}.mime_type") == "application/json" or value.lstrip()[:1] in "{[":
        decoded = _json(value)
        if decoded is not value:
            return text_of(decoded, want)
    return value if value.strip() else None


def _json(value):
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except (ValueError, RecursionError):
        return value


def _messages(attributes: dict, key: str) -> list[dict] | None:
    """OpenInference messages: a list of {"message.role", "message.content"} (the spans dataframe) or keys
    `<key>.<i>.message.role` (the REST API); content may be parts under message.contents."""
    items = _json(attributes.get(key))
    if not isinstance(items, list):
        indexed: dict[int, dict] = {}
        for name, value in attributes.items():
            if name.startswith(key + "."):
                index, _, rest = name[len(key) + 1:].partition(".")
                if index.isdigit():
                    indexed.setdefault(int(index), {})[rest] = value
        items = [indexed[i] for i in sorted(indexed)]
    messages = []
    for item in items:
        if not isinstance(item, dict):
            continue
        item = _flat(item)
        content = item.get("message.content")
        if not isinstance(content, str):
            content = _contents(item)
        messages.append({"role": item.get("message.role"), "content": content})
    return messages or None


def _contents(item: dict) -> list[dict]:
    """message.contents as text parts, from a list or from keys `message.contents.<i>.message_content.text`."""
    listed = item.get("message.contents")
    parts = [_flat(p) for p in listed if isinstance(p, dict)] if isinstance(listed, list) else []
    if not parts:
        indexed: dict[int, dict] = {}
        for name, value in item.items():
            if name.startswith("message.contents."):
                index, _, rest = name[len("message.contents."):].partition(".")
                if index.isdigit():
                    indexed.setdefault(int(index), {})[rest] = value
        parts = [indexed[i] for i in sorted(indexed)]
    return [{"type": "text", "text": p["message_content.text"]} for p in parts
            if isinstance(p.get("message_content.text"), str) and p.get("message_content.type", "text") == "text"]
