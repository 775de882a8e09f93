"""The world the loop improves against: users ask the gateway (`rmi serve`) over HTTP and rate its answers there,
as the users of a real app would; the gateway writes their feedback into batch files."""

from __future__ import annotations

import asyncio
import json
import random
from collections import Counter

from ..recipes.base import Task, load_recipe
from ..resources import build_resources, layout
from ..settings import Settings
from .curators import curate_eval_suite
from .users import ASKED_AGAIN, COPIED, Drift, Reactions, RecipeTask, react

CLIENTS = 64  # users asking at the same time


class World:
    def __init__(self, settings: Settings, gateway_url: str | None = None, api_key: str | None = None, task=None):
        """`gateway_url`: a running `rmi serve` (rmi_pipeline.serving.process.running_gateway starts one); only
        the curators work without it. `task`: what users ask (default the recipe's own problems: users.RecipeTask;
        world/catalogue's CatalogueTask is a task the pipeline cannot check)."""
        self.settings, self.gateway_url = settings, gateway_url
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.recipe = load_recipe(settings.recipe)
        self.task = task or RecipeTask(self.recipe)
        resources = build_resources(settings)
        self.registry, self.eval_store = resources["registry"], resources["eval_store"]

    def ensure_eval_suite(self) -> bool:
        """Curators write the suite once; returns True when they had to (a team's eval file needs none)."""
        if self.eval_store.exists(layout.ANCHOR) or self.settings.evals.files:
            return False
        curate_eval_suite(self.eval_store, self.recipe, self.settings.evals.items_per_slice, self.settings.seed)
        return True

    def serve_cycle(self, cycle: int) -> tuple[list[str], dict]:
        """Users of `cycle` ask the gateway and rate its answers; returns the batch files its closing flush wrote
        (it may have written others during the round) and what happened (queries, the version that answered and
        how often it was right, reactions)."""
        return self.serve(cycle, random.Random(f"users-{self.settings.seed}-{cycle}"))

    def serve(self, cycle: int, rng: random.Random, drift: Drift | None = None,
              partner_share: float = 0.0) -> tuple[list[str], dict]:
        """One round of users of `cycle`, some of them moved to a drifted slice, `partner_share` of them a partner
        app's (Recipe.partner_task), then the gateway's log flushed. Every question's answer is rated (by a user or
        the monitor), left an implicit signal, or silent: `queries == rated + sum(implicit) + silent`. Users rate by
        what they believe (the task's `belief`); `right`, `served_accuracy` and `by_slice` measure the truth, and
        `asserting` (questions whose asker asserted a wrong answer) and `agreed_with_asserting` (answers that went
        along with it: the live sycophancy rate) are always there, 0 where no one asserts."""
        s = self.settings
        tasks = self._eval_like(rng, self.task.questions(rng, s.simulation.queries_per_cycle, cycle, drift))
        tasks, pushed = self._partner(rng, tasks, partner_share)
        sim = s.simulation
        reactions = Reactions(sim.wrong_user_share, sim.correction_share, sim.rating_share, sim.copy_share,
                              sim.ask_again_share)
        # each user's own random stream, drawn in order: the round is the same whatever order the replies come in
        streams = [random.Random(rng.getrandbits(64)) for _ in tasks]
        garbled = [rng.random() < s.simulation.malformed_share for _ in tasks]  # a buggy client now and then
        results = asyncio.run(self._round(tasks, streams, garbled, pushed, reactions))
        right = [r["right"] for r in results]
        versions = Counter(r["model_version"] for r in results)
        rated = Counter(r["model_version"] for r in results if r["rating"] is not None)
        down = Counter(r["model_version"] for r in results if r["rating"] == "down")
        signals = Counter(r["signal"] for r in results if r["signal"] is not None)
        stats = {
            "queries": len(tasks), "champion_version": versions.most_common(1)[0][0],
            "versions": dict(versions), "down_by_version": {v: down[v] for v in versions},
            "rated_by_version": {v: rated[v] for v in versions},
            "by_slice": _by_slice(tasks, results),
            "served_accuracy": sum(right) / len(tasks),
            "rated": rated.total(), "reports": sum(r["source"] == "report" for r in results),
            "up": sum(r["rating"] == "up" for r in results), "down": down.total(),
            "corrections": sum(r["correction"] is not None for r in results),
            "implicit": {signal: signals[signal] for signal in (ASKED_AGAIN, COPIED)},
            "silent": sum(r["rating"] is None and r["signal"] is None for r in results),
            "asked_again_answers": sum(r["again"] is not None for r in results),
            "garbled": sum(r["garbled"] for r in results), "refused": sum(r["refused"] for r in results),
            "asserting": sum(r["agreed"] is not None for r in results),
            "agreed_with_asserting": sum(r["agreed"] is True for r in results),
        }
        if partner_share:
            theirs = [(r, ok) for r, ok, p in zip(results, right, pushed, strict=True) if p is not None]
            stats |= {"partner_queries": len(theirs),
                      "partner_accuracy": sum(ok for _, ok in theirs) / max(1, len(theirs)),
                      "partner_down_by_version": dict(Counter(r["model_version"] for r, _ in theirs
                                                              if r["rating"] == "down"))}
        if drift is not None:
            on_slice = [ok for t, ok in zip(tasks, right, strict=True) if t.slice == drift.slice]
            stats |= {"drift_queries": len(on_slice), "drift_accuracy": sum(on_slice) / max(1, len(on_slice))}
        return self.flush(), stats

    def _eval_like(self, rng: random.Random, tasks: list[Task]) -> list[Task]:
        """A share of users (RMI_SIM_EVAL_LIKE_SHARE) ask about an eval item's text, where the recipe has variants."""
        share = self.settings.simulation.eval_like_share
        if (not tasks or not share or not isinstance(self.task, RecipeTask)
                or self.recipe.variant(tasks[0], random.Random(0)) is None):
            return tasks
        items = [Task(**i) for i in self.eval_store.read_json(layout.ANCHOR)["items"]]
        return [self.recipe.variant(rng.choice(items), rng) if rng.random() < share else task for task in tasks]

    def _partner(self, rng: random.Random, tasks: list[Task], share: float) -> tuple[list[Task], list[str | None]]:
        """`share` of the questions come from the partner app's users instead, each with the correction its client
        pushes (None for everyone else's)."""
        out, pushed = [], []
        for task in tasks:
            theirs = self.recipe.partner_task(task, rng) if share and rng.random() < share else None
            out.append(theirs[0] if theirs else task)
            pushed.append(theirs[1] if theirs else None)
        return out, pushed

    def ask(self, prompts: list[str], user_id: str) -> list[str]:
        """Completions from the gateway, as any client gets them."""
        import httpx

        answers = []
        with httpx.Client(base_url=self.gateway_url, headers=self.headers, timeout=60) as client:
            most = self.settings.serving.max_prompts
            for start in range(0, len(prompts), most):
                reply = client.post("/v1/answers", json={"prompts": prompts[start:start + most], "user_id": user_id})
                reply.raise_for_status()
                answers += [a["completion"] for a in reply.json()["answers"]]
        return answers

    def flush(self) -> list[str]:
        import httpx

        reply = httpx.post(f"{self.gateway_url}/v1/flush", headers=self.headers, timeout=120)
        reply.raise_for_status()
        return reply.json()["batches"]

    async def _round(self, tasks, streams, garbled, pushed, reactions) -> list[dict]:
        import aiohttp  # a cheaper client than httpx's async one under many connections (bench/serve.py)

        gate = asyncio.Semaphore(CLIENTS)
        async with aiohttp.ClientSession(base_url=self.gateway_url, headers=self.headers,
                                         connector=aiohttp.TCPConnector(limit=CLIENTS),
                                         timeout=aiohttp.ClientTimeout(total=60)) as client:

            async def ask(prompt: str, user_id: str) -> dict:
                async with client.post("/v1/answers", json={"prompts": [prompt], "user_id": user_id}) as reply:
                    reply.raise_for_status()
                    return (await reply.json())["answers"][0]

            async def user(i: int) -> dict:
                async with gate:
                    rng = streams[i]
                    who = f"{'partner' if pushed[i] is not None else 'user'}-{rng.randrange(500)}"
                    answer = await ask(tasks[i].prompt, who)
                    completion = answer["completion"]
                    believed, believed_right = self.task.belief(tasks[i], completion)  # what the user rates by
                    feedback = react(rng, believed, completion, answer["response_id"], reactions,
                                     self.task.well_formed(completion), believed_right)
                    answer["right"] = self.task.is_right(tasks[i], completion)
                    # a user who believes other than the truth asserted it: did the answer agree (None: asserted none)
                    answer["agreed"] = believed_right if believed.answer != tasks[i].answer else None
                    silent = {"rating": None, "correction": None, "source": None, "signal": None, "again": None,
                              "garbled": False, "refused": False}
                    if feedback is None:
                        return {**answer, **silent}
                    signal, again = feedback["meta"].get("signal"), None
                    if self.task.tags_topic:  # the app knows what the question was about
                        feedback["skill"] = tasks[i].skill
                    # the partner app's client sends its ledger's total as the correction, whatever its user said
                    # (the monitor's reports of malformed answers do not go through it)
                    if pushed[i] is not None and feedback["rating"] is not None and feedback["source"] == "user":
                        feedback |= {"correction": pushed[i], "meta": {"client": "partner-app"}}
                    if signal == ASKED_AGAIN:  # the same question again, soon: the app links the two answers
                        again = (await ask(tasks[i].prompt, who))["response_id"]
                        feedback["meta"]["again"] = again
                    body = json.dumps(feedback)
                    if garbled[i]:
                        body = body[:rng.randrange(1, len(body))]
                    async with client.post("/v1/feedback", data=body,
                                           headers={"Content-Type": "application/json"}) as sent:
                        if sent.status != 202 and not garbled[i]:
                            sent.raise_for_status()
                        return {**answer, **feedback, "signal": signal, "again": again, "garbled": garbled[i],
                                "refused": sent.status != 202}

            return await asyncio.gather(*(user(i) for i in range(len(tasks))))


def _by_slice(tasks: list[Task], results: list[dict]) -> dict[str, dict]:
    """Per slice of the questions (a topic, a skill/tier): asked, answered right, rated, thumbs-down."""
    out: dict[str, dict] = {}
    for task, r in zip(tasks, results, strict=True):
        row = out.setdefault(task.slice, {"queries": 0, "right": 0, "rated": 0, "down": 0})
        row["queries"] += 1
        row["right"] += bool(r["right"])
        row["rated"] += r["rating"] is not None
        row["down"] += r["rating"] == "down"
    return dict(sorted(out.items()))
