"""An instance that runs its framework on a thread of its own (ONNX Runtime, PyTorch): the
event loop hands it a batch and is called back with the answers, so the loop never blocks on
a model. A model measured cheap enough runs on the loop instead (``cheap`` / ``run_now``):
``inline_policy.py`` weighs the costs of both paths measured on the running machine, and its
``ModelExecution`` (one per model, shared by the instances) keeps a model whose cost depends
on input values, or one whose run on the loop passed the hard bound, on the threads.

Subclasses implement ``_run`` (one execution: a response per request) and name their
framework in ``failure`` (the prefix of an execution error, Triton's wording per backend).
Nothing here imports a framework.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import sys
import threading
import time
from typing import Any, ClassVar, Final

from mypy_extensions import mypyc_attr

from ..errors import ServerError, internal
from ..request import InferenceRequest
from ..types import InferenceResponse
from .base import send_error
from .inline_policy import SHARE_EVERY, InlinePolicy, ModelExecution, switch_interval

log = logging.getLogger("tritium")

# Executions on inputs of at most this size may run on the event loop, when the costs measured
# on this machine say that is cheaper than a hand-off to the instance thread (inline_policy.py);
# bigger ones always go to the thread.
INLINE_MAX_BYTES = 64 * 1024

_NO_TIMING: Final = (0, 0, 0)
# What one execution gives: a response per request, or the error that fails them all.
Outcome = list[InferenceResponse] | ServerError
# A hand-off: executions run one after the other on the thread, answered in one callback with
# their outcomes, the seconds spent in the framework's compute and in the runs altogether.
_Done = tuple[list[Outcome], float, float]
# What the loop hands an instance thread: where to answer, and the executions to run.
_Work = tuple[asyncio.AbstractEventLoop, asyncio.Future[_Done], list[list[InferenceRequest]]]


@mypyc_attr(allow_interpreted_subclasses=True)  # PyTorch's and OpenVINO's instances
class ThreadedInstance:
    """One framework session with its own thread; the event loop hands it work."""

    # Class attributes that subclasses set (ClassVar: docs/compiled-code.md).
    failure: ClassVar[str] = "execute failure"  # the prefix of an execution error
    # Whether a ServerError raised by ``_run`` (the backend's own checks) reaches the client
    # with its own kind and text; otherwise every exception is INTERNAL with ``failure``.
    own_errors: ClassVar[bool] = False

    def __init__(
        self, name: str, version: int, thread_prefix: str, execution: ModelExecution
    ) -> None:
        self.name = name
        self._version = str(version)
        # Hand-offs wait for the GIL at both ends: keep those waits short (inline_policy.py).
        sys.setswitchinterval(switch_interval())
        self._execution = execution  # the model's: whether it may run on the loop at all
        self._policy = InlinePolicy(execution.mode)  # inline or thread, from costs measured here
        self._settled = self._policy.settled()
        self._inline_runs = 0
        self._work: queue.SimpleQueue[_Work | None] = queue.SimpleQueue()
        # (Not ``_thread``: a C keyword, docs/compiled-code.md.)
        self._runner = threading.Thread(
            target=self._serve, name=f"{thread_prefix}-{name}", daemon=True
        )
        self._runner.start()

    def _run(self, requests: list[InferenceRequest]) -> list[InferenceResponse]:
        raise NotImplementedError

    def _serve(self) -> None:
        """The instance thread: run each hand-off's executions, answer them in one callback."""
        while (item := self._work.get()) is not None:
            loop, future, batches = item
            loop.call_soon_threadsafe(_resolve, future, self._run_all(batches))

    def _run_all(self, batches: list[list[InferenceRequest]]) -> _Done:
        """Each execution of a hand-off; ``_run`` sets ``request.timing`` (its second part:
        the framework's compute)."""
        started = time.perf_counter()
        outcomes, compute_ns = [], 0
        for requests in batches:
            outcomes.append(self._run_or_error(requests))
            compute_ns += (requests[0].timing or _NO_TIMING)[1]
        return outcomes, compute_ns / 1e9, time.perf_counter() - started

    def cheap(self, requests: list[InferenceRequest], runs: int = 1) -> bool:
        """Whether to run on the loop: the inputs are small and the measured cost of ``runs``
        executions here is below that of a hand-off to the thread (inline_policy.py), and
        the model may run on the loop at all (``ModelExecution``)."""
        if self._execution.threads_only or not self._policy.prefers_inline(runs):
            return False
        size = 0
        for request in requests:
            for tensor in request.inputs:
                size += tensor.data.nbytes
        return size <= INLINE_MAX_BYTES

    def run_now(self, request: InferenceRequest) -> None:
        """Run and answer ``request`` right here (the scheduler checked ``cheap``): no task,
        no thread hand-off."""
        self._answer([request], self._run_inline([request]))

    def _run_inline(self, requests: list[InferenceRequest]) -> Outcome:
        """One execution on the loop, timed; every ``SHARE_EVERY``-th (and each while the
        model is suspect of a dear run) also in the loop thread's CPU time (the share of a
        core it gets, and the hard bound: inline_policy.py)."""
        self._inline_runs += 1
        timed_cpu = self._inline_runs % SHARE_EVERY == 0 or self._execution.suspect > 0
        cpu = time.thread_time() if timed_cpu else 0.0
        started = time.perf_counter()
        outcome = self._run_or_error(requests)
        wall = time.perf_counter() - started
        spent = time.thread_time() - cpu if timed_cpu else None
        self._execution.bounded(wall, spent)
        if not isinstance(outcome, ServerError):
            self._policy.record_inline(wall, spent)
            self._note_change()
        return outcome

    def _note_change(self) -> None:
        """A debug line when the measured costs change the preferred path."""
        if (now := self._policy.settled()) != self._settled:
            self._settled = now
            inline, handoff = self._policy.inline_cost or 0.0, self._policy.handoff_cost or 0.0
            log.debug(
                "instance %s now runs %s (run on the loop %.1f µs, hand-off %.1f µs, "
                "loop's share of a core %.2f)",
                self.name, now, inline * 1e6, handoff * 1e6, self._policy.share,
            )  # fmt: skip

    def _run_or_error(self, requests: list[InferenceRequest]) -> Outcome:
        try:
            return self._run(requests)
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

    async def _hand_off(self, batches: list[list[InferenceRequest]]) -> None:
        """One trip to the thread for ``batches`` (each one execution), timed as the loop
        sees it, with the loop thread's CPU meanwhile (its work on other requests: the
        overlap, inline_policy.py)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[_Done] = loop.create_future()
        cpu, started = time.thread_time(), time.perf_counter()
        self._work.put((loop, future, batches))
        outcomes, compute, busy = await future
        roundtrip, overlap = time.perf_counter() - started, time.thread_time() - cpu
        self._policy.record_handoff(len(batches), roundtrip, compute, busy, overlap)
        self._note_change()
        for requests, outcome in zip(batches, outcomes, strict=True):
            self._answer(requests, outcome)

    async def execute(self, requests: list[InferenceRequest]) -> None:
        """One execution over ``requests`` (a dynamic batch, or a single request)."""
        if self.cheap(requests):
            self._answer(requests, self._run_inline(requests))
        else:
            await self._hand_off([requests])

    async def execute_each(self, requests: list[InferenceRequest]) -> None:
        """One execution per request; on the thread, all of them in one hand-off."""
        if self.cheap(requests, len(requests)):
            for request in requests:
                self._answer([request], self._run_inline([request]))
        else:
            await self._hand_off([[request] for request in requests])

    async def is_ready(self) -> bool:
        return self._runner.is_alive()

    async def close(self) -> None:
        self._work.put(None)
        await asyncio.to_thread(self._runner.join)


def union(groups: Any) -> list[str]:
    """The names of several lists, each once, in first-seen order."""
    names: dict[str, None] = {}
    for group in groups:
        names.update(dict.fromkeys(group))
    return list(names)


def _resolve(future: asyncio.Future[_Done], done: _Done) -> None:
    if not future.done():
        future.set_result(done)
