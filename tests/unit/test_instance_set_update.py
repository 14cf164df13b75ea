"""The schedulers learn a new instance set (an instance-group update, issue 45 item 1): an
added instance takes what waits at once; a removed one takes nothing more, and ``update``
returns only once the execution it was running is done."""

from __future__ import annotations

import asyncio

from tritium.metrics.stats import ModelStats
from tritium.scheduling.batch_policy import BatchConfig
from tritium.scheduling.direct import DirectScheduler
from tritium.scheduling.dynamic import DynamicBatcher

from tests.support.started import StartedFake, queued_request


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_direct_scheduler_swaps_a_busy_instance_for_a_new_one() -> None:
    async def scenario() -> None:
        stats, answers = ModelStats("m", "1"), []
        old, new = StartedFake(), StartedFake()
        scheduler = DirectScheduler([old], "1")
        scheduler.submit(queued_request(stats, answers, "a"))
        scheduler.submit(queued_request(stats, answers, "b"))  # old is busy: queued
        update = asyncio.ensure_future(scheduler.update([new], None, [old]))
        await _settle()
        assert new.started == [["b"]]  # the new instance took the queue at once
        assert not update.done()  # old still runs "a"
        scheduler.submit(queued_request(stats, answers, "c"))
        old.finish_one()
        await _settle()
        assert update.done()
        assert old.started == [["a"]]  # it took nothing more
        assert old not in scheduler._idle
        new.finish_one()
        await _settle()
        assert new.started == [["b"], ["c"]]
        new.finish_one()
        await _settle()
        assert scheduler._idle == [new]

    asyncio.run(scenario())


def test_direct_scheduler_drops_an_idle_instance_at_once() -> None:
    async def scenario() -> None:
        first, second = StartedFake(), StartedFake()
        scheduler = DirectScheduler([first, second], "1")
        await asyncio.wait_for(scheduler.update([], None, [first]), 5)
        assert scheduler._idle == [second]

    asyncio.run(scenario())


def test_dynamic_batcher_swaps_a_busy_instance_for_a_new_one() -> None:
    async def scenario() -> None:
        stats, answers = ModelStats("m", "1"), []
        old, new = StartedFake(), StartedFake()
        batcher = DynamicBatcher([old], "1", BatchConfig(max_batch_size=8))
        batcher.submit(queued_request(stats, answers, "a"))
        await _settle()
        batcher.submit(queued_request(stats, answers, "b"))  # old is busy: queued
        update = asyncio.ensure_future(batcher.update([new], None, [old]))
        await _settle()
        assert new.started == [["b"]]
        assert not update.done()
        old.finish_one()
        await _settle()
        assert update.done()
        assert old.started == [["a"]]
        assert batcher._idle == []  # new is still busy; old is gone
        new.finish_one()
        await _settle()
        assert batcher._idle == [new]

    asyncio.run(scenario())
