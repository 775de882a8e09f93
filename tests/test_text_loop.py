"""The text recipe goes round the real loop: `rmi run` on a Hugging Face model, its n-gram contamination check on
free text, and its champion loaded by a standard MLflow client in a fresh process."""

import json
import os
import random
import subprocess
import sys

import polars as pl
import pytest
from conftest import RATES_EVERY_ANSWER

from rmi_pipeline.ml.hygiene import ngram_hashes

# 100 steps: a first model that answers 8-9 of the 24 questions below right (seeds 0 and 1; 11 at 200 steps); 20
# for the challenger: what is under test is the loop on free text, not how far it learns; 300 questions, 30% of them
# eval-like, and 10 eval items a slice: the n-gram check still removes some 20 rows of them from training
TEXT = {"RMI_RECIPE": "rmi_pipeline.recipes.words:WordsRecipe", "RMI_MODEL_NAME": "rmi-words",
        "RMI_TRAIN_BOOTSTRAP_STEPS": "100", "RMI_TRAIN_STEPS": "20", "RMI_GATE_FIRST_FLOOR": "0",
        "RMI_SIM_QUERIES_PER_CYCLE": "300", "RMI_SIM_EVAL_LIKE_SHARE": "0.3", **RATES_EVERY_ANSWER,
        "RMI_EVAL_ITEMS_PER_SLICE": "10", "RMI_EVAL_REFRESHED_ITEMS_PER_SLICE": "10",
        "MLFLOW_DISABLE_TELEMETRY": "true",
        "RMI_MIX": '{"practice": 0, "rl": 0, "hint_distill": 0, "self_label": 0}'}  # as make run-hf


@pytest.fixture(scope="module")
def text_home(tmp_path_factory):
    from rmi_pipeline.cli.main import main
    from rmi_pipeline.settings import Settings

    home = tmp_path_factory.mktemp("text") / "home"
    with pytest.MonkeyPatch.context() as mp:
        for key, value in {"RMI_HOME": str(home), **TEXT}.items():
            mp.setenv(key, value)
        code = main(["run", "--cycles", "1", "--fresh"])
        settings = Settings()
    os.environ.pop("DAGSTER_HOME", None)  # main() exported it for its own runs
    return {"home": home, "code": code, "settings": settings,
            "summary": json.loads((home / "run_summary.json").read_text())}


def test_users_questions_about_eval_text_are_kept_out_of_training(text_home):
    from rmi_pipeline.resources import build_resources, layout

    assert text_home["code"] == 0
    cycle = text_home["summary"][-1]
    assert cycle["contamination"]["removed_ngram_overlap"] > 0  # eval-like questions came and were removed
    storage = build_resources(text_home["settings"])["storage"]
    manifest = storage.read_json(layout.EVAL_MANIFEST)
    assert manifest["ngram_n"] == 6 and manifest["ngram_hashes"]
    rows = pl.read_parquet(storage.uri(layout.dataset_rows(storage.read_json(layout.DATASET_LATEST)["version"])))
    sealed = set(manifest["ngram_hashes"])
    assert not any(ngram_hashes(text, 6) & sealed for text in rows["prompt"].to_list() + rows["target"].to_list())


def test_a_fresh_process_loads_the_text_champion_with_mlflow_and_answers_as_the_pipeline(text_home):
    from rmi_pipeline.recipes.words import WordsRecipe
    from rmi_pipeline.resources import build_resources

    settings = text_home["settings"]
    registry = build_resources(settings)["registry"]
    recipe = WordsRecipe()
    prompts = [t.prompt for t in recipe.sample_tasks(random.Random(7), 24, list(recipe.skills),
                                                     list(recipe.tiers))]
    script = ("import json, sys, mlflow, pandas as pd; mlflow.set_tracking_uri(sys.argv[1]); "
              "m = mlflow.pyfunc.load_model(sys.argv[2]); "
              "a = list(m.predict(pd.DataFrame({'prompt': json.loads(sys.argv[3])}))['completion']); "
              "print(json.dumps({'answers': a, 'lightning': 'lightning' in sys.modules}))")
    out = subprocess.run([sys.executable, "-c", script, settings.resolved_tracking_uri, "models:/rmi-words@champion",
                          json.dumps(prompts)], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"})
    assert out.returncode == 0, out.stderr[-2000:]
    pipeline = recipe.answer(registry.load("champion", recipe), prompts)
    # answering needs no training framework: the client never imports Lightning
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"answers": pipeline, "lightning": False}
    assert sum(recipe.verify(p, a)[0] for p, a in zip(prompts, pipeline, strict=True)) > 0  # it learned something
