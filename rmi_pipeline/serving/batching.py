"""Concurrent requests answered in one forward pass, up to `max_batch` prompts, decoded in a worker thread (in torch's
inference mode). What follows a pass (recording its answers, handing them out) runs once per batch, while the next
batch gathers. Each request carries how it wants its answers decoded (`options`): `forward` decodes requests that
ask alike together, others in passes of their own.

When a batch starts. A pass costs about as much for a few prompts as for many (the arithmetic recipe decodes a
batch's widths together, in the widest's steps: 8 prompts cost 0.6 of 64, bench/widths.py), so a batch waits for
company, and the company that comes is mostly the last batch's askers asking again once answered. So the next
batch takes whoever queued meanwhile, then waits for the last batch's answers to be handed out and for as many
requests as it answered to arrive since; it stops waiting at a lull in arrivals longer than `max_wait_ms` (or a
quarter of a pass, shorter lulls being the machine's scheduling), and after as long as the last pass took; a full
batch starts at once. Starting as soon as the last pass ended instead took only who had queued during it: at 64
clients two halves of them took turns, each half paying nearly a whole pass (bench/serve.py).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field


@dataclass
class Pending:
    prompts: list[str]
    context: object  # what the caller needs back with its share of the batch
    done: asyncio.Future
    options: object = None  # how to decode its prompts, for `forward` to read
    queued: float = field(default_factory=time.perf_counter)


@dataclass
class LastPass:
    """When the last forward pass ended and how long it took; once its answers are handed out, when, and to how
    many requests (`out` None: not yet)."""

    number: int = 0
    ended: float = 0.0
    took: float = 0.0
    out: float | None = 0.0
    asked: int = 0


Finish = Callable[[list[Pending], object], Awaitable[list]]


class Batcher:
    def __init__(self, forward: Callable[[list[Pending]], object], finish: Finish, max_batch: int,
                 max_wait_ms: float):
        """`forward(batch)` decodes the prompts of the batch's requests, in one worker thread, one batch at a time;
        `finish(batch, what forward returned)` then gives each waiting request its result, in order."""
        self.forward, self.finish, self.max_batch, self.max_wait = forward, finish, max_batch, max_wait_ms / 1000
        self._waiting: deque[Pending] = deque()
        self._stirred = asyncio.Event()  # a request queued, or a batch's answers were handed out
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="forward")
        self._task: asyncio.Task | None = None
        self.last = LastPass()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
        self._worker.shutdown(wait=True)

    async def answer(self, prompts: list[str], context: object = None, options: object = None):
        """What `finish` makes of the prompts' completions, decoded along with whatever else is waiting."""
        pending = Pending(prompts, context, asyncio.get_running_loop().create_future(), options)
        self._waiting.append(pending)
        self._stirred.set()
        return await pending.done

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = await self._gather()
            number, started = self.last.number + 1, time.perf_counter()
            try:
                decoded = await loop.run_in_executor(self._worker, _inferred, self.forward, batch)
            except Exception as exc:  # noqa: BLE001 - each waiting request gets the error
                self._passed(number, started)
                _fail(batch, exc)
                self._handed_out(number, batch)
                continue
            self._passed(number, started)
            loop.create_task(self._finish(number, batch, decoded))  # the next batch gathers meanwhile

    async def _gather(self) -> list[Pending]:
        """The next batch: whoever is waiting, then whoever comes while it waits for company (module docstring)."""
        while not self._waiting:
            await self._stir()
        loop, last = asyncio.get_running_loop(), self.last
        first = self._waiting.popleft()
        batch, size = [first], len(first.prompts)
        closes = max(last.ended, first.queued) + last.took  # waiting longer would cost more than a pass of their own
        while True:
            while self._waiting and size + len(self._waiting[0].prompts) <= self.max_batch:
                item = self._waiting.popleft()
                batch.append(item)
                size += len(item.prompts)
            if self._waiting or size >= self.max_batch or self.max_wait <= 0:
                return batch  # full (the next in line starts the next batch), or told not to wait
            if last.out is None:  # the last batch's askers are still waiting for their answers
                until = closes
            else:
                back = [item.queued for item in batch if item.queued >= last.out]
                if len(back) >= last.asked:
                    return batch
                until = min(closes, back[-1] + max(self.max_wait, last.took / 4)) if back else closes
            now = time.perf_counter()
            if now >= until:
                return batch
            timer = loop.call_later(until - now, self._stirred.set)
            await self._stir()
            timer.cancel()

    async def _stir(self) -> None:
        self._stirred.clear()
        await self._stirred.wait()

    def _passed(self, number: int, started: float) -> None:
        ended = time.perf_counter()
        self.last = LastPass(number, ended, ended - started, out=None)

    def _handed_out(self, number: int, batch: list[Pending]) -> None:
        """The answers of pass `number` are out: its askers may ask again, and the next batch waits for them."""
        if self.last.number == number:  # not a pass that a later one followed before its answers were out
            self.last.out, self.last.asked = time.perf_counter(), len(batch)
            self._stirred.set()

    async def _finish(self, number: int, batch: list[Pending], decoded) -> None:
        try:
            results = await self.finish(batch, decoded)
        except Exception as exc:  # noqa: BLE001 - each waiting request gets the error
            _fail(batch, exc)
        else:
            for item, result in zip(batch, results, strict=True):
                if not item.done.done():  # a client that went away cancelled its future
                    item.done.set_result(result)
        self._handed_out(number, batch)


def _inferred(forward: Callable[[list[Pending]], object], batch: list[Pending]):
    """`forward(batch)` in torch's inference mode: no autograd bookkeeping on any tensor, a sixth of a small model's
    pass (the same answers: the same kernels run)."""
    import torch

    with torch.inference_mode():
        return forward(batch)


def _fail(batch: list[Pending], exc: Exception) -> None:
    for item in batch:
        if not item.done.done():
            item.done.set_exception(exc)
