"""OpenTelemetry: GenAI evaluation results (`gen_ai.evaluation.result` events) with the generation spans they judge,
from OTLP JSON files.

Shapes read: OTLP/JSON export requests (opentelemetry-proto 1.5+), one per line as the Collector's file exporter
writes them (or one per file): {"resourceSpans": [{"resource", "scopeSpans": [{"spans": [...]}]}]} and
{"resourceLogs": [{"resource", "scopeLogs": [{"logRecords": [...]}]}]}, attributes as [{"key", "value":
{"stringValue" | "intValue" | "doubleValue" | "boolValue" | "arrayValue" | "kvlistValue"}}], ids in hex. Names
follow the GenAI semantic conventions v1.41 (the last in open-telemetry/semantic-conventions before they moved to
semantic-conventions-genai): the evaluation event is a log record named by `eventName` (or an `event.name`
attribute), linked to the evaluated span by its span id or by `gen_ai.response.id`, or an event of that span;
the span's prompt and answer are `gen_ai.input.messages` / `gen_ai.output.messages`, or the older content events
(`gen_ai.user.message`, `gen_ai.choice`; `gen_ai.content.prompt` / `gen_ai.content.completion`) and
`gen_ai.prompt.<i>.content` / `gen_ai.completion.<i>.content` attributes. docs/how-to/import-feedback.md has the
mapping field by field.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field
from pathlib import Path

from .common import (
    Conversion,
    ExportError,
    Mapping,
    Record,
    event,
    from_epoch,
    number,
    read_records,
    stable_id,
    text_of,
)

EVALUATION = "gen_ai.evaluation.result"
MODEL_KEYS = ("gen_ai.response.model", "gen_ai.request.model")
USER_KEYS = ("user.id", "enduser.id")


@dataclass
class Span:
    trace_id: str
    span_id: str
    attributes: dict
    resource: dict
    end_ns: int = 0
    prompts: list = field(default_factory=list)  # content events' texts, in order
    answers: list = field(default_factory=list)


@dataclass
class Evaluation:
    where: str
    trace_id: str
    span_id: str
    time_ns: int
    attributes: dict
    span: Span | None = None  # the span it is an event of


def convert(paths: list[Path], mapping: Mapping) -> Conversion:
    spans: dict[str, Span] = {}
    evaluations: list[Evaluation] = []
    content: list[tuple[str, str, object]] = []  # (span id, "prompt" or "answer", text or messages) from logs
    for path in paths:
        for record in read_records(path, unwrap=None):
            if "resourceSpans" not in record.data and "resourceLogs" not in record.data:
                raise record.fail(None, "not an OTLP JSON export request (resourceSpans or resourceLogs)")
            _read_spans(record, spans, evaluations)
            _read_logs(record, evaluations, content)
    for span_id, kind, value in content:
        if span_id in spans:
            (spans[span_id].prompts if kind == "prompt" else spans[span_id].answers).append(value)
    by_response = {s.attributes["gen_ai.response.id"]: s for s in spans.values()
                   if isinstance(s.attributes.get("gen_ai.response.id"), str)}
    out = Conversion("otel", "evaluations", context={"spans": len(spans)})
    seen: set[str] = set()
    for evaluation in evaluations:
        out.read += 1
        _evaluation(evaluation, out, mapping, spans, by_response, seen)
    return out


def _items(parent: dict, key: str, where: str, record: Record) -> list[tuple[str, dict]]:
    value = parent.get(key) or []
    if not isinstance(value, list):
        raise record.fail(f"{where}{key}", "must be an array")
    items = []
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise record.fail(f"{where}{key}[{i}]", "must be an object")
        items.append((f"{where}{key}[{i}]", item))
    return items


def _read_spans(record: Record, spans: dict[str, Span], evaluations: list[Evaluation]) -> None:
    for at, resource_spans in _items(record.data, "resourceSpans", "", record):
        resource = _attributes(resource_spans.get("resource") or {}, f"{at}.resource", record)
        for at_scope, scope in _items(resource_spans, "scopeSpans", f"{at}.", record):
            for where, item in _items(scope, "spans", f"{at_scope}.", record):
                span = Span(_id(item, "traceId", where, record), _id(item, "spanId", where, record),
                            _attributes(item, where, record), resource, _nanos(item, "endTimeUnixNano", where, record))
                spans.setdefault(span.span_id, span)
                for at_event, span_event in _items(item, "events", f"{where}.", record):
                    name, attributes = span_event.get("name"), _attributes(span_event, at_event, record)
                    if name == EVALUATION:
                        evaluations.append(Evaluation(
                            f"{record.where()}, {at_event}", span.trace_id, span.span_id,
                            _nanos(span_event, "timeUnixNano", at_event, record), attributes, span))
                    elif name == "gen_ai.content.prompt" and "gen_ai.prompt" in attributes:
                        span.prompts.append(_json(attributes["gen_ai.prompt"]))
                    elif name == "gen_ai.content.completion" and "gen_ai.completion" in attributes:
                        span.answers.append(_json(attributes["gen_ai.completion"]))


def _read_logs(record: Record, evaluations: list[Evaluation], content: list) -> None:
    for at, resource_logs in _items(record.data, "resourceLogs", "", record):
        for at_scope, scope in _items(resource_logs, "scopeLogs", f"{at}.", record):
            for where, item in _items(scope, "logRecords", f"{at_scope}.", record):
                attributes = _attributes(item, where, record)
                name = item.get("eventName") or attributes.get("event.name")
                if name not in (EVALUATION, "gen_ai.user.message", "gen_ai.choice",
                                "gen_ai.client.inference.operation.details"):
                    continue
                span_id = _id(item, "spanId", where, record, required=False)
                if name == EVALUATION:
                    time_ns = (_nanos(item, "timeUnixNano", where, record)
                               or _nanos(item, "observedTimeUnixNano", where, record))
                    evaluations.append(Evaluation(f"{record.where()}, {where}",
                                                  _id(item, "traceId", where, record, required=False),
                                                  span_id, time_ns, attributes))
                    continue
                body = _any(item.get("body") or {}, f"{where}.body", record)
                if name == "gen_ai.user.message" and isinstance(body, dict):
                    content.append((span_id, "prompt", body.get("content")))
                elif name == "gen_ai.choice" and isinstance(body, dict) and isinstance(body.get("message"), dict):
                    content.append((span_id, "answer", body["message"].get("content")))
                elif name == "gen_ai.client.inference.operation.details":
                    for key, kind in (("gen_ai.input.messages", "prompt"), ("gen_ai.output.messages", "answer")):
                        if key in attributes:
                            content.append((span_id, kind, {"messages": _json(attributes[key])}))


def _evaluation(evaluation: Evaluation, out: Conversion, mapping: Mapping, spans: dict[str, Span],
                by_response: dict[str, Span], seen: set[str]) -> None:
    attributes = evaluation.attributes
    name = attributes.get("gen_ai.evaluation.name")
    if not isinstance(name, str) or not name:
        raise ExportError(f"{evaluation.where}, attribute gen_ai.evaluation.name: missing (it is required)")
    label = attributes.get("gen_ai.evaluation.score.label")
    label = label if isinstance(label, str) and label else None
    value = number(attributes.get("gen_ai.evaluation.score.value"))
    response_id = attributes.get("gen_ai.response.id")
    event_id = stable_id("otel", evaluation.trace_id, evaluation.span_id, response_id or "", name,
                         evaluation.time_ns, label or "", "" if value is None else repr(value))
    subject = f"span {evaluation.span_id}" if evaluation.span_id else f"response {response_id or '?'}"
    source_id = f"{name} on {subject} at {evaluation.time_ns}"
    if event_id in seen:
        return out.skip(source_id, "the same evaluation twice in the files")
    seen.add(event_id)
    if not mapping.counts(name):
        return out.skip(source_id, "an evaluation name not in --names", name)
    if isinstance(attributes.get("error.type"), str):
        return out.skip(source_id, "the evaluation ended in an error", f"error.type {attributes['error.type']}")
    rating, reason, detail = mapping.rating(label, value)
    if rating is None:
        return out.skip(source_id, reason, f"{name}: {detail}" if detail else name)
    span = evaluation.span or spans.get(evaluation.span_id) or by_response.get(response_id)
    if span is None:
        return out.skip(source_id, "the evaluated span is not in the files",
                        f"span {evaluation.span_id or '-'}, gen_ai.response.id {response_id or '-'}")
    prompt, completion = _prompt(span), _answer(span)
    if prompt is None:
        return out.skip(source_id, "no prompt text on the evaluated span (gen_ai.input.messages or content "
                                   "events; content capture may be off)", f"span {span.span_id}")
    if completion is None:
        return out.skip(source_id, "no answer text on the evaluated span (gen_ai.output.messages or content "
                                   "events; content capture may be off)", f"span {span.span_id}")
    model = mapping.model_version or next((v for k in MODEL_KEYS if isinstance(v := span.attributes.get(k), str)
                                           and v), None)
    if model is None:
        return out.skip(source_id, "no model version (no gen_ai.response.model or gen_ai.request.model); pass "
                                   "--model-version", f"span {span.span_id}")
    time_ns = evaluation.time_ns or span.end_ns
    stamp = from_epoch(time_ns) if time_ns else None
    if stamp is None:
        return out.skip(source_id, "no time on the evaluation or its span")
    user = next((v for attrs in (span.attributes, span.resource) for k in USER_KEYS
                 if isinstance(v := attrs.get(k), str) and v), mapping.anonymous_user)
    explanation = attributes.get("gen_ai.evaluation.explanation")
    meta = {"imported_from": "otel", "otel_trace_id": span.trace_id, "otel_span_id": span.span_id,
            "otel_evaluation_name": name, "otel_score_label": label, "otel_score_value": value,
            "otel_response_id": response_id if isinstance(response_id, str) else None}
    out.events.append(event(
        event_id=event_id, ts=stamp.isoformat(), user_id=user, model_version=model, prompt=prompt,
        completion=completion, rating=rating, comment=explanation if isinstance(explanation, str) and explanation
        else None, source=mapping.source or "report", meta={k: v for k, v in meta.items() if v is not None}))
    return None


def _prompt(span: Span) -> str | None:
    return (text_of(_json(span.attributes.get("gen_ai.input.messages")), "prompt")
            or next((t for v in reversed(span.prompts) if (t := text_of(v, "prompt"))), None)
            or text_of(_indexed(span.attributes, "gen_ai.prompt"), "prompt"))


def _answer(span: Span) -> str | None:
    messages = _json(span.attributes.get("gen_ai.output.messages"))
    if isinstance(messages, list) and messages:
        messages = messages[:1]  # each output message is one choice: the first is the one shown
    return (text_of(messages, "answer")
            or next((t for v in span.answers if (t := text_of(v, "answer"))), None)
            or text_of(_indexed(span.attributes, "gen_ai.completion"), "answer"))


def _indexed(attributes: dict, key: str) -> list[dict] | None:
    """`<key>.<i>.role` / `<key>.<i>.content` attributes (OpenLLMetry's, before the content events) as messages."""
    indexed: dict[int, dict] = {}
    for name, value in attributes.items():
        if name.startswith(key + "."):
            index, _, rest = name[len(key) + 1:].partition(".")
            if index.isdigit():
                indexed.setdefault(int(index), {})[rest] = value
    messages = [indexed[i] for i in sorted(indexed)]
    if key == "gen_ai.completion":
        messages = [{"role": "assistant", **m} for m in messages[:1]]
    return messages or None


def _json(value):
    """Messages recorded on a span as JSON text, decoded."""
    if not isinstance(value, str) or value.lstrip()[:1] not in "[{":
        return value
    try:
        return json.loads(value)
    except (ValueError, RecursionError):
        return value


def _id(item: dict, key: str, where: str, record: Record, required: bool = True) -> str:
    """A trace or span id as hex: OTLP/JSON writes hex; some protobuf JSON writers write base64."""
    value = item.get(key)
    if value in (None, ""):
        if required:
            raise record.fail(f"{where}.{key}", "missing")
        return ""
    if not isinstance(value, str):
        raise record.fail(f"{where}.{key}", "must be text")
    if len(value) in (16, 32) and all(c in "0123456789abcdefABCDEF" for c in value):
        return value.lower()
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) in (8, 16):
        return raw.hex()
    raise record.fail(f"{where}.{key}", f"not a trace or span id: {value[:40]!r}")


