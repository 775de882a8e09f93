"""Concurrent requests answered in one forward pass: requests wait at most `max_wait_ms` for company, up to
`max_batch` prompts, then the model decodes them together in a worker thread while the next batch gathers. What
follows a pass (recording its answers) runs once per batch, beside the next pass. Each request carries how it wants
its answers decoded (`options`): `forward` decodes requests that ask alike together, others in passes of their
own."""

from __future__ import annotations

import asyncio
import time
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


Finish = Callable[[list[Pending], object], Awaitable[list]]


class Batcher:
    def __init__(self, forward: Callable[[list[Pending]], object], finish: Finish, max_batch: int,
                 max_wait_ms: float):
        """`forward(batch)` decodes the prompts of the batch's requests, in one worker thread, one batch at a time;
        `finish(batch, what forward returned)` then gives each waiting request its result, in order."""
        self.forward, self.finish, self.max_batch, self.max_wait = forward, finish, max_batch, max_wait_ms / 1000
        self._queue: asyncio.Queue[Pending] = asyncio.Queue()
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="forward")
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
        self._worker.shutdown(wait=True)

    async def answer(self, prompts: list[str], context: object = None, options: object = None):
        """What `finish` makes of the prompts' completions, decoded along with whatever else is waiting."""
        pending = Pending(prompts, context, asyncio.get_running_loop().create_future(), options)
        await self._queue.put(pending)
        return await pending.done

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        carried: Pending | None = None
        while True:
            batch = [carried or await self._queue.get()]
            carried, size = None, len(batch[0].prompts)
            deadline = batch[0].queued + self.max_wait
            while size < self.max_batch:
                try:
                    item = self._queue.get_nowait() if deadline <= time.perf_counter() else \
                        await asyncio.wait_for(self._queue.get(), deadline - time.perf_counter())
                except (asyncio.QueueEmpty, TimeoutError):
                    break
                if size + len(item.prompts) > self.max_batch:
                    carried = item  # starts the next batch
                    break
                batch.append(item)
                size += len(item.prompts)
            try:
                decoded = await loop.run_in_executor(self._worker, self.forward, batch)
            except Exception as exc:  # noqa: BLE001 - each waiting request gets the error
                _fail(batch, exc)
                continue
            loop.create_task(self._finish(batch, decoded))  # the next pass starts meanwhile

    async def _finish(self, batch: list[Pending], decoded) -> None:
        try:
            results = await self.finish(batch, decoded)
        except Exception as exc:  # noqa: BLE001 - each waiting request gets the error
            _fail(batch, exc)
            return
        for item, result in zip(batch, results, strict=True):
            if not item.done.done():  # a client that went away cancelled its future
                item.done.set_result(result)


def _fail(batch: list[Pending], exc: Exception) -> None:
    for item in batch:
        if not item.done.done():
            item.done.set_exception(exc)
