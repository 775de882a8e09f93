"""A reward model from users' thumbs (ml/reward.py): what a team relies on is that it learns what users like from
ratings alone, says honestly how well it forecasts ratings it never saw, and that its picks are kept only where it
beats the base rate: one trained on thumbs that carry no signal keeps nothing."""

import random

import pytest

from rmi_pipeline.ml import reward
from rmi_pipeline.ml.hygiene import is_mined_holdout


@pytest.fixture(scope="module")
def rated(tmp_path_factory):
    """The catalogue team's model (it knows 40% of the facts) answering users' questions, greedy and sampled, each
    answer rated up exactly when it is right; the ratings split by a hash of the prompt."""
    import os

    from rmi_pipeline.recipes.base import load_recipe
    from rmi_pipeline.world.catalogue import facts, questions, team_model

    shop = facts.make_catalogue(0)
    path = tmp_path_factory.mktemp("team-model")
    team_model.write_team_model(path, shop, seed=0)
    os.environ["RMI_HF_MODEL"] = str(path)
    try:
        recipe = load_recipe("rmi_pipeline.recipes.hf.text:TextRecipe")
        module = recipe.build_model(learning_rate=3e-4, max_steps=150)
    finally:
        del os.environ["RMI_HF_MODEL"]
    tasks = questions.questions(random.Random(1), shop, 500)
    answers = [a for group in recipe.sample(module, [t.prompt for t in tasks], 2, 1.0, seed=3) for a in group]
    asked = [t for t in tasks for _ in range(2)]
    rows = [(t.prompt, a, questions.is_right(t, a)) for t, a in zip(asked, answers, strict=True) if a.strip()]
    held = [is_mined_holdout(recipe.prompt_hash(p), 0.25) for p, _, _ in rows]
    return {"recipe": recipe, "checkpoint": recipe.checkpoint(module), "shop": shop, "tasks": tasks,
            "train": [r for r, h in zip(rows, held, strict=True) if not h],
            "test": [r for r, h in zip(rows, held, strict=True) if h]}


def _fit(rated, labels):
    recipe = rated["recipe"]
    backbone = recipe.load_checkpoint(rated["checkpoint"], 3e-4, 150)
    prompts, answers = [r[0] for r in rated["train"]], [r[1] for r in rated["train"]]
    model = reward.train_reward_model(recipe, backbone, prompts, answers, labels, steps=150, batch_size=32,
                                      learning_rate=3e-4, seed=0)
    test = rated["test"]
    forecasts = reward.scores(model, [r[0] for r in test], [r[1] for r in test])
    return model, reward.calibration(forecasts, [r[2] for r in test], sum(labels) / len(labels))


def test_thumbs_that_follow_the_truth_teach_a_reward_model_that_beats_the_base_rate_and_picks_right_answers(rated):
    """And the model, saved and loaded on a fresh copy of the champion's backbone, forecasts exactly as before: the
    reward-hacking probes score the challenger's answers with the reward model that picked its rows."""
    model, measured = _fit(rated, [r[2] for r in rated["train"]])
    assert measured.beats_base_rate and measured.brier < measured.base_brier, measured
    assert measured.skill > 0.1
    assert sum(b.answers for b in measured.bins) == measured.ratings == len(rated["test"])
    assert "| forecast | answers |" in measured.curve()
    recipe, test = rated["recipe"], rated["test"]
    loaded = reward.loads(recipe, recipe.load_checkpoint(rated["checkpoint"]), reward.dumps(model))
    before = reward.scores(model, [r[0] for r in test], [r[1] for r in test])
    assert reward.scores(loaded, [r[0] for r in test], [r[1] for r in test]) == pytest.approx(before, abs=1e-5)
    assert max(before) - min(before) > 0.1  # a trained head, not the base rate everywhere


def test_best_of_n_keeps_the_answer_the_scorer_likes_best_where_it_is_liked_enough(rated):
    """With a scorer that knows the truth, a row is a right answer wherever the greedy answer or a sample is one,
    and no row comes where none is (min_score). What a learned scorer adds over greedy is bench/thumbs.py's to
    measure: the team's model is sure of what it knows, so its samples rarely find a fact it does not."""
    from rmi_pipeline.world.catalogue import questions

    recipe, tasks = rated["recipe"], rated["tasks"][:120]
    policy, prompts = recipe.load_model(rated["checkpoint"]), [t.prompt for t in rated["tasks"][:120]]
    truth = {t.prompt: t for t in tasks}
    knows = lambda ps, answers: [float(questions.is_right(truth[p], a)) for p, a in zip(ps, answers, strict=True)]  # noqa: E731
    picked = reward.best_of_n(recipe, policy, knows, prompts, 8, 1.5, seed=7, min_score=0.5)
    groups = recipe.sample(policy, prompts, 8, 1.5, 7)
    greedy = recipe.answer(policy, prompts)
    findable = sum(any(questions.is_right(t, a) for a in [g, *group])
                   for t, g, group in zip(tasks, greedy, groups, strict=True))
    assert len(picked.rows) == findable > sum(questions.is_right(t, g) for t, g in zip(tasks, greedy, strict=True))
    assert all(questions.is_right(truth[r["prompt"]], r["target"]) and r["source"] == "best_of_n"
               for r in picked.rows)
    assert picked.meta["best_of_n_rows"] == findable and picked.meta["best_of_n_not_greedy"] > 0


def test_a_reward_model_at_chance_does_not_beat_the_base_rate_so_keeps_no_rows(rated):
    shuffled = [r[2] for r in rated["train"]]
    random.Random(0).shuffle(shuffled)  # thumbs that say nothing about the answer
    _, measured = _fit(rated, shuffled)
    assert not measured.beats_base_rate, measured  # the asset keeps no best_of_n rows then


def test_calibration_counts_a_perfect_and_a_useless_forecaster_apart():
    up = [i % 3 == 0 for i in range(600)]
    sharp = reward.calibration([0.9 if u else 0.1 for u in up], up, base_rate=1 / 3)
    assert sharp.beats_base_rate and sharp.brier == pytest.approx(0.01) and sharp.skill > 0.9
    assert sharp.forecast_up == pytest.approx(0.9 / 3 + 0.1 * 2 / 3) and sharp.observed_up == pytest.approx(1 / 3)
    flat = reward.calibration([1 / 3] * 600, up, base_rate=1 / 3)
    assert not flat.beats_base_rate and flat.skill == pytest.approx(0.0, abs=1e-9)
    with pytest.raises(ValueError, match="held-out"):
        reward.calibration([], [], 0.5)
