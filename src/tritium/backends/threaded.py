"""An instance that runs its framework on a thread of its own (ONNX Runtime, PyTorch): the
event loop hands it a batch and is called back with the answers, so the loop never blocks on
a model. A model measured cheap enough runs on the loop instead (``cheap`` / ``run_now``).

Subclasses implement ``_run`` (one execution: a response per request) and name their
framework in ``failure`` (the prefix of an execution error, Triton's wording per backend).
Nothing here imports a framework.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from typing import Any

from ..errors import ServerError, internal
from ..request import InferenceRequest
from ..types import InferenceResponse
from .base import send_error

# A model whose executions take less than this (moving average) on inputs of at most this
# size runs on the event loop: handing it to the instance thread would cost more (measured
# here: ~40-60 µs of GIL hand-over and wake-ups against ~10 µs for `simple`). Anything
# bigger, or any model that turns out slower, runs on the instance's own thread.
INLINE_MAX_SECONDS = 100e-6
INLINE_MAX_BYTES = 64 * 1024

# What one execution gives: a response per request, or the error that fails them all.
Outcome = list[InferenceResponse] | ServerError
# What the loop hands an instance thread: where to answer, and the batch to run.
_Work = tuple[asyncio.AbstractEventLoop, asyncio.Future[Outcome], list[InferenceRequest]]


class ThreadedInstance:
    """One framework session with its own thread; the event loop hands it work."""

    failure = "execute failure"  # the prefix of an execution error
    # Whether a ServerError raised by ``_run`` (the backend's own checks) reaches the client
    # with its own kind and text; otherwise every exception is INTERNAL with ``failure``.
    own_errors = False

    def __init__(self, name: str, version: int, thread_prefix: str) -> None:
        self.name = name
        self._version = str(version)
        self._cost = 1.0  # seconds; unknown until measured, so the first runs use the thread
        self._work: queue.SimpleQueue[_Work | None] = queue.SimpleQueue()
        self._thread = threading.Thread(
            target=self._serve, name=f"{thread_prefix}-{name}", daemon=True
        )
        self._thread.start()

    def _run(self, requests: list[InferenceRequest]) -> list[InferenceResponse]:
        raise NotImplementedError

    def _serve(self) -> None:
        """The instance thread: run each batch, hand the answers back to the loop."""
        while (item := self._work.get()) is not None:
            loop, future, requests = item
            loop.call_soon_threadsafe(_resolve, future, self._run_or_error(requests))

    def _run_timed(self, requests: list[InferenceRequest]) -> list[InferenceResponse]:
        started = time.perf_counter()
        responses = self._run(requests)
        elapsed = time.perf_counter() - started
        # Moving average of one execution; the first measurement replaces the guess.
        self._cost = elapsed if self._cost >= 1.0 else 0.8 * self._cost + 0.2 * elapsed
        return responses

    def cheap(self, requests: list[InferenceRequest]) -> bool:
        """Whether to run on the loop: the measured cost is below what a thread hand-off
        costs (GIL hand-over, two wake-ups), and the inputs are small."""
        if self._cost > INLINE_MAX_SECONDS:
            return False
        size = 0
        for request in requests:
            for tensor in request.inputs:
                size += tensor.data.nbytes
        return size <= INLINE_MAX_BYTES

    def run_now(self, request: InferenceRequest) -> None:
        """Run and answer ``request`` right here (the scheduler checked ``cheap``): no task,
        no thread hand-off."""
        self._answer([request], self._run_or_error([request]))

    def _run_or_error(self, requests: list[InferenceRequest]) -> Outcome:
        try:
            return self._run_timed(requests)
        except ServerError as exc:
            return exc if self.own_errors else internal(f"{self.failure}: {exc}")
        except Exception as exc:  # frameworks raise their own exception types
            return internal(f"{self.failure}: {exc}")

    def _answer(self, requests: list[InferenceRequest], outcome: Outcome) -> None:
        for i, request in enumerate(requests):
            if isinstance(outcome, list):
                assert request.sender is not None
                request.sender.send(outcome[i], True)
            else:
                send_error(request, self._version, outcome)

    async def execute(self, requests: list[InferenceRequest]) -> None:
        """One execution over ``requests`` (a dynamic batch, or a single request)."""
        if self.cheap(requests):
            self._answer(requests, self._run_or_error(requests))
            return
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Outcome] = loop.create_future()
        self._work.put((loop, future, requests))
        self._answer(requests, await future)

    async def execute_each(self, requests: list[InferenceRequest]) -> None:
        for request in requests:
            await self.execute([request])

    async def is_ready(self) -> bool:
        return self._thread.is_alive()

    async def close(self) -> None:
        self._work.put(None)
        await asyncio.to_thread(self._thread.join)


def union(groups: Any) -> list[str]:
    """The names of several lists, each once, in first-seen order."""
    names: dict[str, None] = {}
    for group in groups:
        names.update(dict.fromkeys(group))
    return list(names)


def _resolve(future: asyncio.Future[Outcome], outcome: Outcome) -> None:
    if not future.done():
        future.set_result(outcome)
