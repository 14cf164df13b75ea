"""The reading side of a gRPC connection in turns (the bounds are ``budgets.py``'s).

A read is handed to the HTTP/2 core a bounded number of frames at a time (``H2Server.receive``)
and a bounded number of request messages is cut out of DATA per turn (``ServerCall.feed``
stops at ``message_budget``); what is left — bytes not yet given to the core (``_backlog``), calls
with messages not yet cut (``_deferred``, in the order they stopped) — waits for the next turn
of the event loop (``loop.call_soon``) with reading paused, so other connections get theirs in
between. Messages that came first are cut first, and a call's END_STREAM waits for its
messages. Reading is also paused while the peer leaves too much of what it made us write
unread (``MAX_UNREAD_BYTES``), and resumed once the socket drains (``_release_reading``).
"""

from __future__ import annotations

import asyncio
import logging
import time

from ..http2 import ErrorCode, H2ConnectionError
from ..http2.frames import Buffer
from .budgets import BUSY, BYTES_PER_TURN, FRAMES_PER_TURN, MESSAGES_PER_TURN, UNREAD
from .call import ServerCall
from .outbound import Outbound
from .status import RpcError

log = logging.getLogger("tritium")


class Inbound(Outbound):
    """The third of ``GrpcConnection``'s bases (its state is declared in ``Bounds``)."""

    def _init_inbound(self) -> None:
        self._backlog = bytearray()  # received bytes not yet given to the core
        self._deferred: dict[int, ServerCall] = {}  # calls with messages not yet cut
        self._ending: set[int] = set()  # of those, the ones whose END_STREAM came
        self._holds = 0  # budgets.py BUSY | UNREAD: reading is paused while any is set
        self._turn_soon = False  # a later turn is scheduled
        self._unread = 0  # bytes written while the peer did not read
        # what this turn of the loop may still do (several reads in one turn share it)
        self.message_budget = MESSAGES_PER_TURN  # request messages to cut (ServerCall.feed)
        self._frame_budget = FRAMES_PER_TURN
        self._byte_budget = BYTES_PER_TURN
        self._refill_soon = False

    def _ended_input(self, call: ServerCall) -> None:
        raise NotImplementedError  # GrpcConnection's

    # -- turns --------------------------------------------------------------------------------
    def _read(self, data: bytes) -> None:
        """A read from the socket (``data_received``): handled now as far as this turn's
        budget goes, unless earlier work waits (then it waits behind it)."""
        if self._deferred or self._backlog or self._turn_soon or self._holds & UNREAD:
            self._backlog += data
            self._hold_reading(BUSY)
            return
        self._spend()
        used = self._turn(data)
        if used < len(data) and not self._closed:
            self._backlog += memoryview(data)[used:]
        self._schedule()

    def _spend(self) -> None:
        """This turn uses the budget: it is whole again on the next turn of the loop."""
        if not self._refill_soon:
            self._refill_soon = True
            asyncio.get_running_loop().call_soon(self._refill)

    def _refill(self) -> None:
        self._refill_soon = False
        self.message_budget = MESSAGES_PER_TURN
        self._frame_budget = FRAMES_PER_TURN
        self._byte_budget = BYTES_PER_TURN
        self._write_now()  # what the last turn made (_turn)

    def _turn(self, data: Buffer) -> int:
        """What is left of this turn's frames and bytes, from ``data``, to the HTTP/2 core,
        whose events reach the handlers as it reads; the bytes taken. What they make is
        written once, when the loop turns again (``_refill``): with what the other
        connections made in the same turn, so that a client woken by the first answer reads
        the others without sleeping again (bench/results/mypyc.md). A protocol error (or a
        flood) ends the connection."""
        self._ledger.refill(time.monotonic())
        self._corked = True
        try:
            used, begun = self._h2.receive(data, self._frame_budget, self._byte_budget)
        except H2ConnectionError as exc:
            self._corked = False
            log.debug("gRPC connection %s: HTTP/2 protocol error: %s", self.peer, exc)
            if exc.debug:  # a flood: the debug data says which
                self.end_flood(exc.debug)
            else:
                self._close(exc.code)
            return len(data)
        except Exception as exc:  # a bug: this connection ends, the server goes on
            self._notices.unexpected(f"gRPC connection {self.peer}: unexpected error", exc)
            self._corked = False
            self._close(ErrorCode.INTERNAL_ERROR)
            return len(data)
        self._corked = False
        self._frame_budget -= begun
        self._byte_budget -= used
        if not self._refill_soon:
            self._write_now()
        return used

    def end_flood(self, why: bytes) -> None:
        """GOAWAY ENHANCE_YOUR_CALM ``why``; the flood is not read further (no lingering
        read: the socket closes after the linger, whatever the peer still sends). Logged at
        debug level only: a client reconnecting to flood would flood the log too."""
        log.debug("gRPC connection %s: %s, closing", self.peer, why.decode())  # not per flood
        self._close(ErrorCode.ENHANCE_YOUR_CALM, why)
        self._hold_reading(BUSY)

    def _schedule(self) -> None:
        """A later turn for what is left, unless the peer leaves our answers unread (then
        ``resume_writing`` calls this again)."""
        if self._closed:
            return
        if not (self._deferred or self._backlog):
            self._release_reading(BUSY)
            return
        self._hold_reading(BUSY)
        if not self._turn_soon and not self._holds & UNREAD:
            self._turn_soon = True
            asyncio.get_running_loop().call_soon(self._next_turn)

    def _next_turn(self) -> None:
        """A later turn (``_refill``, scheduled before it, made the budget whole)."""
        self._turn_soon = False
        if self._closed or self._holds & UNREAD:
            return
        self._spend()
        if self._deferred:
            self._corked = True
            try:
                self._resume_calls()
            except Exception as exc:  # a bug: this connection ends, the server goes on
                self._notices.unexpected(f"gRPC connection {self.peer}: unexpected error", exc)
                self._corked = False
                self._close(ErrorCode.INTERNAL_ERROR)
                return
            self._corked = False
            self._write_now()
        if self._backlog and not self._deferred and not self._closed:
            with memoryview(self._backlog) as view:
                used = self._turn(view)
            del self._backlog[:used]
        self._schedule()

    # -- messages left for a later turn --------------------------------------------------------
    def defer(self, call: ServerCall) -> None:
        """``call`` stopped cutting messages for this turn's budget."""
        self._deferred[call.stream_id] = call

    def deferred_end(self, call: ServerCall) -> bool:
        """True when ``call``'s END_STREAM must wait for its messages not yet cut."""
        if call.stream_id not in self._deferred:
            return False
        self._ending.add(call.stream_id)
        return True

    def _resume_calls(self) -> None:
        for sid, call in list(self._deferred.items()):
            if self.message_budget <= 0 or self._closed:
                return
            if call.done or self.calls.get(sid) is not call:
                self._forget(sid)
                continue
            try:
                more = call.feed(b"", 0)
            except RpcError as exc:
                self._forget(sid)
                self.finish_call(call, exc.code, exc.message)
                call.cancelled()
                continue
            if not more:
                ended = sid in self._ending
                self._forget(sid)
                if ended:
                    self._ended_input(call)

    def _forget(self, sid: int) -> None:
        self._deferred.pop(sid, None)
        self._ending.discard(sid)

    # -- pausing reading -----------------------------------------------------------------------
    def _hold_reading(self, reason: int) -> None:
        transport = self._transport
        if not self._holds and transport is not None and not transport.is_closing():
            transport.pause_reading()
        self._holds |= reason

    def _release_reading(self, reason: int) -> None:
        if not self._holds & reason:
            return
        self._holds &= ~reason
        transport = self._transport
        if not self._holds and transport is not None and not transport.is_closing():
            transport.resume_reading()

    def _stop_turns(self) -> None:
        """The connection ends: nothing more is read into the core; reading resumes (a lingering
        close reads and drops what the peer still sends)."""
        self._backlog = bytearray()  # not clear(): a turn may hold a view of it
        self._deferred.clear()
        self._ending.clear()
        holds, self._holds = self._holds, 0
        transport = self._transport
        if holds and transport is not None and not transport.is_closing():
            transport.resume_reading()
