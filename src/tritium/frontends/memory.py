"""The server's one bound on the bytes its connections hold for their clients, all together
(issue 44, S3): ``--connection-memory-bytes``. One ``MemoryBudget`` per server process (the
listeners' ``Connections`` carries it; with ``--workers N`` each worker has its own).

What is charged, as it happens (integer adds on native fields, no scan):

- gRPC: request bytes received and not yet taken by a handler (``transport/grpc/call.py``
  counts them per call), response bytes waiting for the peer's flow-control window (each
  call's ``pending``), and the socket's buffer while the peer reads nothing (from
  ``pause_writing`` to ``resume_writing``);
- HTTP/1.1: the socket's buffer while the client reads nothing (the one answer written
  before writing paused: no other starts until it drains), and the bodies of pipelined
  requests waiting behind it.

Past the budget, a new gRPC call is refused RESOURCE_EXHAUSTED (Trailers-Only); then, or when
the calls already admitted hold a quarter more than the budget, the holders holding the most
are relieved first on the loop's next turn (``Holder.relieve``: a gRPC connection resets its
calls holding the most, an HTTP connection is closed) until the budget is back under seven
eighths of itself. So the process holds at most about 1.25 × the budget for its clients
(plus what one turn of the loop adds), clients that hold much cannot park the server in
refusals (the first call refused resets them), and a client that reads what it asks for
holds little: what waits for it drains as it reads.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Final

from ..logs.budget import LineBudget, left_out_text
from ..transport.host import Budget, Holder

log = logging.getLogger("tritium")

DEFAULT_BUDGET: Final = 1 << 30  # --connection-memory-bytes' default
_RELIEF_LINES = LineBudget()


class MemoryBudget(Budget):
    """Bytes held for clients by every connection of this process, and who holds them."""

    def __init__(self, limit: int = DEFAULT_BUDGET) -> None:
        self.limit = limit
        self.held = 0
        self.relieved = 0  # bytes dropped to keep the budget, since start
        self._holders: set[Holder] = set()
        self._relief: asyncio.Handle | None = None

    def join(self, holder: Holder) -> None:
        self._holders.add(holder)

    def leave(self, holder: Holder) -> None:
        self._holders.discard(holder)

    def charge(self, size: int) -> None:
        """``size`` bytes more (less, when negative) are held; a quarter past the limit the
        largest holders are relieved on the loop's next turn (not inside the caller's
        work)."""
        self.held += size
        if size > 0 and self.held > self.limit + (self.limit >> 2):
            self.relieve_soon()

    def over(self) -> bool:
        """Whether more than the limit is held: new calls are refused."""
        return self.held > self.limit

    def relieve_soon(self) -> None:
        """Relieve the largest holders on the loop's next turn (a new call was refused, or
        the calls admitted hold a quarter more than the limit)."""
        if self._relief is None:
            self._relief = asyncio.get_running_loop().call_soon(self.relieve)

    def relieve(self) -> None:
        """The holders holding the most give up what they hold until the budget is under
        seven eighths of its limit (so that new calls fit again)."""
        self._relief = None
        if self.held <= self.limit:
            return
        start, target = self.held, self.limit - self.limit // 8
        for holder in sorted(self._holders, key=_held, reverse=True):
            if self.held <= target:
                break
            holder.relieve(self.held - target)
        freed = start - self.held
        self.relieved += freed
        left_out = _RELIEF_LINES.admit(time.monotonic())
        if left_out is not None:
            log.warning("connections held %d bytes for their clients, more than "
                        "--connection-memory-bytes=%d: dropped %d bytes of the largest "
                        "holders%s", start, self.limit, freed, left_out_text(left_out))  # fmt: skip


def _held(holder: Holder) -> int:
    return holder.budget_held()
