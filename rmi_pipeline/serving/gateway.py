"""What the routes share: the followed models, their batchers, the feedback log, the metrics and the limits.

One Gateway per app, on `app.state.gateway`; `start` and `stop` are the app's start-up and shutdown.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import socket
import time
import uuid
from dataclasses import dataclass
from functools import partial

from ..recipes.base import Recipe
from ..recipes.completion import Completion, Decoding
from ..resources.registry import CANARY, CANARY_FOR, CHALLENGER, CHAMPION
from ..settings import Serving, Settings
from .heartbeat import Heartbeat
from .limits import RateLimiter, RequestLimits
from .log import FeedbackLog, new_response_id
from .options import PLAIN, Asked
from .routing import in_canary
from .shadow import Shadow

log = logging.getLogger("rmi.serve")


class NotReady(Exception):
    """No version has the alias yet (or the canary ended): nothing to answer with."""


@dataclass
class Decoded:
    """One batch's forward passes: the version that answered, and per prompt (in the batch's order) its completion,
    how it was sampled ({"temperature", "seed"}; None: greedy), its length in the model's tokens, and the
    completion split into the recipe's tokens where the request streams it (else None)."""

    version: str
    completions: list[Completion]
    sampling: list[dict | None]
    prompt_tokens: list[int]
    pieces: list[list[str] | None]


