"""What `/rmi` understands, and the audited paths it acts through (the same as `rmi promote` and `rmi rollback`).

    /rmi status                         champion, challenger, canary, health, the last cycles
    /rmi promote VERSION reason...      a person overrides the gate (or approves the version that waits)
    /rmi approve VERSION reason...      promote the version that waits for approval, and only it
    /rmi reject VERSION reason...       turn down the version that waits for approval
    /rmi rollback reason...             back to the previous champion
    /rmi cycle [SLICE ...]              an improvement_cycle run, aimed at the slices when given (add/5 sub/7)
    /rmi generation SIZE                a new generation of that size from scratch, taught by the champion
    /rmi derivative [SIZE]              a smaller student distilled from the champion (RMI_DERIVATIVE_SIZE)
    /rmi stop generation|derivative reason...   stop the queued or running runs of that kind
    /rmi pause | resume                 the loop's sensors and schedules (alerts stay on)
    /rmi canary abort reason...         end the canary's trial: every user back on the champion
    /rmi forget USER_ID reason...       delete a user's feedback from every store (RMI_FORGET_ALLOWED only)

Every text is untrusted: it is split into words and matched against these forms, never evaluated.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import blocks
from .blocks import Reply
from .dagster_api import DagsterAPI

USAGE = ("`/rmi status` | `/rmi promote VERSION reason...` | `/rmi approve VERSION reason...` | "
         "`/rmi reject VERSION reason...` | `/rmi rollback reason...` | `/rmi cycle [slice ...]` | "
         "`/rmi generation SIZE` | `/rmi derivative [SIZE]` | `/rmi stop generation|derivative reason...` | "
         "`/rmi pause` | `/rmi resume` | `/rmi canary abort reason...` | `/rmi forget USER_ID reason...`")
# the commands that change something
ACTS = ("promote", "approve", "reject", "rollback", "cycle", "generation", "derivative", "stop", "pause", "resume",
        "canary", "forget")


class Refused(ValueError):
    """A request that is not carried out; the message says why, and nothing moved."""


@dataclass(frozen=True)
class Command:
    name: str
    version: str | None = None
    reason: str = ""
    slices: tuple[str, ...] = ()
    size: str = ""  # a new generation's or a derivative's ("": RMI_DERIVATIVE_SIZE)
    kind: str = ""  # what `stop` stops: generation or derivative
    subject: str = ""  # whose feedback `forget` deletes: a user id as events carry it

    @property
    def acts(self) -> bool:
        return self.name in ACTS


def parse(text: str) -> Command:
    words = (text or "").split()
    if not words:
        return Command("status")
    name, rest = words[0].lower(), words[1:]
    if name in ("status", "pause", "resume") and not rest:
        return Command(name)
    if name in ("promote", "approve", "reject"):
        if not rest:
            raise Refused(f"{name} needs a version and a reason: `/rmi {name} 7 the new slice needs it`")
        if not rest[0].removeprefix("v").isdigit():
            raise Refused(f"a model version is a number, not {rest[0][:40]!r}")
        return Command(name, version=rest[0].removeprefix("v"), reason=_reason(name, rest[1:]))
    if name == "rollback":
        return Command(name, reason=_reason(name, rest))
    if name == "cycle":
        return Command(name, slices=tuple(dict.fromkeys(rest)))
    if name == "generation":
        if len(rest) != 1:
            raise Refused("generation needs one size: `/rmi generation small`")
        return Command(name, size=rest[0])
    if name == "derivative":
        if len(rest) > 1:
            raise Refused("derivative takes at most a size: `/rmi derivative micro`")
        return Command(name, size="".join(rest))
    if name == "stop":
        if rest[:1] not in (["generation"], ["derivative"]):
            raise Refused("stop what? `/rmi stop generation reason...` or `/rmi stop derivative reason...`")
        return Command(name, kind=rest[0], reason=_reason(f"stop {rest[0]}", rest[1:]))
    if name == "forget":
        if not rest:
            raise Refused("forget needs a user id and a reason: `/rmi forget user-42 their request of 3 May`")
        return Command(name, subject=rest[0][:200], reason=_reason("forget", rest[1:]))
    if name == "canary" and rest[:1] == ["abort"]:
        return Command(name, reason=_reason("canary abort", rest[1:]))
    raise Refused(f"I do not know `{' '.join(words)[:80]}`. Commands: {USAGE}")


def from_button(kind: str, value: dict, alert: str) -> Command:
    """What a button on an alert asks for (resources/notifier.py BUTTONS); `value` is the button's own data."""
    if kind == "rollback":
        return Command("rollback", reason=f"Roll back, from {alert}")
    if kind == "promote":
        return Command("promote", version=str(value.get("version", "")), reason=f"Promote anyway, from {alert}")
    if kind in ("approve", "reject"):
        said = {"approve": "Approved", "reject": "Rejected"}[kind]
        return Command(kind, version=str(value.get("version", "")), reason=f"{said}, from {alert}")
    if kind == "cycle":
        return Command("cycle", slices=tuple(value.get("slices", [])))
    raise Refused(f"no command behind the button {kind!r}")


