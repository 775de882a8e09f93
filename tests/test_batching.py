"""The gateway's batcher (serving/batching.py) with a stand-in forward pass that takes a fixed time whatever its size,
as the arithmetic model's nearly does: clients that ask again once answered share full passes instead of splitting
into halves that take turns, and a lone client is never held back waiting for company."""

import asyncio
import random
import time

from rmi_pipeline.serving.batching import Batcher

PASS_SECONDS = 0.04


def batcher(max_wait_ms: float, passes: list[int]) -> Batcher:
    def forward(batch):
        passes.append(sum(len(item.prompts) for item in batch))
        time.sleep(PASS_SECONDS)
        return [p.upper() for item in batch for p in item.prompts]

    async def finish(batch, decoded):
        await asyncio.sleep(0.005)  # recording the answers
        done = iter(decoded)
        return [[next(done) for _ in item.prompts] for item in batch]

    return Batcher(forward, finish, max_batch=32, max_wait_ms=max_wait_ms)


def test_clients_that_ask_again_once_answered_share_full_passes():
    passes: list[int] = []

    async def run():
        b = batcher(10, passes)
        b.start()
        rng = random.Random(0)

        async def client(i):
            for n in range(8):
                assert await b.answer([f"q{i}-{n}"]) == [f"Q{i}-{n}"]
                await asyncio.sleep(rng.uniform(0, 0.03))  # answers reach clients over 30 ms, longer than max_wait

        await asyncio.gather(*(client(i) for i in range(32)))
        await b.stop()

    asyncio.run(run())
    assert sum(passes) == 32 * 8
    assert sum(passes) / len(passes) >= 24, passes  # starting when the last pass ended: 17 a pass


def test_a_lone_client_is_not_held_back_for_company():
    passes: list[int] = []

    async def run():
        b = batcher(500, passes)  # a long wait for company, which one client asking at a time never gets
        b.start()
        took = []
        for n in range(4):
            started = time.perf_counter()
            await b.answer([f"q{n}"])
            took.append(time.perf_counter() - started)
        await b.stop()
        return took

    took = asyncio.run(run())
    assert passes == [1, 1, 1, 1]
    assert max(took[1:]) < 0.25, took  # its pass and the recording, not the 500 ms
