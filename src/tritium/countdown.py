"""Triton's exit timeout: one budget of ``--exit-timeout-secs`` that the phases of a shutdown
spend in turn (the HTTP connections, the gRPC ones, the in-flight inferences, the unload), each
logging Triton's ``Timeout N: Found ...`` line once a second while it waits (Triton's
``HTTPServer::Stop``, ``grpc::Server::GracefulStop`` and ``InferenceServer::Stop``)."""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable

log = logging.getLogger("tritium")

_POLL_S = 0.05  # how soon a phase notices that what it waits for is done


class ExitCountdown:
    """The seconds left of the exit timeout, from the signal on."""

    def __init__(self, seconds: float) -> None:
        self._deadline = asyncio.get_running_loop().time() + max(seconds, 0.0)

    def left(self) -> int:
        """Whole seconds left, as Triton counts them down in its log lines."""
        return max(math.ceil(self._deadline - asyncio.get_running_loop().time()), 0)

    def remaining(self) -> float:
        return max(self._deadline - asyncio.get_running_loop().time(), 0.0)

    async def wait(
        self,
        pending: Callable[[], int],
        line: Callable[[int, int], str],
        always: bool = False,
    ) -> bool:
        """Wait until ``pending()`` is 0 (True) or the timeout runs out (False), logging
        ``line(seconds left, pending)`` once a second: while something is pending (the
        front-ends' loops), or from the first check to the last (``always``: the core's
        loops, which Triton runs once a second until they find nothing)."""
        loop = asyncio.get_running_loop()
        next_line = loop.time()
        while True:
            count = pending()
            due = loop.time() >= next_line or not count  # the last check is logged
            if due and (always or count):
                log.info("%s", line(self.left(), count))
                next_line = loop.time() + 1.0
            if not count:
                return True
            if not self.left():
                return False
            await asyncio.sleep(_POLL_S)
