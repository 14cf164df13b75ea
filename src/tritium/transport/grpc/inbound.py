"""The reading side of a gRPC connection in turns (``conn.reader``; the bounds are
``budgets.py``'s).

A read is handed to the HTTP/2 core a bounded number of frames at a time (``H2Server.receive``)
and a bounded number of request messages is cut out of DATA per turn (``ServerCall.feed``
stops at the connection's ``message_budget``); what is left — bytes not yet given to the core
(``_backlog``), calls with messages not yet cut (``_deferred``, in the order they stopped) —
waits for the next turn of the event loop (``loop.call_soon``) with reading paused, so other
connections get theirs in between. Messages that came first are cut first, and a call's
END_STREAM waits for its messages. Reading is also paused while the peer leaves too much of
what it made us write unread (``MAX_UNREAD_BYTES``), and resumed once the socket drains
(``release_reading``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from ..http2 import ErrorCode, H2ConnectionError
from ..http2.frames import Buffer
from .budgets import BUSY, BYTES_PER_TURN, FRAMES_PER_TURN, MESSAGES_PER_TURN, UNREAD
from .call import ServerCall
from .status import RpcError

if TYPE_CHECKING:
    from .connection import GrpcConnection

log = logging.getLogger("tritium")


class Reader:
    """What one connection reads, in turns of the event loop."""

    def __init__(self, conn: GrpcConnection) -> None:
        self._conn = conn
        self.backlog = bytearray()  # received bytes not yet given to the core
        self.deferred: dict[int, ServerCall] = {}  # calls with messages not yet cut
        self._ending: set[int] = set()  # of those, the ones whose END_STREAM came
        self.holds = 0  # budgets.py BUSY | UNREAD: reading is paused while any is set
        self._turn_soon = False  # a later turn is scheduled
        # what this turn of the loop may still do (several reads in one turn share it; the
        # request messages to cut are the connection's ``message_budget``: ServerCall.feed)
        self._frame_budget = FRAMES_PER_TURN
        self._byte_budget = BYTES_PER_TURN
        self._refill_soon = False

    # -- turns --------------------------------------------------------------------------------
    def read(self, data: bytes) -> None:
        """A read from the socket (``data_received``): handled now as far as this turn's
        budget goes, unless earlier work waits (then it waits behind it)."""
        if self.deferred or self.backlog or self._turn_soon or self.holds & UNREAD:
            self.backlog += data
            self.hold_reading(BUSY)
            return
        self._spend()
        used = self._turn(data)
        if used < len(data) and not self._conn.closed:
            self.backlog += memoryview(data)[used:]
        self.schedule()

    def _spend(self) -> None:
        """This turn uses the budget: it is whole again on the next turn of the loop."""
        if not self._refill_soon:
            self._refill_soon = True
            asyncio.get_running_loop().call_soon(self._refill)

    def _refill(self) -> None:
        self._refill_soon = False
        self._conn.message_budget = MESSAGES_PER_TURN
        self._frame_budget = FRAMES_PER_TURN
        self._byte_budget = BYTES_PER_TURN
        self._conn.writer.write_now()  # what the last turn made (_turn)

    def _turn(self, data: Buffer) -> int:
        """What is left of this turn's frames and bytes, from ``data``, to the HTTP/2 core,
        whose events reach the handlers as it reads; the bytes taken. What they make is
        written once, when the loop turns again (``_refill``): with what the other
        connections made in the same turn, so that a client woken by the first answer reads
        the others without sleeping again (bench/results/mypyc.md). A protocol error (or a
        flood) ends the connection."""
        conn = self._conn
        writer = conn.writer
        conn.ledger.refill(time.monotonic())
        writer.corked = True
        try:
            used, begun = conn.h2.receive(data, self._frame_budget, self._byte_budget)
        except H2ConnectionError as exc:
            writer.corked = False
            log.debug("gRPC connection %s: HTTP/2 protocol error: %s", conn.peer, exc)
            if exc.debug:  # a flood: the debug data says which
                self.end_flood(exc.debug)
            else:
                conn.close(exc.code)
            return len(data)
        except Exception as exc:  # a bug: this connection ends, the server goes on
            conn.notices.unexpected(f"gRPC connection {conn.peer}: unexpected error", exc)
            writer.corked = False
            conn.close(ErrorCode.INTERNAL_ERROR)
            return len(data)
        writer.corked = False
        self._frame_budget -= begun
        self._byte_budget -= used
        if not self._refill_soon:
            writer.write_now()
        return used

    def end_flood(self, why: bytes) -> None:
        """GOAWAY ENHANCE_YOUR_CALM ``why``; the flood is not read further (no lingering
        read: the socket closes after the linger, whatever the peer still sends). Logged at
        debug level only: a client reconnecting to flood would flood the log too."""
        log.debug("gRPC connection %s: %s, closing", self._conn.peer, why.decode())
        self._conn.close(ErrorCode.ENHANCE_YOUR_CALM, why)
        self.hold_reading(BUSY)

    def schedule(self) -> None:
        """A later turn for what is left, unless the peer leaves our answers unread (then
        ``resume_writing`` calls this again)."""
        if self._conn.closed:
            return
        if not (self.deferred or self.backlog):
            self.release_reading(BUSY)
            return
        self.hold_reading(BUSY)
        if not self._turn_soon and not self.holds & UNREAD:
            self._turn_soon = True
            asyncio.get_running_loop().call_soon(self._next_turn)

    def _next_turn(self) -> None:
        """A later turn (``_refill``, scheduled before it, made the budget whole)."""
        self._turn_soon = False
        conn = self._conn
        if conn.closed or self.holds & UNREAD:
            return
        self._spend()
        if self.deferred:
            writer = conn.writer
            writer.corked = True
            try:
                self._resume_calls()
            except Exception as exc:  # a bug: this connection ends, the server goes on
                conn.notices.unexpected(f"gRPC connection {conn.peer}: unexpected error", exc)
                writer.corked = False
                conn.close(ErrorCode.INTERNAL_ERROR)
                return
            writer.corked = False
            writer.write_now()
        if self.backlog and not self.deferred and not conn.closed:
            with memoryview(self.backlog) as view:
                used = self._turn(view)
            del self.backlog[:used]
        self.schedule()

    # -- messages left for a later turn --------------------------------------------------------
    def defer(self, call: ServerCall) -> None:
        """``call`` stopped cutting messages for this turn's budget."""
        self.deferred[call.stream_id] = call

    def deferred_end(self, call: ServerCall) -> bool:
        """True when ``call``'s END_STREAM must wait for its messages not yet cut."""
        if call.stream_id not in self.deferred:
            return False
        self._ending.add(call.stream_id)
        return True

    def _resume_calls(self) -> None:
        conn = self._conn
        for sid, call in list(self.deferred.items()):
            if conn.message_budget <= 0 or conn.closed:
                return
            if call.done or conn.calls.get(sid) is not call:
                self.forget(sid)
                continue
            try:
                more = call.feed(b"", 0)
            except RpcError as exc:
                self.forget(sid)
                conn.writer.finish_call(call, exc.code, exc.message)
                call.cancelled()
                continue
            if not more:
                ended = sid in self._ending
                self.forget(sid)
                if ended:
                    conn.ended_input(call)

    def forget(self, sid: int) -> None:
        self.deferred.pop(sid, None)
        self._ending.discard(sid)

    # -- pausing reading -----------------------------------------------------------------------
    def hold_reading(self, reason: int) -> None:
        transport = self._conn.transport
        if not self.holds and transport is not None and not transport.is_closing():
            transport.pause_reading()
        self.holds |= reason

    def release_reading(self, reason: int) -> None:
        if not self.holds & reason:
            return
        self.holds &= ~reason
        transport = self._conn.transport
        if not self.holds and transport is not None and not transport.is_closing():
            transport.resume_reading()

    def stop(self) -> None:
        """The connection ends: nothing more is read into the core; reading resumes (a lingering
        close reads and drops what the peer still sends)."""
        self.backlog = bytearray()  # not clear(): a turn may hold a view of it
        self.deferred.clear()
        self._ending.clear()
        holds, self.holds = self.holds, 0
        transport = self._conn.transport
        if holds and transport is not None and not transport.is_closing():
            transport.resume_reading()
