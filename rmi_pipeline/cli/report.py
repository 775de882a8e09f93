"""What a person reads after `rmi run`: a table per cycle, a learning curve, and `rmi status`."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..assets import (
    candidate_evaluation,
    candidate_model,
    challenger_selection,
    champion,
    eval_suite,
    judge_agreement,
    reward_model,
    training_dataset,
)
from ..assets.approval import waiting, waiting_line
from ..assets.derivative import DERIVATIVE_OF
from ..assets.probes import SUSPECTED, held_back
from ..assets.selection import choice_of
from ..assets.training import GENERATION, MODEL_SIZE
from ..resources.registry import CANARY, CHALLENGER, CHAMPION, FAST

# the column a stage's seconds go in: step keys are the assets' names
STAGES = {asset.key.to_user_string(): column for asset, column in (
    (training_dataset, "dataset"), (candidate_model, "train"), (challenger_selection, "select"),
    (candidate_evaluation, "eval"), (champion, "promote"), (eval_suite, "suite"))}


@dataclass
class CycleRecord:
    cycle: int
    success: bool = True  # the run succeeded, or the reward-hacking probes held its challenger back
    world: dict = field(default_factory=dict)
    ingest: dict = field(default_factory=dict)
    dataset_rows: int | None = None
    contamination: dict = field(default_factory=dict)  # rows removed from training, by reason
    gain: float | None = None
    gain_interval: tuple[float, float] | None = None
    challenger_version: str | None = None
    verdict: str | None = None
    reason: str = ""
    challenger: dict = field(default_factory=dict)  # skill -> private mean, plus "mean"
    champion: dict = field(default_factory=dict)  # the champion after this cycle's gate
    champion_version: str | None = None
    top_tier: dict = field(default_factory=dict)  # skill -> highest tier the champion solves after the gate
    challenger_top_tier: dict = field(default_factory=dict)
    suite_tiers: str = ""  # the tiers the eval suite held this cycle ("add 1-9, sub 1-8")
    seconds: dict = field(default_factory=dict)
    run_id: str | None = None
    interrupted: bool = False  # Ctrl-C or SIGTERM reached the run: Dagster failed it and `rmi run` stops
    closing: dict = field(default_factory=dict)  # the last cycle's: the round of users that judged its canary
    judge: dict = field(default_factory=dict)  # a judge's agreement with people, and the corrected pass rates
    reward: dict = field(default_factory=dict)  # the reward model's calibration and the best_of_n rows it picked
    held_back: bool = False  # the gate passed it and a reward-hacking probe stopped the cycle before promotion
    probes_fired: str = ""  # the probes that fired on the challenger ("" where none did)
    selection: dict = field(default_factory=dict)  # several challengers: how many, the winner, their scores' spread

    def read_cycle_run(self, result, instance) -> None:
        """Fill in from the improvement_cycle run: materialization metadata and step timings."""
        self.run_id = result.run_id
        meta = {}
        for event in result.get_asset_materialization_events():
            meta[event.asset_key.to_user_string()] = {k: v.value for k, v in
                                                      event.materialization.metadata.items()}
        errors = [e.event_specific_data.error for e in result.all_events
                  if e.event_type_value == "STEP_FAILURE" and e.event_specific_data.error]
        failures = [error.message.strip() for error in errors]
        self.interrupted = any(error.cls_name == "DagsterExecutionInterruptedError" for error in errors)
        self.held_back = held_back(errors)
        self.success = result.success or self.held_back  # held back: the loop did its job, and the champion stayed
        ds = meta.get(training_dataset.key.to_user_string(), {})
        ev = meta.get(candidate_evaluation.key.to_user_string(), {})
        self.dataset_rows = ds.get("rows")
        self.contamination = {k: ds[k] for k in ("removed_eval_overlap", "held_out_mined", "removed_ngram_overlap")
                              if k in ds}
        self.gain = ev.get("gain")
        if "gain_low" in ev:
            self.gain_interval = (ev["gain_low"], ev["gain_high"])
        self.challenger_version = meta.get(candidate_model.key.to_user_string(), {}).get(
            "model_version", ev.get("challenger_version"))
        chosen = meta.get(challenger_selection.key.to_user_string(), {})
        if chosen.get("challengers", 1) > 1:
            self.selection = {k: chosen[k] for k in ("challengers", "winner", "spread")} | {
                "scores": {k.removeprefix("score "): v for k, v in chosen.items() if k.startswith("score ")}}
        self.verdict, self.reason = ev.get("verdict", "failed"), ev.get("reason", "; ".join(failures))
        self.probes_fired = "" if ev.get("probes_fired", "none") == "none" else ev["probes_fired"]
        if self.held_back:
            self.verdict = "held back"
        skills = sorted(k.removeprefix("challenger_skill_") for k in ev if k.startswith("challenger_skill_"))
        self.challenger = {s: ev[f"challenger_skill_{s}"] for s in skills}
        if "challenger_anchor_mean" in ev:
            self.challenger["mean"] = ev["challenger_anchor_mean"]
        old = {s: ev.get(f"champion_skill_{s}") for s in skills} | {"mean": ev.get("champion_anchor_mean")}
        promoted = champion.key.to_user_string() in meta
        self.champion = dict(self.challenger) if promoted else ({k: v for k, v in old.items() if v is not None})
        who = "challenger" if promoted else "champion"
        self.top_tier = {s: ev[f"{who}_top_tier_{s}"] for s in skills if f"{who}_top_tier_{s}" in ev}
        self.challenger_top_tier = {s: ev[f"challenger_top_tier_{s}"] for s in skills
                                    if f"challenger_top_tier_{s}" in ev}
        self.suite_tiers = meta.get(eval_suite.key.to_user_string(), {}).get("tiers", "")
        agreed = meta.get(judge_agreement.key.to_user_string(), {})
        if "agreement" in agreed or "judge_status" in ev:
            self.judge = {"agreement": agreed.get("agreement"), "kappa": agreed.get("kappa"),
                          "rated": agreed.get("rated_answers"), "sentence": agreed.get("sentence", ""),
                          **{k: ev[k] for k in ("challenger_corrected_pass_rate", "challenger_corrected_low",
                                                "challenger_corrected_high", "judge_calls", "judge_cost") if k in ev}}
        self.reward = {k: v for k, v in meta.get(reward_model.key.to_user_string(), {}).items() if k != "reliability"}
        kept = ev.get("champion_version")
        self.champion_version = self.challenger_version if promoted else (None if kept == "none" else kept)
        spans: dict[str, list[float]] = {}  # a column's steps (several challengers train in steps of their own)
        for step in instance.get_run_step_stats(result.run_id):
            if step.start_time and step.end_time:
                column = STAGES.get(step.step_key.split(".")[0], step.step_key)
                spans.setdefault(column, []).append((step.start_time, step.end_time))
        self.seconds |= {column: max(e for _, e in times) - min(s for s, _ in times) for column, times in spans.items()}

    def canary_ended(self, action: str) -> None:
        """The trial of this cycle's canary ended (in the next round of users): promoted, it is the champion
        after this cycle."""
        self.verdict = f"{action} (canary)"
        if action == "promote":
            self.champion, self.champion_version = dict(self.challenger), self.challenger_version
            self.top_tier = dict(self.challenger_top_tier)

    def judge_line(self) -> str | None:
        """The judge's standing this cycle, in a line: its agreement with people and the corrected pass rate."""
        if not self.judge:
            return None
        j = self.judge
        agreed = ("agreement with people not measured yet" if j.get("agreement") is None else
                  f"agrees with people on {j['agreement']:.0%} of {j['rated']:,} rated answers"
                  + (f" (kappa {j['kappa']:.2f})" if j.get("kappa") is not None else ""))
        corrected = j.get("challenger_corrected_pass_rate")
        fixed = "" if corrected is None else (f"; the challenger's pass rate corrected for its errors {corrected:.3f} "
                                              f"[{j['challenger_corrected_low']:.3f}, "
                                              f"{j['challenger_corrected_high']:.3f}]")
        return f"[cycle {self.cycle}] the judge {agreed}{fixed}; {j.get('judge_calls', 0):,} judge calls"

    def reward_line(self) -> str | None:
        """The reward model's standing this cycle, in a line: its Brier score against the base rate's, the thumbs-up
        share it forecast on held-out ratings against the users', and the rows it picked."""
        r = self.reward
        if "brier" not in r:
            return None
        return (f"[cycle {self.cycle}] the reward model forecasts {r['held_out_ratings']:,} held-out ratings with "
                f"Brier {r['brier']:.3f} (base rate {r['base_rate_brier']:.3f}; thumbs-up forecast "
                f"{r['forecast_thumbs_up']:.0%}, given {r['users_thumbs_up']:.0%}): "
                + (f"{r.get('best_of_n_rows', 0):,} best-of-n rows" if r["beats_base_rate"] else "no rows kept"))

    def progress_line(self) -> str:
        who = f"challenger v{self.challenger_version}"
        if self.selection:  # several: the winner and what the others scored on the selection part
            chosen = self.selection
            who += (f" (best of {chosen['challengers']}: "
                    + ", ".join(f"{v} {score:.3f}" for v, score in chosen["scores"].items())
                    + f"; spread {chosen['spread']:.3f})")
        if self.verdict == "canary":
            return (f"[cycle {self.cycle}] {who} passed the offline gate and is now the canary; the next users "
                    f"decide. {self.reason}")
        if self.held_back:
            return (f"[cycle {self.cycle}] {who}: held back by the reward-hacking probes ({self.probes_fired}); the "
                    f"champion did not move. `rmi promote {self.challenger_version} --reason ...` clears it. "
                    f"{self.reason}")
        return f"[cycle {self.cycle}] {who}: {self.verdict}. {self.reason}"


