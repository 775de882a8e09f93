"""Langfuse: scores (users' feedback, annotations, evaluations) with the traces, and the observations if exported,
that hold the prompts and answers they judge.

Shapes read, as Langfuse v3 writes them (its public API's fern definition, fern/apis/server/definition/
{scores,commons}.yml, and the UI's batch export, worker/src/features/database-read-stream/getDatabaseReadStream.ts):
a page of `GET /api/public/v2/scores` (or the older `/api/public/scores`), `/api/public/traces` or
`/api/public/observations` ({"data": [...], "meta": {...}}), or the UI's export of the scores, traces or
observations table as JSON (an array), JSONL or CSV (nested values as JSON text). Files of each kind may be mixed:
a record is a score if it has `dataType`, an observation if it has `type` and `startTime`, a trace if it has `id`
and `timestamp`. docs/how-to/import-feedback.md has the mapping field by field.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .common import Conversion, Mapping, Record, event, number, read_records, text_of, timestamp

# who scored: a person in Langfuse's UI or an app through the API/SDK (users' thumbs) is a user; an evaluator a report
SOURCES = {"ANNOTATION": "user", "API": "user", "EVAL": "report"}
DATA_TYPES = ("NUMERIC", "BOOLEAN", "CATEGORICAL", "CORRECTION", "TEXT")


@dataclass
class Answered:
    """A trace or an observation: what was asked, what was answered, by which model, for whom."""

    input: object
    output: object
    model: str | None = None  # an observation's model
    version: str | None = None  # a trace's (or observation's) version
    release: str | None = None  # a trace's release
    user_id: str | None = None
    trace_id: str | None = None
    kind: str | None = None  # an observation's type: GENERATION, SPAN, EVENT...


def convert(paths: list[Path], mapping: Mapping) -> Conversion:
    scores: list[Record] = []
    traces: dict[str, Answered] = {}
    observations: dict[str, Answered] = {}
    for path in paths:
        for record in read_records(path):
            data = record.data
            if "dataType" in data:
                scores.append(record)
            elif "startTime" in data and "type" in data:
                observations.setdefault(record.string("id", required=True), _observation(record))
            elif "id" in data and "timestamp" in data:
                traces.setdefault(record.string("id", required=True), _trace(record))
            else:
                raise record.fail(None, "neither a Langfuse score (it has dataType), an observation (type and "
                                        "startTime) nor a trace (id and timestamp)")
    out = Conversion("langfuse", context={"traces": len(traces), "observations": len(observations)})
    generations: dict[str, list[Answered]] = {}
    for answered in observations.values():
        if answered.kind == "GENERATION" and answered.trace_id:
            generations.setdefault(answered.trace_id, []).append(answered)
    seen: set[str] = set()
    for record in scores:
        out.read += 1
        _score(record, out, mapping, traces, observations, generations, seen)
    return out


def _trace(record: Record) -> Answered:
    return Answered(record.get("input"), record.get("output"), version=record.string("version"),
                    release=record.string("release"), user_id=record.string("userId"))


def _observation(record: Record) -> Answered:
    return Answered(record.get("input"), record.get("output"), model=record.string("model"),
                    version=record.string("version"), trace_id=record.string("traceId"),
                    kind=(record.string("type") or "").upper())


def _score(record: Record, out: Conversion, mapping: Mapping, traces: dict, observations: dict, generations: dict,
           seen: set[str]) -> None:
    score_id = record.string("id", required=True)
    name = record.string("name", required=True)
    ts = timestamp(record, "timestamp")
    kind = (record.string("dataType") or "NUMERIC").upper()
    if score_id in seen:
        return out.skip(score_id, "the same score twice in the files")
    seen.add(score_id)
    if not mapping.counts(name):
        return out.skip(score_id, "a score name not in --names", name)
    trace_id, observation_id = record.string("traceId"), record.string("observationId")
    if not trace_id and isinstance(record.get("subject"), dict):
        return out.skip(score_id, "a v3 score (its subject nested), which this does not read: export "
                                  "/api/public/v2/scores")
    if not trace_id:
        return out.skip(score_id, "a score of a session or dataset run, not of a trace")

    rating = correction = text = None
    value, label = record.get("value"), record.string("stringValue")
    if kind == "CORRECTION":  # stringValue (v2) or value (v3) holds the corrected answer; value is 0 in v2
        correction = label if label and label.strip() else value if isinstance(value, str) else None
        if not (correction or "").strip():
            return out.skip(score_id, "an empty correction")
    elif kind == "TEXT":
        text = label if label and label.strip() else value if isinstance(value, str) else None
        if not (text or "").strip():
            return out.skip(score_id, "an empty text score")
    elif kind in ("BOOLEAN", "NUMERIC"):
        found = number(value)
        if found is None and kind == "BOOLEAN" and label:
            found = {"true": 1.0, "false": 0.0}.get(label.strip().lower())
        if found is None:
            return out.skip(score_id, f"a {kind} score without a number", f"value {value!r}")
        if kind == "BOOLEAN":
            rating = "up" if found else "down"
        else:
            rating, reason = mapping.from_value(found)
            if rating is None:
                return out.skip(score_id, reason, f"{name} = {found:g}")
    elif kind == "CATEGORICAL":
        label = label or (value if isinstance(value, str) else None)
        if label is None:
            return out.skip(score_id, "a CATEGORICAL score without a label")
        rating = mapping.from_label(label)
        if rating is None:
            return out.skip(score_id, "a label in neither --up-labels nor --down-labels", f"{name} = {label!r}")
    else:
        return out.skip(score_id, "a data type the importer does not map", kind)

    trace = traces.get(trace_id)
    observation = observations.get(observation_id) if observation_id else None
    only = generations.get(trace_id, [])
    generation = observation or (only[0] if len(only) == 1 else None)  # the model that answered, where known
    holder = next((a for a in (observation, trace, generation) if a is not None and (a.input or a.output)), None)
    if holder is None:
        missing = f"trace {trace_id}" + (f", observation {observation_id}" if observation_id else "")
        return out.skip(score_id, "its trace is not in the files (or has no input and output)", missing)
    prompt, completion = text_of(holder.input, "prompt"), text_of(holder.output, "answer")
    if prompt is None:
        return out.skip(score_id, "no prompt text in the input of its trace or observation", f"trace {trace_id}")
    if completion is None:
        return out.skip(score_id, "no answer text in the output of its trace or observation", f"trace {trace_id}")
    model = mapping.model_version or next(
        (v for v in (generation and generation.model, generation and generation.version, trace and trace.version,
                     trace and trace.release) if v), None)
    if model is None:
        return out.skip(score_id, "no model version (no generation model, trace version or release); pass "
                                  "--model-version", f"trace {trace_id}")
    nested = record.get("trace") if isinstance(record.get("trace"), dict) else {}
    user = next((u for u in ((trace and trace.user_id), record.string("userId"), nested.get("userId"))
                 if isinstance(u, str) and u), mapping.anonymous_user)
    source = record.string("source")
    comment = record.string("comment")
    if text is not None:
        comment = f"{text}\n\n{comment}" if comment else text
    meta = {"imported_from": "langfuse", "langfuse_score_id": score_id, "langfuse_trace_id": trace_id,
            "langfuse_observation_id": observation_id, "langfuse_score_name": name, "langfuse_data_type": kind,
            "langfuse_score_source": source, "langfuse_environment": record.string("environment")}
    if kind in ("NUMERIC", "BOOLEAN", "CATEGORICAL"):
        meta["langfuse_value"] = label if kind == "CATEGORICAL" else number(value)
    out.events.append(event(
        event_id=f"langfuse:{score_id}", ts=ts, user_id=user, model_version=model, prompt=prompt,
        completion=completion, rating=rating, correction=correction, comment=comment,
        source=mapping.source or SOURCES.get((source or "API").upper(), "user"),
        meta={k: v for k, v in meta.items() if v is not None}))
    return None
