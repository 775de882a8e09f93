"""Reward-hacking probes on every challenger: the `reward_hacking` check of candidate_evaluation, blocking.

Both models answer the probe questions (fresh generated tasks of the counted slices, else the eval file's counted
items); ml/probes.py compares what the training signal says of their answers with the truth (the recipe's
`audit`, else the sealed exact score), their length under a judge, their flattery, their agreement with an asker
who asserts a wrong answer, their format, and the answers users liked that the audit fails. A probe that fires
stops promotion (RMI_PROBE_BLOCK): the version is tagged `suspected_reward_hack` with the finding, one alert offers
"Promote anyway" (the audited override), and the evidence goes to the check's metadata and the sealed eval store.
"""

from __future__ import annotations

import random

from dagster import AssetCheckResult, AssetCheckSeverity, AssetCheckSpec, MetadataValue

from ..resources import layout
from ..resources.notifier import Notifier
from ..resources.registry import ModelRegistry
from ..resources.storage import ObjectStore
from ..resources.warehouse import WHOLE_ANSWER, Warehouse
from ..settings import Settings

SUSPECTED = "suspected_reward_hack"  # the model version's tag while a fired probe's finding stands
LIVE_ANSWERS = 1000  # the latest liked answers per version the live probe audits

REWARD_HACKING_CHECK = AssetCheckSpec(
    "reward_hacking", asset="candidate_evaluation", blocking=True,
    description="No reward-hacking probe fires on the challenger against the champion: the training signal "
                "(verifier, judge) passing answers the audit fails, the signal rising while the truth stays flat, a "
                "judge's gain that comes with longer answers, flattery, agreement with a wrong answer the asker "
                "asserts, empty, repetitive or overlong answers, the eval's leak marker, users liking wrong answers. "
                "Failing (RMI_PROBE_BLOCK), it stops the cycle before promotion; `rmi promote` clears it, audited.")


def probe_challenger(context, settings: Settings, recipe, models, versions, sets: dict, manifest: dict,
                     private: set, scorer, stores: tuple[ObjectStore, ObjectStore], registry: ModelRegistry,
                     warehouse: Warehouse, notifier: Notifier, gate_promotes: bool) -> tuple[list, AssetCheckResult]:
    """The probes on the challenger (`models`, `versions`: challenger then champion). Returns the findings and the
    check; a fired probe tags the version and writes the evidence (probes/v<N>.json, sealed), and where it holds
    back a challenger the gate would promote, raises the alert with its "Promote anyway" button."""
    from ..ml import probes

    storage, eval_store = stores
    challenger, champion = versions
    if champion is None:
        return [], AssetCheckResult(check_name=REWARD_HACKING_CHECK.name, passed=True,
                                    description="A first model: no champion to compare its answers with.")
    rules = settings.probes
    tasks, shown = questions(recipe, settings, sets, private, seed=settings.seed + int(challenger.version))
    truth_name, truth = truth_of(recipe, scorer)
    rewarded = trained_reward_model(recipe, storage, registry, champion.version)
    findings = probes.probe_models(recipe, tasks, models, rules, truth=truth,
                                   signals=signals_of(recipe, scorer, settings, rewarded), shown=shown,
                                   leak_marker=manifest.get("leak_marker"), seed=settings.seed,
                                   eval_prompts=[i["prompt"] for items in sets.values() for i in items]).findings
    findings.append(live(recipe, warehouse, challenger.version, champion.version, rules))
    findings = [f for f in findings if f is not None]
    fired = [f for f in findings if f.fired]
    summary = probes.summary(findings)
    context.log.info(f"probes on v{challenger.version}: {summary}")
    eval_store.write_json(layout.probes(challenger.version), {
        "challenger_version": str(challenger.version), "champion_version": str(champion.version),
        "truth": truth_name, "questions": len(tasks), "findings": [f.as_dict() for f in findings]})
    if fired:
        registry.tag(challenger.version, {SUSPECTED: summary[:4000]})
    if fired and gate_promotes:
        held = rules.block
        notifier.notify("reward_hack", f"challenger v{challenger.version} passed the gate and is "
                        f"{'held back' if held else 'promoted with a warning'}: {summary[:600]}",
                        key=f"reward-hack-{challenger.version}", run_id=context.run.run_id,
                        actions={"rmi_promote": {"version": str(challenger.version)}, "rmi_ack": {}} if held else {})
    return findings, AssetCheckResult(
        check_name=REWARD_HACKING_CHECK.name, passed=not fired,
        # an error (blocking the champion's step, failing the run) only where it holds back what the gate promotes
        severity=AssetCheckSeverity.ERROR if rules.block and gate_promotes else AssetCheckSeverity.WARN,
        description=summary[:1000],
        metadata={"truth": truth_name or "none (no audit, and the eval is not scored by exact match)",
                  "questions": len(tasks), "fired": ", ".join(f.probe for f in fired) or "none",
                  "findings": MetadataValue.md(evidence(findings))})


def held_back(errors) -> bool:
    """Whether a run's step failures (Dagster's SerializableErrorInfo) are all this check's: its own alert said so,
    with the evidence and a button, so the run's failure is no second alert."""
    return bool(errors) and all(e.cls_name == "DagsterAssetCheckFailedError"
                                and f": {REWARD_HACKING_CHECK.name}" in e.message for e in errors)


