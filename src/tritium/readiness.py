"""The server's readiness for watchers (gRPC ``Health.Watch``, frontends/grpc/health.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class Readiness:
    """The server's readiness for watchers (gRPC ``Health.Watch``): the server and the
    repository call ``changed`` wherever readiness may flip, and ``wait`` sleeps until it
    differs from what a watcher last saw, so a watcher costs nothing while it waits (no
    polling, no timer)."""

    def __init__(self, probe: Callable[[], bool]) -> None:
        self._probe = probe
        self._seen = False  # the server starts not ready
        self._flipped = asyncio.Event()  # a new one after each flip

    def changed(self) -> None:
        ready = self._probe()
        if ready != self._seen:
            self._seen = ready
            flipped, self._flipped = self._flipped, asyncio.Event()
            flipped.set()  # wakes every watcher waiting on this generation

    async def wait(self, seen: bool) -> bool:
        """The readiness once it is no longer ``seen``."""
        while (ready := self._probe()) == seen:
            await self._flipped.wait()
        return ready