WIDTH = 120  # the widest the tables get, and the width they fit in when there is no terminal to ask


def summary_table(records: list[CycleRecord]) -> str:
    """Two tables that fit the terminal (at most WIDTH columns): what each cycle's gate saw and kept, then the data
    and the time it took. One score per column, each saying which set it was measured on."""
    from rich.table import Table

    skills = sorted({s for r in records for s in r.champion if s != "mean"})
    fmt = lambda v: "-" if v is None else (f"{v:.3f}" if isinstance(v, float) else f"{v:,}")  # noqa: E731
    quality = Table(title="Quality: each cycle's gate, and the champion after it", title_justify="left",
                    caption="anchor (chal. for the challenger, champ. for the champion after the gate, per skill and "
                            "mean): the score (RMI_EVAL_SCORER; exact match by default) on the frozen private anchor "
                            "set (comparable across cycles); gain: the gate's paired gain over the champion on every "
                            "counted slice, anchor and this cycle's fresh items pooled, with its 98% interval; top "
                            "tier: the highest tier of each skill the champion answers at RMI_SATURATION on every "
                            "counted slice up to it",
                    caption_justify="left")
    for name in ["cycle", "chal.", "chal.\nanchor", "gain\n[98% interval]", "verdict",
                 *[f"champ.\n{s}" for s in skills], "champ.\nanchor", "top tier", "champ."]:
        quality.add_column(name, justify="left" if name in ("verdict", "top tier") else "right", no_wrap=True)
    data = Table(title="Data and time", title_justify="left",
                 caption="rows out: training rows removed as eval items, near-copies (n-gram) and the mined hard "
                         "cases held out for the eval; suite tiers: what the eval suite held (horizon slices last)",
                 caption_justify="left")
    for name in ["cycle", "feedback\nrows", "landed", "quaran-\ntined", "dataset\nrows", "out:\neval",
                 "out:\nn-gram", "out:\nmined", "suite tiers", "s\nworld", "s\ningest", "s\ntrain", "s\neval",
                 "s\ntotal"]:
        data.add_column(name, justify="left" if name == "suite tiers" else "right",
                        no_wrap=name != "suite tiers", ratio=1 if name == "suite tiers" else None)
    for r in records:
        low, high = r.gain_interval or (None, None)
        gain = "-" if low is None else f"{r.gain:+.3f} [{low:+.3f}, {high:+.3f}]"
        quality.add_row(str(r.cycle), f"v{r.challenger_version}" if r.challenger_version else "-",
                        fmt(r.challenger.get("mean")), gain, r.verdict or "-",
                        *[fmt(r.champion.get(s)) for s in skills], fmt(r.champion.get("mean")),
                        " ".join(f"{s} {t}" for s, t in r.top_tier.items()) or "-",
                        f"v{r.champion_version}" if r.champion_version else "-")
        secs = [r.seconds.get(k) for k in ("world", "ingest", "train", "eval")]
        data.add_row(str(r.cycle), fmt(r.ingest.get("rows_in")), fmt(r.ingest.get("ingested")),
                     fmt(r.ingest.get("quarantined")), fmt(r.dataset_rows),
                     *(fmt(r.contamination.get(k)) for k in ("removed_eval_overlap", "removed_ngram_overlap",
                                                             "held_out_mined")),
                     r.suite_tiers or "-", *(f"{s:.0f}" if s is not None else "-" for s in secs),
                     f"{sum(r.seconds.values()):.0f}")
    return render(quality, data)


