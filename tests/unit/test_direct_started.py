"""DirectScheduler with an instance that starts executions without a task
(``backends/base.py:StartedInstance``, as PythonInstance does): what it starts, what falls
back to a task, what a failing start answers, and what ``close`` waits for."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from tritium.metrics.stats import ModelStats
from tritium.request import InferenceRequest, ResponseSender
from tritium.scheduling.direct import DirectScheduler
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
    """Starts what it is given, answering it when the test says; ``refuse``: start returns
    False (the executions must wait); ``broken``: start raises."""

    name = "fake"

    def __init__(self) -> None:
        self.started: list[list[str]] = []
        self.awaited: list[list[str]] = []
        self.pending: list[Callable[[], None]] = []
        self.refuse = False
        self.broken = False

    def start(self, requests: list[InferenceRequest], done: Callable[[], None]) -> bool:
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

    async def execute_each(self, requests: list[InferenceRequest]) -> None:
        self.awaited.append([r.id for r in requests])


def test_an_idle_instance_starts_without_a_task_and_takes_the_queue_when_done() -> None:
    async def scenario() -> tuple[_Started, ModelStats, DirectScheduler]:
        stats, answers = ModelStats("m", "1"), []
        instance = _Started()
        scheduler = DirectScheduler([instance], "1")
        scheduler.submit(_request(stats, answers, "a"))
        scheduler.submit(_request(stats, answers, "b"))  # the instance is busy: queued
        scheduler.submit(_request(stats, answers, "c"))
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
    async def scenario() -> _Started:
        stats, answers = ModelStats("m", "1"), []
        instance = _Started()
        instance.refuse = True
        scheduler = DirectScheduler([instance], "1")
        scheduler.submit(_request(stats, answers, "a"))
        assert len(scheduler._running) == 1
        await asyncio.wait_for(asyncio.gather(*scheduler._running), 5)
        assert scheduler._idle == [instance]
        return instance

    instance = asyncio.run(scenario())
    assert instance.started == []
    assert instance.awaited == [["a"]]


def test_a_start_that_raises_answers_its_requests_and_frees_the_instance() -> None:
    async def scenario() -> tuple[list[InferenceResponse], DirectScheduler, _Started]:
        stats, answers = ModelStats("m", "1"), []
        instance = _Started()
        instance.broken = True
        scheduler = DirectScheduler([instance], "1")
        scheduler.submit(_request(stats, answers, "a"))
        instance.broken = False
        scheduler.submit(_request(stats, answers, "b"))
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
        instance = _Started()
        scheduler = DirectScheduler([instance], "1")
        scheduler.submit(_request(stats, answers, "a"))
        scheduler.submit(_request(stats, answers, "b"))  # queued: failed by close

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
