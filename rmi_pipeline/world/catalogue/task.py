"""The catalogue task as the world runs it: what a team brings (its model, its eval file), the catalogue in force,
and the truth the world's judge grades by.

The catalogue in force lives in a file of the world's folder (catalogue.json), so the judge, a process of its own,
grades an answer that has no reference against today's catalogue: a drift writes the new one there.

    python -m rmi_pipeline.world prepare --task catalogue --folder DIR   writes the team's model and eval file
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import asdict
from functools import lru_cache
from pathlib import Path

from ...ml.tasks import Task
from .curators import write_eval_file
from .facts import Catalogue, Drift, Plan, Product, ReturnPolicy, Shipping, drift, make_catalogue
from .questions import ASKERS, asserting, belief, every_question, is_right, matches, questions, unasserted
from .team_model import write_team_model

STATE = "catalogue.json"
STATE_VARIABLE = "RMI_WORLD_CATALOGUE"  # the judge's process finds the catalogue in force here
MATCHER = "rmi_pipeline.world.catalogue.task:graded"  # what the world's judge grades with
TEAM_MODEL, EVAL_FILE = "team-model", "eval.jsonl"
RECIPE = "rmi_pipeline.recipes.hf.text:TextRecipe"  # a model and nothing else: no generator, no verifier


def save(catalogue: Catalogue, folder: Path) -> Path:
    path = folder / STATE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(catalogue)))
    tmp.replace(path)  # whole or not at all: the judge may be reading it
    return path


def load(path: Path) -> Catalogue:
    data = json.loads(Path(path).read_text())
    return Catalogue(tuple(Product(**p) for p in data["products"]), tuple(Plan(**p) for p in data["plans"]),
                     tuple(Shipping(**s) for s in data["shipping"]), tuple(ReturnPolicy(**r) for r in data["returns"]))


def prepare(folder: Path, seed: int) -> dict[str, str]:
    """What a team brings, written into `folder` once (its model trained on an old FAQ, its curators' eval file),
    and the settings it would set to point the loop at them."""
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / STATE).exists():
        catalogue = make_catalogue(seed)
        write_team_model(folder / TEAM_MODEL, catalogue, seed=seed)
        write_eval_file(folder / EVAL_FILE, catalogue, random.Random(f"curators-{seed}"))
        save(catalogue, folder)  # last: its presence says the rest is there
    return {"RMI_RECIPE": RECIPE, "RMI_HF_MODEL": str(folder / TEAM_MODEL),
            "RMI_EVAL_FILES": str(folder / EVAL_FILE), "RMI_EVAL_SLICE_BY": "topic", "RMI_EVAL_SCORER": "judge",
            "RMI_MODEL_NAME": "rmi-catalogue"}


class CatalogueTask:
    """The world's users on the catalogue in force: their questions, whether an answer is right, and the drift."""

    tags_topic = True  # the shop's app names each question's topic in its feedback (the live rates' slice)

    def __init__(self, folder: Path, asserting_share: float = 0.0):
        """`asserting_share`: users who assert a wrong answer in their question (RMI_SIM_ASSERTING_SHARE)."""
        self.folder, self.asserting_share = folder, asserting_share
        self.catalogue = load(folder / STATE)

    def questions(self, rng: random.Random, n: int, cycle: int, drift=None) -> list[Task]:
        asked = questions(rng, self.catalogue, n)
        if not self.asserting_share:
            return asked
        return [asserting(rng, self.catalogue, 1)[0][0] if rng.random() < self.asserting_share else task
                for task in asked]

    @staticmethod
    def is_right(task: Task, completion: str) -> bool:
        return is_right(task, completion)

    @staticmethod
    def belief(task: Task, completion: str) -> tuple[Task, bool]:
        """What the asker rates by: an asserting user's wrong answer (questions.belief), anyone else's the truth."""
        return belief(task, completion)

    @staticmethod
    def well_formed(completion: str) -> bool:
        return bool(completion.strip())

    def change(self, rng: random.Random) -> Drift:
        """Prices change under the model: the judge grades by the new ones from now on, and the team's curators
        bring their eval file up to date (the same questions, today's answers), as a team does when its prices
        change (a file that kept the old prices would fail every model that learned the new ones)."""
        changed = drift(self.catalogue, rng)
        self.catalogue = changed.catalogue
        truth = {t.prompt: t.answer for asker in ASKERS for t in every_question(self.catalogue, asker)}
        path = self.folder / EVAL_FILE
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        tmp = path.with_suffix(".tmp")
        tmp.write_text("".join(json.dumps({**r, "target": truth.get(r["input"], r["target"])}) + "\n" for r in rows))
        tmp.replace(path)
        save(self.catalogue, self.folder)
        return changed


def graded(question: str, reference: str | None, answer: str) -> bool:
    """The judge's truth: the reference where the item has one, else the catalogue in force's answer to the
    question (a question the catalogue does not answer fails)."""
    if reference:
        return matches(question, reference, answer)
    truth = _truths(os.environ[STATE_VARIABLE], _mtime(os.environ[STATE_VARIABLE])).get(unasserted(question))
    return truth is not None and matches(question, truth, answer)


def _mtime(path: str) -> float:
    return os.stat(path).st_mtime_ns


@lru_cache(maxsize=4)
def _truths(path: str, mtime: float) -> dict[str, str]:
    """Every question anyone asks of the catalogue at `path`, with its answer (read again when the file changes)."""
    catalogue = load(Path(path))
    return {t.prompt: t.answer for asker in ASKERS for t in every_question(catalogue, asker)}
