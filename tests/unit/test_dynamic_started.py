"""DynamicBatcher with an instance that starts a batch's execution without a task
(``backends/base.py:BatchStartedInstance``, as PythonInstance does): what it starts, what
falls back to a task, what a failing start answers, and what ``close`` waits for."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from tritium.metrics.stats import ModelStats
from tritium.request import InferenceRequest, ResponseSender
from tritium.scheduling.batch_policy import BatchConfig
from tritium.scheduling.dynamic import DynamicBatcher
from tritium.types import ClientRequest, InferenceResponse


def _request(stats: ModelStats, answers: list[InferenceResponse], rid: str) -> InferenceRequest:
    """A queued request whose final response lands in ``answers``."""
    request = InferenceRequest(ClientRequest("m", 1, id=rid))

    def callback(response: InferenceResponse | None, final: bool) -> None:
        if response is not None:
            answers.append(response)

    ResponseSender(callback).bind(request, lambda r, error, last: None)
    request.queued(stats)
    return request


class _Started:
    """Starts the batches it is given, answering them when the test says; ``refuse``:
    start_batch returns False (the batch must wait); ``broken``: start_batch raises."""

    name = "fake"

    def __init__(self) -> None:
        self.started: list[list[str]] = []
        self.awaited: list[list[str]] = []
        self.pending: list[Callable[[], None]] = []
        self.refuse = False
        self.broken = False

    def start_batch(self, requests: list[InferenceRequest], done: Callable[[], None]) -> bool:
        if self.broken:
            raise TypeError("cannot send that")
        if self.refuse:
            return False
        self.started.append([r.id for r in requests])
        self.pending.append(done)
        return True

    def finish_one(self) -> None:
        asyncio.get_running_loop().call_soon(self.pending.pop(0))

    async def execute(self, requests: list[InferenceRequest]) -> None:
        self.awaited.append([r.id for r in requests])


def _batcher(instance: _Started) -> DynamicBatcher:
    return DynamicBatcher([instance], "1", BatchConfig(max_batch_size=8))


def test_a_batch_starts_without_a_task_and_the_next_forms_while_it_runs() -> None:
    async def scenario() -> tuple[_Started, ModelStats, DynamicBatcher]:
        stats, answers = ModelStats("m", "1"), []
        instance = _Started()
        batcher = _batcher(instance)
        batcher.submit(_request(stats, answers, "a"))
        batcher.submit(_request(stats, answers, "b"))  # the instance is busy: queued
        batcher.submit(_request(stats, answers, "c"))
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
    async def scenario() -> tuple[_Started, ModelStats, DynamicBatcher]:
        stats, answers = ModelStats("m", "1"), []
        instance = _Started()
        instance.refuse = True
        batcher = _batcher(instance)
        batcher.submit(_request(stats, answers, "a"))
        assert len(batcher._running) == 1
        await asyncio.wait_for(asyncio.gather(*batcher._running), 5)
        assert batcher._idle == [instance]
        return instance, stats, batcher

    instance, stats, batcher = asyncio.run(scenario())
    assert instance.started == []
    assert instance.awaited == [["a"]]
    assert stats.execution_count == 1


def test_a_start_that_raises_answers_its_batch_and_frees_the_instance() -> None:
    async def scenario() -> tuple[list[InferenceResponse], DynamicBatcher, _Started]:
        stats, answers = ModelStats("m", "1"), []
        instance = _Started()
        instance.broken = True
        batcher = _batcher(instance)
        batcher.submit(_request(stats, answers, "a"))
        instance.broken = False
        batcher.submit(_request(stats, answers, "b"))
        return answers, batcher, instance

    answers, batcher, instance = asyncio.run(scenario())
    assert [a.id for a in answers] == ["a"]
    assert answers[0].error is not None
    assert "TypeError: cannot send that" in str(answers[0].error)
    assert instance.started == [["b"]]


def test_close_waits_for_a_started_batch() -> None:
    async def scenario() -> list[str]:
        stats, answers = ModelStats("m", "1"), []
        instance = _Started()
        batcher = _batcher(instance)
        batcher.submit(_request(stats, answers, "a"))
        batcher.submit(_request(stats, answers, "b"))  # queued: unloading answers it
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