def render(*tables) -> str:
    """Rich tables as plain text that fits the terminal (WIDTH columns at most, or when there is none)."""
    import shutil
    from io import StringIO

    from rich import box
    from rich.console import Console

    out = StringIO()
    console = Console(file=out, width=min(WIDTH, shutil.get_terminal_size((WIDTH, 24)).columns), color_system=None,
                      highlight=False)
    for n, table in enumerate(tables):
        table.box, table.pad_edge, table.collapse_padding = box.SIMPLE_HEAD, False, True
        console.print(*([""] if n else []), table)
    return "\n".join(line.rstrip() for line in out.getvalue().rstrip().splitlines())


def learning_curve(records: list[CycleRecord], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    cycles = [r.cycle for r in records]
    skills = sorted({s for r in records for s in r.champion if s != "mean"})
    ax.plot(cycles, [r.champion.get("mean") for r in records], "o-", lw=2.5, label="champion, anchor mean")
    for s in skills:
        ax.plot(cycles, [r.champion.get(s) for r in records], "--", label=f"champion, {s}")
    ax.plot(cycles, [r.challenger.get("mean") for r in records], "x", ms=9, label="challenger, anchor mean")
    ax.set(xlabel="cycle", ylabel="exact match, private anchor eval", ylim=(0, 1.02), xticks=cycles,
           title="Recursive model improvement: the champion after each cycle")
    ax.grid(alpha=0.3)
    tiers = ax.twinx()  # the highest tier solved climbs past the anchor's, which the mean cannot show
    for s in skills:
        tiers.step(cycles, [r.top_tier.get(s) for r in records], ":", where="mid", label=f"highest tier solved, {s}")
    tiers.set_ylabel("highest tier solved (digits)")  # at RMI_SATURATION on every tier up to it
    lines = ax.get_legend_handles_labels()
    more = tiers.get_legend_handles_labels()
    ax.legend(lines[0] + more[0], lines[1] + more[1], loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_summary(records: list[CycleRecord], path: Path) -> None:
    path.write_text(json.dumps([asdict(r) for r in records], indent=1, default=str))


def _batches(settings, storage) -> list[str]:
    """The feedback batches that have not landed, and why."""
    from dagster import DagsterInstance

    from ..automation.batches import batch_states
    from ..resources import layout
    from ..schema import is_batch_file

    files, others = storage.listing(layout.INCOMING)
    names = [k.rsplit("/", 1)[-1] for k in files if is_batch_file(k.rsplit("/", 1)[-1])]
    states = batch_states(DagsterInstance.get(), names, storage, settings)
    pending = [b for b in states.values() if b.state != "landed"]
    lines = [f"feedback batches: {len(names) - len(pending)} of {len(names)} landed"]
    why = {"new": "not ingested yet", "retry": "failed, to be ingested again", "landing": "landing now",
           "backoff": "failed, ingested again soon", "quarantined": "quarantined whole (too many bad rows)",
           "given_up": "failed every attempt: a person must look"}
    lines += [f"  {b.name}: {why[b.state]} ({b.attempts} attempt(s))" for b in pending[:10]]
    lines += [f"  skipped, not a plain file: {name}" for name in others[:10]]
    return lines


def _canary(settings, registry, storage) -> str:
    """The canary on trial, since when, and what its latest verdict said."""
    from datetime import datetime

    from ..assets.promotion import STARTED_AT
    from ..resources import layout

    mv = registry.version(CANARY)
    if mv is None:
        return f"  {CANARY}: none (promotion: {settings.promotion})"
    since = datetime.fromtimestamp(float(mv.tags.get(STARTED_AT, 0))).strftime("%Y-%m-%d %H:%M")
    key = layout.canary_verdict(str(mv.version))
    said = storage.read_json(key)["reason"] if storage.exists(key) else "no verdict yet"
    return f"  {CANARY}: v{mv.version} on trial since {since}, {settings.canary.share:.0%} of users; {said}"


def status_text(settings) -> str:
    from ..resources import build_resources

    res = build_resources(settings)
    res["storage"].reach()
    registry, warehouse = res["registry"], res["warehouse"]
    lines = [f"RMI_HOME {settings.resolved_home}", f"model {settings.model_name} (recipe {settings.recipe})"]
    for alias in (CHAMPION, CHALLENGER):
        mv = registry.version(alias)
        if mv is None:
            lines.append(f"  {alias}: none")
        else:
            lines.append(f"  {alias}: v{mv.version}  anchor mean {mv.tags.get('eval_anchor_mean', '?')}  "
                         f"dataset {mv.tags.get('dataset_version', '?')}  gate {mv.tags.get('gate_verdict', '?')}  "
                         f"generation {mv.tags.get(GENERATION, '1')}  size {mv.tags.get(MODEL_SIZE, '?')}")
            if alias == CHALLENGER and (why := choice_of(res["storage"], mv.version)):
                lines.append(f"    chosen among several: {why}")
            if SUSPECTED in mv.tags and f"{SUSPECTED}_cleared" not in mv.tags:
                lines.append(f"    {SUSPECTED}: {mv.tags[SUSPECTED][:300]} (`rmi promote {mv.version} --reason ...` "
                             "clears it)")
    lines.append(_canary(settings, registry, res["storage"]))
    if (asked := waiting(registry)) is not None:
        lines.append(f"  approval: {waiting_line(asked, settings.approval_hours)} (`rmi promote {asked.version} "
                     f"--reason ...` approves, `rmi reject {asked.version} --reason ...` rejects)")
    if (fast := registry.version(FAST)) is not None:
        lines.append(f"  {FAST}: v{fast.version}  distilled from v{fast.tags.get(DERIVATIVE_OF, '?')}  "
                     f"{fast.tags.get('speedup', '?')}x as fast  size {fast.tags.get(MODEL_SIZE, '?')}")
    lines += _successors()
    lines += _batches(settings, res["storage"])
    undelivered = res["notifier"].undelivered()
    if undelivered:
        lines.append(f"alerts: {len(undelivered)} not delivered yet (the webhook did not take them; sent again every "
                     "minute by alert_outbox):")
        lines += [f"  {key}: {a['tries']} tries, last {a.get('last_error', '?')}"
                  for key, a in list(undelivered.items())[:5]]
    quality = warehouse.query("SELECT * FROM feedback_quality")
    total = int(quality["events"].sum()) if len(quality) else 0
    lines.append(f"warehouse: {total} feedback events")
    for row in quality.to_dicts():  # every model and skill: a model's live quality is what status is for
        lines.append(f"  model v{row['model_version']} {row['skill']}: {row['events']} events, "
                     f"thumbs-down {row['thumbs_down_rate']:.1%}, {row['corrections']} corrections")
    return "\n".join(lines + _checks() + _runs())


def _checks() -> list[str]:
    """The latest result of every asset check: those that failed in full, with what they said."""
    from dagster import DagsterInstance

    from ..assets import ALL

    instance = DagsterInstance.get()
    passed, failed = [], []
    for spec in (spec for asset in ALL for spec in asset.check_specs):
        record = instance.get_latest_asset_check_evaluation_record(spec.key)
        if record is None:
            continue
        where = f"  {spec.asset_key.to_user_string()}: {spec.name}"
        if record.status.value == "SUCCEEDED":
            passed.append(spec.name)
        elif record.status.value == "FAILED":
            failed.append(f"{where} did not pass: {record.event.dagster_event.event_specific_data.description}")
        else:  # planned by a run that did not finish it
            failed.append(f"{where} did not finish in run {record.run_id[:8]} (`make ui` shows why)")
    lines = [f"checks: {len(failed)} of {len(passed) + len(failed)} did not pass at their latest run"
             + (f" (passed: {', '.join(passed)})" if passed else "")]
    return lines + failed


SUCCESSORS_SHOWN = 3


def _successors() -> list[str]:
    """The latest runs that trained a new generation or a derivative, newest first (none: not a line)."""
    from datetime import datetime

    from dagster import DagsterInstance

    from ..automation.jobs import successor_line, successor_runs

    runs = successor_runs(DagsterInstance.get(), SUCCESSORS_SHOWN)
    return ([f"new generations and derivatives (latest {SUCCESSORS_SHOWN}):"] if runs else []) + [
        f"  {r.dagster_run.run_id[:8]} {datetime.fromtimestamp(r.create_timestamp.timestamp()):%Y-%m-%d %H:%M} "
        f"{successor_line(kind, r.dagster_run)}" for kind, r in runs]


RUNS_SHOWN = 8


def _runs() -> list[str]:
    """The latest runs of the loop, newest first: job, status, when, what started it."""
    from datetime import datetime

    from dagster import DagsterInstance

    instance = DagsterInstance.get()
    runs = instance.get_run_records(limit=RUNS_SHOWN)
    out = [f"runs (latest {RUNS_SHOWN}; `make ui` shows all):" if runs else "runs: none yet"]
    for record in runs:
        run = record.dagster_run
        when = record.start_time or record.create_timestamp.timestamp()
        partition = run.tags.get("dagster/partition")
        out.append(f"  {run.run_id[:8]} {run.job_name}{f' [{partition}]' if partition else ''}: "
                   f"{run.status.value.lower()}, {datetime.fromtimestamp(when):%Y-%m-%d %H:%M}, "
                   f"{run.tags.get('rmi/trigger', 'launched by hand')}")
    return out
