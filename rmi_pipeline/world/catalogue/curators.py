"""The team's eval file: questions its people wrote about the catalogue, one JSON line each, as a team brings it.

Curators ask in their own phrasings, some of which users share and some not, so the file tests what a model knows
rather than the words it saw. Each line is {"input", "target", "topic", "id"}; the pipeline slices it by `topic`.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from .facts import Catalogue
from .questions import CURATORS, TOPICS, every_question


def eval_rows(catalogue: Catalogue, rng: random.Random, per_topic: int = 60) -> list[dict]:
    """`per_topic` distinct curator questions on each topic, drawn without replacement from every fact in every
    curator phrasing: no input twice, so no slice counts one question twice."""
    rows = []
    for topic in TOPICS:
        pool = every_question(catalogue, CURATORS, [topic])
        if per_topic > len(pool):
            raise ValueError(f"the catalogue has only {len(pool)} curator questions on {topic}, not {per_topic}")
        for i, task in enumerate(rng.sample(pool, per_topic)):
            rows.append({"input": task.prompt, "target": task.answer, "topic": topic, "id": f"{topic}-{i:03d}"})
    return rows


def write_eval_file(path: Path | str, catalogue: Catalogue, rng: random.Random, per_topic: int = 60) -> list[dict]:
    """The eval file at `path` (JSONL, UTF-8); returns its rows."""
    rows = eval_rows(catalogue, rng, per_topic)
    Path(path).write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return rows