class Gateway:
    """The gateway of `alias`: answers in batches with the version behind it (and a canary on trial for that alias
    answers its share of users), each recorded in the log before it is given."""

    upstream = None  # the engine that answers instead (serving/proxy.py); None: the gateway's own models answer
    log_type = FeedbackLog

    def __init__(self, settings: Settings, alias: str):
        from ..resources import build_resources, layout
        from .batching import Batcher
        from .metrics import Metrics

        self.config: Serving = settings.serving
        self.model_name, self.alias, self.canary_share = settings.model_name, alias, settings.canary.share
        self.recipe = self._recipe(settings)
        resources = build_resources(settings)
        self.storage = storage = resources["storage"]
        from ..privacy.redact import redactor

        redact = redactor(settings).parquet if settings.privacy.redact else None  # before any batch file is written
        self.write_batch = lambda name, data: storage.write_bytes(
            layout.incoming(name), redact(data, self.recipe) if redact else data)
        name = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.heartbeat = Heartbeat(storage, layout.gateway(name), alias, self.canary_share)
        registry = resources["registry"]
        self.model = self._follow(registry, alias)
        # it also answers a share of users with the canary while one is on trial for its alias
        self.canary = (self._follow(registry, CANARY, drop_when_gone=True,
                                    serves=lambda mv: mv.tags.get(CANARY_FOR, CHAMPION) == alias)
                       if self.canary_share > 0 else None)
        self.shadow = (self._shadow(self._follow(registry, CHALLENGER, drop_when_gone=True))
                       if self.config.shadow else None)
        self.log = self.log_type(settings.resolved_serve_log_path, max_bytes=self.config.log_max_bytes,
                                 window_seconds=self.config.feedback_window_seconds)
        self.metrics = Metrics(self)
        self.explore = random.Random()  # which answers are sampled, and their seeds
        self.batchers = {arm: Batcher(partial(self._forward, followed), partial(self._record, arm),
                                      self.config.max_batch, self.config.max_wait_ms)
                         for arm, followed in ((alias, self.model), (CANARY, self.canary)) if followed}
        self.limiter = RateLimiter(self.config.rate_limit)
        self.limits = RequestLimits(self.config.max_prompts, settings.feedback.max_text_chars)
        self._flusher: asyncio.Task | None = None

    def _recipe(self, settings: Settings) -> Recipe:
        """The recipe that reads and decodes, and the forward pass's threads; a served process never forks to
        decode (ml/cores.py), a shadow's answers included."""
        from ..ml.cores import limit_processes
        from ..recipes.base import load_recipe

        recipe = load_recipe(settings.recipe)
        import torch

        torch.set_num_threads(self.config.threads)
        limit_processes(1)
        return recipe

    def _follow(self, registry, alias: str, **kwargs):
        """The model behind `alias`, followed as it moves (models.FollowedModel's keyword arguments)."""
        from .models import FollowedModel

        return FollowedModel(registry, self.recipe, alias, self.config.reload_seconds, **kwargs)

    def _shadow(self, followed) -> Shadow:
        return Shadow(followed, self.recipe)

    @property
    def followed(self) -> list:
        return [m for m in (self.model, self.canary, self.shadow and self.shadow.followed) if m]

    async def start(self) -> None:
        """Load the models, start the batchers, say this gateway serves, and flush in the background."""
        for followed in self.followed:
            await asyncio.to_thread(followed.start)
        import gc

        gc.freeze()  # what start-up made lives on: collections stop rescanning it (long pauses under load)
        for batcher in self.batchers.values():
            batcher.start()
        await asyncio.to_thread(self.heartbeat.beat)
        self._flusher = asyncio.get_running_loop().create_task(self.keep_flushing())
        if self.model.current:
            log.info("gateway ready to answer with %s@%s", self.model_name, self.alias)
        else:
            log.warning("no version has the alias %s yet: /readyz says 503 until one does", self.alias)

    async def stop(self) -> None:
        """Stop answering, take the heartbeat back, and write what the log holds (else the next start writes it)."""
        if self._flusher:
            self._flusher.cancel()
        await asyncio.to_thread(self.heartbeat.stop)
        for batcher in self.batchers.values():
            await batcher.stop()
        for followed in self.followed:
            followed.stop()
        if self.shadow:
            self.shadow.stop()
        try:
            await self.flush()
        except Exception as exc:  # noqa: BLE001 - kept in the log: the next start writes it
            log.warning("feedback left in the log at shutdown (written at the next start): %s", str(exc)[:300])
        self.log.close()

    def _forward(self, followed, batch) -> Decoded:
        """The batch's requests decoded by the version `followed` holds now, those that ask alike together."""
        loaded = followed.current  # held for the whole batch: a swap meanwhile changes the next batch only
        if loaded is None:
            raise NotReady()
        prompts = [p for item in batch for p in item.prompts]
        groups: dict[object, tuple[Asked, list[int]]] = {}
        at = 0
        for item in batch:
            # a request with a seed of its own is decoded alone: its answers then depend on nothing else waiting
            key = item.options if item.options.seed is None else id(item)
            groups.setdefault(key, (item.options, []))[1].extend(range(at, at + len(item.prompts)))
            at += len(item.prompts)
        completions, sampling = [None] * len(prompts), [None] * len(prompts)
        for asked, rows in groups.values():
            self._decode(loaded.model, asked, prompts, rows, completions, sampling)
        # split here, in the forward thread: a tokenizer is not to be used from two threads at once
        streams = [item.context[1] for item in batch for _ in item.prompts]
        pieces = [self.recipe.pieces(loaded.model, c.text) if s else None for c, s in zip(completions, streams,
                                                                                           strict=True)]
        return Decoded(loaded.version, completions, sampling, self.recipe.prompt_tokens(loaded.model, prompts), pieces)

    def _decode(self, model, asked: Asked, prompts: list[str], rows: list[int], completions: list,
                sampling: list) -> None:
        """Where the request leaves the temperature to the gateway, greedy answers but for RMI_SERVE_EXPLORE_SHARE
        of them, sampled with one seed per pass (both arms alike, since the canary's verdict compares their
        thumbs); else as the request asks (its seed drawn here where it set none). Into `completions` and
        `sampling` at `rows`."""
        if asked.temperature is None:
            share = self.config.explore_share
            explored = [self.explore.random() < share for _ in rows]
        else:
            explored = [asked.temperature > 0] * len(rows)
        if greedy := [r for r, e in zip(rows, explored, strict=True) if not e]:
            for r, completion in zip(greedy, self._complete(model, [prompts[r] for r in greedy],
                                                            asked.decoding(0.0, 0)), strict=True):
                completions[r] = completion
        if sampled := [r for r, e in zip(rows, explored, strict=True) if e]:
            how = asked.decoding(self.config.explore_temperature, self.explore.randrange(2**31))
            for r, completion in zip(sampled, self._complete(model, [prompts[r] for r in sampled], how),
                                     strict=True):
                completions[r], sampling[r] = completion, {"temperature": how.temperature, "seed": how.seed}

    def _complete(self, model, prompts: list[str], decoding: Decoding) -> list[Completion]:
        """A request that sets no max_tokens, top_p or stop is answered by the recipe's `answer` (or `sample`), the
        loop's own decoding, which its evals measured (the contract's default `complete`, whatever a recipe
        overrides); the recipe's `complete` where it does."""
        plain = decoding.max_tokens is None and decoding.top_p == 1.0 and not decoding.stop
        return (Recipe.complete(self.recipe, model, prompts, decoding) if plain else
                self.recipe.complete(model, prompts, decoding))

    def arm(self, user_id: str) -> str:
        """The canary for its share of users while one is loaded, else the gateway's own alias."""
        canary = self.canary.current if self.canary else None
        if canary and in_canary(user_id, canary.version, self.canary_share):
            return CANARY
        return self.alias

    def followed_by(self, arm: str):
        """The followed model that answers as `arm` (the gateway's alias, or the canary)."""
        return self.canary if arm == CANARY and arm != self.alias else self.model

    async def answer(self, prompts: list[str], user_id: str, options: Asked = PLAIN, arm: str | None = None,
                     stream: bool = False) -> list[dict]:
        """Answers to `prompts`, recorded, from `arm` (default the user's: the canary for its share of users);
        `stream`: each with its `pieces`, the completion split into the recipe's tokens."""
        pinned, arm, context = arm is not None, arm or self.arm(user_id), (user_id, stream)
        try:
            return await self.batchers[arm].answer(prompts, context, options)
        except NotReady:
            if arm == self.alias or pinned:
                raise
            return await self.batchers[self.alias].answer(prompts, context, options)  # the canary ended meanwhile

    def loaded(self, arm: str):
        """The model `arm` answers with now (NotReady where none)."""
        loaded = self.followed_by(arm).current if arm in self.batchers else None
        if loaded is None:
            raise NotReady()
        return loaded.model

    async def _record(self, arm: str, batch, decoded: Decoded) -> list[list[dict]]:
        """A batch's answers, each with a response id, committed to the log in one go before anyone sees them
        (so that feedback on them finds them, even after a restart)."""
        self.metrics.batch.observe(len(decoded.completions))
        done = iter(zip(decoded.completions, decoded.sampling, decoded.prompt_tokens, decoded.pieces, strict=True))
        answers, shadowed = [], []
        for item in batch:
            answers.append([])
            for p in item.prompts:
                completion, sampling, prompt_tokens, pieces = next(done)
                answer = {"response_id": new_response_id(), "completion": completion.text, "sampling": sampling,
                          "model_version": decoded.version, "prompt": p, "user_id": item.context[0], "arm": arm,
                          "skill": self._skill(p), "tokens": completion.tokens, "prompt_tokens": prompt_tokens,
                          "finish_reason": completion.finish_reason, "cut": completion.cut, "pieces": pieces}
                answers[-1].append(answer)
                # the shadow compares the champion's own choices: greedy, whole answers (not a client's cut)
                if sampling is None and item.options == PLAIN:
                    shadowed.append(answer)
        await asyncio.wrap_future(self.log.record_answers([a for share in answers for a in share]))
        if self.shadow and arm == self.alias and shadowed:  # after the answers are safe: it never delays them
            self.shadow.submit(decoded.version, [a["prompt"] for a in shadowed], [a["completion"] for a in shadowed])
        return answers

    def _skill(self, prompt: str) -> str | None:
        return self.recipe.slice_of(prompt)[0] if self.recipe.is_valid_prompt(prompt) else None

    async def flush(self) -> list[str]:
        names = await asyncio.to_thread(self.log.flush, self.write_batch)
        for name in names:
            log.info("wrote feedback batch %s", name)
        self.metrics.flushed.inc(len(names))
        return names

    async def keep_flushing(self) -> None:
        """Write a batch file when enough events are logged, or when the oldest has waited long enough; and beat
        the heartbeat every HEARTBEAT_SECONDS."""
        waiting_since = None  # when the flusher first saw the events now pending
        while True:
            await asyncio.sleep(min(1.0, self.config.flush_seconds))
            await asyncio.to_thread(self.heartbeat.beat)
            try:
                pending = await asyncio.to_thread(self.log.pending)
                waiting_since = (waiting_since or time.monotonic()) if pending else None
                if pending >= self.config.flush_events or (
                        pending and time.monotonic() - waiting_since >= self.config.flush_seconds):
                    await self.flush()
                    waiting_since = None
            except Exception as exc:  # noqa: BLE001 - the store out of reach: events stay in the log, retried
                log.warning("could not write a feedback batch (kept in the log, retried): %s", str(exc)[:300])