def questions(recipe, settings: Settings, sets: dict, private: set, seed: int) -> tuple[list, bool]:
    """The probe's questions and whether they may be shown: fresh tasks of the counted slices where the recipe
    generates them, else the eval file's counted items (sealed: their text is never shown)."""
    rng = random.Random(seed)
    n = settings.probes.items
    if recipe.has("generator"):
        counted = sorted(private)
        return [recipe.sample_tasks(rng, 1, [s], [t])[0] for s, t in (rng.choice(counted) for _ in range(n))], True
    from ..ml.scored import eval_tasks

    items = [task for name, task in eval_tasks(sets) if name in ("anchor", "refreshed")
             and (task.skill, task.tier) in private]
    return rng.sample(items, min(n, len(items))), False


def truth_of(recipe, scorer):
    """(name, function (task, answer) -> bool) of the truth the probes trust: the recipe's audit, else exact match
    with the reference where the eval is scored so; (None, None) where there is neither."""
    if recipe.has("audit"):
        return "audit", lambda task, answer: recipe.audit(task.prompt, answer)[0] >= 0.5
    if scorer is None:
        return "exact", lambda task, answer: task.answer is not None and answer == task.answer
    return None, None


def signals_of(recipe, scorer, settings: Settings, reward_model=None) -> dict:
    """The training signals to hold against the truth, by name: the verifier (RL, practice), the eval's scorer
    where it is not exact match (a judge, a team's own) and the reward model whose picks trained the challenger,
    each as a function (tasks, answers) -> scores."""
    out = {}
    if recipe.has("verifier"):
        out["verifier"] = lambda tasks, answers: [recipe.verify(t.prompt, a)[0] for t, a in zip(tasks, answers,
                                                                                                   strict=True)]
    if reward_model is not None:
        out["reward_model"] = lambda tasks, answers: reward_scores(recipe, reward_model, tasks, answers)
    if scorer is not None:
        from ..scoring.contract import ScoreRequest

        name = "judge" if settings.evals.scorer == "judge" else "scorer"
        out[name] = lambda tasks, answers: [v for v, _ in scorer.score_many(
            [ScoreRequest(t.prompt, a, t.answer, t.metadata) for t, a in zip(tasks, answers, strict=True)])]
    return out


def trained_reward_model(recipe, storage: ObjectStore, registry: ModelRegistry, champion: str):
    """The reward model whose best_of_n rows trained this cycle's challenger (reward_model kept it), else None."""
    latest = storage.read_json(layout.BEST_OF_N_LATEST) if storage.exists(layout.BEST_OF_N_LATEST) else {}
    if str(latest.get("champion_version")) != str(champion) or not latest.get("reward_model"):
        return None
    from ..ml import reward

    _, data = registry.checkpoint(champion)
    return reward.loads(recipe, recipe.load_checkpoint(data), storage.read_bytes(latest["reward_model"]))


def reward_scores(recipe, model, tasks: list, answers: list[str]) -> list[float]:
    """The reward model's P(thumbs-up) of each answer; 0 for one that is no valid completion (it cannot encode)."""
    from ..ml import reward

    valid = [i for i, a in enumerate(answers) if recipe.is_valid_completion(a)]
    out = [0.0] * len(answers)
    for i, value in zip(valid, reward.scores(model, [tasks[i].prompt for i in valid], [answers[i] for i in valid])
                        if valid else [], strict=True):
        out[i] = value
    return out


def live(recipe, warehouse: Warehouse, challenger: str, champion: str, rules):
    """Users' thumbs-up on answers the audit (else the verifier) fails, per version; None with neither."""
    from ..ml import probes

    check = recipe.audit if recipe.has("audit") else recipe.verify if recipe.has("verifier") else None
    if check is None:
        return None
    liked = warehouse.query(
        "SELECT model_version, prompt, completion FROM (SELECT *, row_number() OVER (PARTITION BY model_version "
        f"ORDER BY ts DESC) AS n FROM feedback_events WHERE rating = 'up' AND source = 'user' AND {WHOLE_ANSWER} "
        "AND completion IS NOT NULL AND model_version IN (?, ?)) WHERE n <= ?",
        [str(challenger), str(champion), LIVE_ANSWERS])
    rows = {}
    for version, prompt, completion in liked.iter_rows():
        row = rows.setdefault(version, {"version": version, "liked": 0, "wrong": 0})
        row["liked"] += 1
        row["wrong"] += recipe.is_valid_prompt(prompt) and check(prompt, completion)[0] < 0.5
    return probes.live(list(rows.values()), challenger, champion, rules)


def evidence(findings: list) -> str:
    """The findings as markdown: each probe's measure on both models (its sentence says what it is), then the
    sentences and example answers of those that fired."""
    lines = ["| probe | fired | challenger | champion | questions | p | what |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {f.probe} | {'**yes**' if f.fired else 'no'} | {_num(f.challenger)} | {_num(f.champion)} | "
              f"{f.items} | {_num(f.p_value)} | {_md(f.sentence)} |" for f in findings]
    for f in findings:
        if f.fired:
            lines += ["", f"**{f.probe}** fired:", ""]
            lines += [f"- {_md(e['question'])}: challenger {_md(e['challenger_answer'])!r}, champion "
                      f"{_md(e['champion_answer'])!r}" for e in f.examples]
    return "\n".join(lines)


def _num(value) -> str:
    return "-" if value is None else f"{value:.3g}"


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
