"""Fakes for the schedulers' unit tests: a queued request whose answers land in a list, and
an instance that starts executions without a task (``backends/base.py:StartedInstance``'s
``start`` for the direct scheduler, ``BatchStartedInstance``'s ``start_batch`` for the
dynamic batcher), answering them when the test says."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from tritium.metrics.stats import ModelStats
from tritium.request import InferenceRequest, ResponseSender
from tritium.types import ClientRequest, InferenceResponse


def queued_request(
    stats: ModelStats, answers: list[InferenceResponse], rid: str
) -> InferenceRequest:
    """A queued request whose final response lands in ``answers``."""
    request = InferenceRequest(ClientRequest("m", 1, id=rid))

    def callback(response: InferenceResponse | None, final: bool) -> None:
        if response is not None:
            answers.append(response)

    ResponseSender(callback).bind(request, lambda r, error, last: None)
    request.queued(stats)
    return request


class StartedFake:
    """Starts what it is given, answering it when the test says; ``refuse``: a start returns
    False (the execution must wait); ``broken``: a start raises."""

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

    start_batch = start  # the dynamic batcher's name for it: one execution of the batch

    def finish_one(self) -> None:
        asyncio.get_running_loop().call_soon(self.pending.pop(0))

    async def execute(self, requests: list[InferenceRequest]) -> None:
        self.awaited.append([r.id for r in requests])

    async def execute_each(self, requests: list[InferenceRequest]) -> None:
        self.awaited.append([r.id for r in requests])
