"""DynamicBatcher with an instance that starts a batch's execution without a task
(``backends/base.py:BatchStartedInstance``, as PythonInstance does): what it starts, what
falls back to a task, what a failing start answers, and what ``close`` waits for."""

from __future__ import annotations

import asyncio

from tritium.metrics.stats import ModelStats
from tritium.scheduling.batch_policy import BatchConfig
from tritium.scheduling.dynamic import DynamicBatcher
from tritium.types import InferenceResponse

from tests.support.started import StartedFake, queued_request


def _batcher(instance: StartedFake) -> DynamicBatcher:
    return DynamicBatcher([instance], "1", BatchConfig(max_batch_size=8))


def test_a_batch_starts_without_a_task_and_the_next_forms_while_it_runs() -> None:
    async def scenario() -> tuple[StartedFake, ModelStats, DynamicBatcher]:
        stats, answers = ModelStats("m", "1"), []
        instance = StartedFake()
        batcher = _batcher(instance)
        batcher.submit(queued_request(stats, answers, "a"))
        batcher.submit(queued_request(stats, answers, "b"))  # the instance is busy: queued
        batcher.submit(queued_request(stats, answers, "c"))
        assert not batcher._running  # no task
        assert instance.started == [["a"]]
        instance.finish_one()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert instance.started == [["a"], ["b", "c"]]  # what queued: one execution
        instance.finish_one()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert not answers  # the instance answers; the batcher only counts
        return instance, stats, batcher

    instance, stats, batcher = asyncio.run(scenario())
    assert stats.execution_count == 2  # one execution per batch
    assert batcher._idle == [instance]


def test_a_batch_that_must_wait_runs_in_a_task() -> None:
    async def scenario() -> tuple[StartedFake, ModelStats, DynamicBatcher]:
        stats, answers = ModelStats("m", "1"), []
        instance = StartedFake()
        instance.refuse = True
        batcher = _batcher(instance)
        batcher.submit(queued_request(stats, answers, "a"))
        assert len(batcher._running) == 1
        await asyncio.wait_for(asyncio.gather(*batcher._running), 5)
        assert batcher._idle == [instance]
        return instance, stats, batcher

    instance, stats, batcher = asyncio.run(scenario())
    assert instance.started == []
    assert instance.awaited == [["a"]]
    assert stats.execution_count == 1


def test_a_start_that_raises_answers_its_batch_and_frees_the_instance() -> None:
    async def scenario() -> tuple[list[InferenceResponse], DynamicBatcher, StartedFake]:
        stats, answers = ModelStats("m", "1"), []
        instance = StartedFake()
        instance.broken = True
        batcher = _batcher(instance)
        batcher.submit(queued_request(stats, answers, "a"))
        instance.broken = False
        batcher.submit(queued_request(stats, answers, "b"))
        return answers, batcher, instance

    answers, batcher, instance = asyncio.run(scenario())
    assert [a.id for a in answers] == ["a"]
    assert answers[0].error is not None
    assert "TypeError: cannot send that" in str(answers[0].error)
    assert instance.started == [["b"]]


def test_close_waits_for_a_started_batch() -> None:
    async def scenario() -> list[str]:
        stats, answers = ModelStats("m", "1"), []
        instance = StartedFake()
        batcher = _batcher(instance)
        batcher.submit(queued_request(stats, answers, "a"))
        batcher.submit(queued_request(stats, answers, "b"))  # queued: unloading answers it
        events: list[str] = []

        async def close() -> None:
            await batcher.close()
            events.append("closed")

        closing = asyncio.ensure_future(close())
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert events == []  # the started batch is still running
        events.extend(a.id for a in answers)
        instance.finish_one()
        await asyncio.wait_for(closing, 5)
        return events

    assert asyncio.run(scenario()) == ["b", "closed"]
