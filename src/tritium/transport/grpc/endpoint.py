"""What every connection of one gRPC listener shares: its settings, the dispatcher of its
method table, the server's pool of connections and memory budget, and the live connections,
which ``drain`` and ``close`` stop gracefully (GOAWAY to every one, in-flight calls complete,
then close). The front-end builds one per listener (``frontends/grpc/listener.py``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..host import Budget, Notices, Pace, Pool
from .dispatch import Dispatcher
from .settings import Settings

if TYPE_CHECKING:
    from .connection import GrpcConnection


class GrpcEndpoint:
    """``pace``: a new connection's ``Pace`` (the loop's spin for its client)."""

    def __init__(  # noqa: PLR0913  # the records and seams a connection is given
        self,
        settings: Settings,
        dispatch: Dispatcher,
        pool: Pool,
        budget: Budget,
        notices: Notices,
        pace: Callable[[], Pace],
    ) -> None:
        self.settings = settings
        self.dispatch = dispatch
        self.pool = pool
        self.budget = budget
        self.notices = notices
        self.pace = pace
        self.connections: set[GrpcConnection] = set()
        self._idle: asyncio.Event | None = None

    def connection_closed(self) -> None:
        if self._idle is not None and not self.connections:
            self._idle.set()

    def drain(self) -> None:
        """GOAWAY to every client: calls in flight go on."""
        for conn in list(self.connections):
            conn.drain(None)

    async def close(self, grace: float) -> None:
        """After ``drain``: wait up to ``grace`` seconds for the calls, then close the rest."""
        self.drain()
        if self.connections:
            self._idle = asyncio.Event()
            try:
                await asyncio.wait_for(self._idle.wait(), grace)
            except TimeoutError:
                pass
        for conn in list(self.connections):
            conn.abort()