def _nanos(item: dict, key: str, where: str, record: Record) -> int:
    value = item.get(key)
    if value in (None, "", 0, "0"):
        return 0
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    raise record.fail(f"{where}.{key}", "must be nanoseconds since the epoch (an integer or its digits)")


def _attributes(item: dict, where: str, record: Record) -> dict:
    """An OTLP attribute list as a dict of plain values."""
    out = {}
    for at, pair in _items(item, "attributes", f"{where}.", record):
        key = pair.get("key")
        if not isinstance(key, str):
            raise record.fail(f"{at}.key", "missing or not text")
        out[key] = _any(pair.get("value") or {}, f"{at}.value", record)
    return out


def _any(value, where: str, record: Record, depth: int = 0):
    """An OTLP AnyValue as a plain value: text, number, boolean, list or dict."""
    if not isinstance(value, dict) or depth > 64:
        raise record.fail(where, "not an OTLP AnyValue")
    if "stringValue" in value:
        return value["stringValue"]
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "intValue" in value:
        try:
            return int(value["intValue"])
        except (TypeError, ValueError):
            raise record.fail(where, "intValue is not an integer") from None
    if "doubleValue" in value:
        return number(value["doubleValue"])
    if "arrayValue" in value:
        values = _values(value["arrayValue"], f"{where}.arrayValue", record)
        return [_any(v, f"{where}.arrayValue.values[{i}]", record, depth + 1) for i, v in enumerate(values)]
    if "kvlistValue" in value:
        pairs = _values(value["kvlistValue"], f"{where}.kvlistValue", record)
        return {p.get("key"): _any(p.get("value") or {}, f"{where}.kvlistValue.values[{i}]", record, depth + 1)
                for i, p in enumerate(pairs) if isinstance(p, dict) and isinstance(p.get("key"), str)}
    if "bytesValue" in value:
        return None  # binary content is no prompt or answer
    return None


def _values(container, where: str, record: Record) -> list:
    if not container:
        return []
    values = (container.get("values") or []) if isinstance(container, dict) else None
    if not isinstance(values, list):
        raise record.fail(f"{where}.values", "must be an array")
    return values
