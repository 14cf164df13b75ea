"""Triton's default scheduler: no batching, one request at a time per instance.

Requests go straight to an idle instance; when every instance is busy they wait in a FIFO and
the next instance to finish takes the oldest. No task or queue hop when an instance is idle.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Sequence

from ..backends.base import ModelInstance, send_error
from ..errors import internal
from ..types import InferenceRequest


class DirectScheduler:
    def __init__(self, instances: Sequence[ModelInstance], version: str) -> None:
        self._idle: list[ModelInstance] = list(instances)
        self._waiting: deque[InferenceRequest] = deque()
        self._version = version
        self._running: set[asyncio.Task[None]] = set()

    def submit(self, request: InferenceRequest) -> None:
        if self._idle:
            self._start(self._idle.pop(), request)
        else:
            self._waiting.append(request)

    def _start(self, instance: ModelInstance, request: InferenceRequest) -> None:
        task = asyncio.ensure_future(self._run(instance, request))
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    async def _run(self, instance: ModelInstance, request: InferenceRequest) -> None:
        while True:
            try:
                await instance.execute([request])
            except asyncio.CancelledError:
                send_error(request, self._version, internal("the request was cancelled"))
                raise
            except Exception as exc:  # a backend bug must not strand the caller
                send_error(request, self._version, internal(f"{type(exc).__name__}: {exc}"))
            if not self._waiting:
                self._idle.append(instance)
                return
            request = self._waiting.popleft()

    async def close(self) -> None:
        """Fail what still waits, then let running executions finish."""
        while self._waiting:
            send_error(self._waiting.popleft(), self._version, internal("model is being unloaded"))
        if self._running:
            await asyncio.gather(*self._running, return_exceptions=True)