def _reason(what: str, words: list[str]) -> str:
    if not words:
        raise Refused(f"{what} needs a reason: an action without one is not auditable")
    return " ".join(words)[:500]


class CommandRunner:
    """Carries out a parsed command for a person (`who`: "slack:U123 (name)") and says what happened."""

    def __init__(self, settings):
        self.settings = settings
        self.dagster = DagsterAPI(settings.ui.url)

    def warm(self) -> None:
        """Import Dagster and open the registry once, before the first request (a cold first reply took 6 s)."""
        from dagster import DagsterInstance

        from ..resources import build_resources
        from ..resources.registry import CHAMPION
        from .status import status  # noqa: F401

        build_resources(self.settings)["registry"].version(CHAMPION)
        DagsterInstance.get()

    def run(self, command: Command, who: str) -> Reply:
        handler = getattr(self, f"_{command.name}")
        try:
            return handler(command, who)
        except (LookupError, ValueError) as exc:  # the registry's and the override's refusals: nothing moved
            raise Refused(str(exc)) from None

    def _status(self, command: Command, who: str) -> Reply:
        from .status import status

        return status(self.settings, self.dagster)

    def _promote(self, command: Command, who: str) -> Reply:
        return self._moved(command, who, "promote", ":arrow_up:", "promoted", " past the gate")

    def _approve(self, command: Command, who: str) -> Reply:
        return self._moved(command, who, "approve", ":white_check_mark:", "approved", "")

    def _moved(self, command: Command, who: str, action: str, icon: str, done: str, how: str) -> Reply:
        """A person moved the champion to `command.version` (an audited override), said in the channel."""
        from ..automation.overrides import override

        before, after = override(self.settings, action, command.reason, by=who, via="Slack", version=command.version)
        reason = blocks.escape(command.reason)
        return Reply(f"Champion v{before} -> v{after}, {done} by {who}: {reason}",
                     [blocks.section(f"{icon} *Champion v{before} -> v{after}*, {done} by {who}{how}.\n>{reason}")])

    def _reject(self, command: Command, who: str) -> Reply:
        from ..automation.overrides import reject

        held, removed = reject(self.settings, command.version, command.reason, by=who, via="Slack")
        gone = f"; no longer {' or '.join(removed)}" if removed else ""
        return Reply(f"v{command.version} rejected by {who}; champion stays v{held}{gone}: "
                     f"{blocks.escape(command.reason)}",
                     [blocks.section(f":no_entry_sign: *v{command.version} rejected* by {who}; champion stays "
                                     f"v{held}{gone}.\n>{blocks.escape(command.reason)}")])

    def _rollback(self, command: Command, who: str) -> Reply:
        from ..automation.overrides import override

        before, after = override(self.settings, "rollback", command.reason, by=who, via="Slack")
        return Reply(f"Champion v{before} -> v{after}, rolled back by {who}: {blocks.escape(command.reason)}",
                     [blocks.section(f":leftwards_arrow_with_hook: *Champion v{before} -> v{after}*, rolled back "
                                     f"by {who}.\n>{blocks.escape(command.reason)}")])

    def _cycle(self, command: Command, who: str) -> Reply:
        from ..automation.jobs import cycle_run_config
        from ..recipes.base import load_recipe

        recipe = load_recipe(self.settings.recipe)
        unknown = [s for s in command.slices if not _is_slice(recipe, s)]
        if unknown:
            raise Refused(f"not a slice of this recipe: {', '.join(u[:40] for u in unknown[:5])} (slices look like "
                          f"{recipe.skills[0]}/3)")
        rules = self.settings.regression
        config = cycle_run_config(self.settings, {
            "focus": list(command.slices), "focus_weight": rules.focus_weight,
            "steps_multiplier": rules.steps_multiplier} if command.slices else None)
        tags = {"rmi/trigger": "chat", "rmi/requested_by": who[:200]}
        if command.slices:
            tags["rmi/focus"] = ", ".join(command.slices)[:200]
        run_id = self.dagster.launch("improvement_cycle", config, tags)
        aim = f" aimed at {', '.join(command.slices)}" if command.slices else ""
        return Reply(f"Started an improvement cycle{aim} for {who}: run {run_id[:8]}",
                     [blocks.section(f":arrows_counterclockwise: *Improvement cycle queued*{aim}, for {who}."),
                      blocks.run_link(self.dagster.run_link(run_id), run_id)])

    def _generation(self, command: Command, who: str) -> Reply:
        from ..assets.training import candidate_model

        return self._successor("generation", candidate_model.node_def.name, command.size, who)

    def _derivative(self, command: Command, who: str) -> Reply:
        from ..assets.derivative import fast_candidate

        size = command.size or self.settings.derivative.size
        if not size:
            raise Refused("a derivative needs a size: `/rmi derivative micro`, or set RMI_DERIVATIVE_SIZE")
        return self._successor("derivative", fast_candidate.op.name, size, who)

    def _successor(self, kind: str, op: str, size: str, who: str) -> Reply:
        """A new generation or a derivative of `size`, taught by the champion, through Dagster's run queue as
        `rmi generation` and `rmi derivative` run them; the recipe refuses a size it does not know in the run."""
        import re

        from ..automation.jobs import SUCCESSORS, cycle_run_config
        from ..resources import build_resources
        from ..resources.registry import CHAMPION

        if not re.fullmatch(r"[\w./-]{1,200}", size):  # a recipe's size, or a model directory for the HF recipe
            raise Refused(f"not a model size: {size[:40]!r} (sizes look like small, or a save_pretrained directory)")
        champion = build_resources(self.settings)["registry"].version(CHAMPION)
        if champion is None:
            raise Refused(f"there is no champion to teach a {kind} yet")
        job, _ = SUCCESSORS[kind]
        tags = {"rmi/trigger": kind, "rmi/requested_by": who[:200], f"rmi/{kind}_size": size}
        config = {"ops": {op: {"config": {"size": size, "taught": True}}}}
        if kind == "generation":  # an improvement cycle: its challengers may train side by side
            config |= cycle_run_config(self.settings)
        run_id = self.dagster.launch(job, config, tags)
        what = f"{'a new generation' if kind == 'generation' else 'a derivative'} at size {size}"
        return Reply(f"Started {what}, taught by champion v{champion.version}, for {who}: run {run_id[:8]}",
                     [blocks.section(f":seedling: *Queued {what}*, taught by champion v{champion.version}, for "
                                     f"{who}. `/rmi stop {kind} reason...` stops it."),
                      blocks.run_link(self.dagster.run_link(run_id), run_id)])

    def _stop(self, command: Command, who: str) -> Reply:
        """Every queued or running run of that kind is terminated, as the UI's Terminate does."""
        from ..automation.jobs import ACTIVE, SUCCESSORS

        job, tags = SUCCESSORS[command.kind]
        runs = self.dagster.runs(job, tags, [s.value for s in ACTIVE])
        if not runs:
            raise Refused(f"no {command.kind} run is queued or running: nothing was stopped")
        stopped, failed = [], []
        for run_id, state in runs:
            try:
                self.dagster.terminate(run_id)
                stopped.append(f"{run_id[:8]} ({state.lower()})")
            except RuntimeError as exc:
                failed.append(str(exc))
        if not stopped:
            raise RuntimeError("; ".join(failed))
        said = f"Stopped {command.kind} run {', '.join(stopped)}, by {who}: {blocks.escape(command.reason)}"
        return Reply(said + (f". Not stopped: {'; '.join(failed)}" if failed else ""),
                     [blocks.section(f":octagonal_sign: *Stopped {command.kind} run {', '.join(stopped)}* by {who}."
                                     + (f"\nNot stopped: {blocks.escape('; '.join(failed))}" if failed else "")
                                     + f"\n>{blocks.escape(command.reason)}"),
                      *(blocks.run_link(self.dagster.run_link(run_id), run_id) for run_id, _ in runs[:5])])

    def _pause(self, command: Command, who: str) -> Reply:
        stopped = self.dagster.pause()
        names = ", ".join(stopped) or "nothing was running"
        return Reply(f"Paused by {who}: {names}",
                     [blocks.section(f":double_vertical_bar: *The loop is paused* by {who}: no ingest, cycle, "
                                     f"health check or canary verdict starts by itself; alerts stay on.\n"
                                     f"Stopped: {names}. `/rmi resume` starts them again.")])

    def _resume(self, command: Command, who: str) -> Reply:
        started = self.dagster.resume()
        names = ", ".join(started) or "everything was already running"
        return Reply(f"Resumed by {who}: {names}",
                     [blocks.section(f":arrow_forward: *The loop runs by itself again* (resumed by {who}).\n"
                                     f"Started: {names}.")])

    def _canary(self, command: Command, who: str) -> Reply:
        from datetime import UTC, datetime

        from dagster import AssetMaterialization, DagsterInstance

        from ..assets.canary import canary_verdict
        from ..resources import build_resources
        from ..resources.registry import CHAMPION

        registry = build_resources(self.settings)["registry"]
        champion = registry.version(CHAMPION)
        ended = registry.end_canary({"canary_outcome": "aborted", "canary_reason": f"by {who}: {command.reason}",
                                     "override_by": who, "override_via": "Slack",
                                     "override_at": datetime.now(UTC).isoformat()})
        if ended is None:
            raise Refused("no canary is on trial")
        DagsterInstance.get().report_runless_asset_event(AssetMaterialization(
            asset_key=canary_verdict.key, description=f"canary aborted by {who} (Slack): {command.reason}",
            metadata={"verdict": "abort", "canary_version": ended, "reason": f"Aborted by {who}: {command.reason}",
                      "champion_version": str(champion.version) if champion else "none"}))
        return Reply(f"Canary v{ended} aborted by {who}: {blocks.escape(command.reason)}",
                     [blocks.section(f":no_entry: *Canary v{ended} aborted* by {who}; every user is back on "
                                     f"champion v{champion.version if champion else '?'} within "
                                     f"{self.settings.serving.reload_seconds:g} s.\n>{blocks.escape(command.reason)}")])


    def _forget(self, command: Command, who: str) -> Reply:
        """A deletion request, completed by the forget sensor's run; only for RMI_FORGET_ALLOWED. The reply names
        neither the user nor the reason (which may): the channel may be read by many."""
        from ..privacy.forget import request
        from ..privacy.scope import Scope

        slack_user = who.removeprefix("slack:").split(" ", 1)[0]
        if slack_user not in self.settings.privacy.forget_allowed:
            raise Refused("only the users in RMI_FORGET_ALLOWED may delete a user's feedback")
        request_id = request(self.settings, Scope(user_id=command.subject), by=who, via="Slack",
                             reason=command.reason)
        said = (f"Deletion {request_id} requested by {who}: the user's feedback is removed from every store by the "
                "next forget_feedback run; its audit entry is privacy/audit/" + request_id + ".json")
        return Reply(said, [blocks.section(f":wastebasket: *Deletion {request_id}* requested by {who}: the user's "
                                           "feedback is removed from every store by the next forget_feedback run "
                                           f"(audit entry `privacy/audit/{request_id}.json`).")])


def _is_slice(recipe, name: str) -> bool:
    skill, _, tier = name.partition("/")
    return skill in recipe.skills and tier.isdigit() and 0 < int(tier) <= 10_000
