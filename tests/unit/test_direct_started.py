"""DirectScheduler with an instance that starts executions without a task
(``backends/base.py:StartedInstance``, as PythonInstance does): what it starts, what falls
back to a task, what a failing start answers, and what ``close`` waits for."""

from __future__ import annotations

import asyncio

from tritium.metrics.stats import ModelStats
from tritium.scheduling.direct import DirectScheduler
from tritium.types import InferenceResponse

from tests.support.started import StartedFake, queued_request


def test_an_idle_instance_starts_without_a_task_and_takes_the_queue_when_done() -> None:
    async def scenario() -> tuple[StartedFake, ModelStats, DirectScheduler]:
        stats, answers = ModelStats("m", "1"), []
        instance = StartedFake()
        scheduler = DirectScheduler([instance], "1")
        scheduler.submit(queued_request(stats, answers, "a"))
        scheduler.submit(queued_request(stats, answers, "b"))  # the instance is busy: queued
        scheduler.submit(queued_request(stats, answers, "c"))
        assert not scheduler._running  # no task
        assert instance.started == [["a"]]
        instance.finish_one()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert instance.started == [["a"], ["b", "c"]]  # what queued, in one hand-off
        instance.finish_one()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert not answers  # the instance answers; the scheduler only counts
        return instance, stats, scheduler

    instance, stats, scheduler = asyncio.run(scenario())
    assert stats.execution_count == 3  # each request its own execution
    assert scheduler._idle == [instance]


def test_an_instance_that_must_wait_runs_in_a_task() -> None:
    async def scenario() -> StartedFake:
        stats, answers = ModelStats("m", "1"), []
        instance = StartedFake()
        instance.refuse = True
        scheduler = DirectScheduler([instance], "1")
        scheduler.submit(queued_request(stats, answers, "a"))
        assert len(scheduler._running) == 1
        await asyncio.wait_for(asyncio.gather(*scheduler._running), 5)
        assert scheduler._idle == [instance]
        return instance

    instance = asyncio.run(scenario())
    assert instance.started == []
    assert instance.awaited == [["a"]]


def test_a_start_that_raises_answers_its_requests_and_frees_the_instance() -> None:
    async def scenario() -> tuple[list[InferenceResponse], DirectScheduler, StartedFake]:
        stats, answers = ModelStats("m", "1"), []
        instance = StartedFake()
        instance.broken = True
        scheduler = DirectScheduler([instance], "1")
        scheduler.submit(queued_request(stats, answers, "a"))
        instance.broken = False
        scheduler.submit(queued_request(stats, answers, "b"))
        return answers, scheduler, instance

    answers, scheduler, instance = asyncio.run(scenario())
    assert [a.id for a in answers] == ["a"]
    assert answers[0].error is not None
    assert "TypeError: cannot send that" in str(answers[0].error)
    assert instance.started == [["b"]]


def test_close_waits_for_what_was_started() -> None:
    async def scenario() -> list[str]:
        stats, answers = ModelStats("m", "1"), []
        events: list[str] = []
        instance = StartedFake()
        scheduler = DirectScheduler([instance], "1")
        scheduler.submit(queued_request(stats, answers, "a"))
        scheduler.submit(queued_request(stats, answers, "b"))  # queued: failed by close

        async def close() -> None:
            await scheduler.close()
            events.append("closed")

        closing = asyncio.ensure_future(close())
        await asyncio.sleep(0.01)
        events.append("answered")
        instance.finish_one()
        await asyncio.wait_for(closing, 5)
        assert [a.id for a in answers] == ["b"]
        return events

    assert asyncio.run(scenario()) == ["answered", "closed"]
