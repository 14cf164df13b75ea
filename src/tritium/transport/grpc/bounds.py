"""What one gRPC connection may hold, and for how long, whatever its client does (issue 22,
findings 3 and 4). A part ``GrpcConnection`` owns (``conn.bounds``); the limits are its
``Settings``, which the front-end builds from tritium's flags (named below).

- **Preface** (``--grpc-preface-timeout-secs``): from accept, the TLS handshake and the
  client's HTTP/2 preface (the magic and its first SETTINGS) must be done in time, else the
  connection is closed. A silent socket costs a descriptor for that long at most.
- **Idle** (``--grpc-idle-timeout-secs``): a connection with no open stream for that long gets
  GOAWAY(NO_ERROR) and is closed (grpc's MAX_CONNECTION_IDLE; pings do not count as
  activity). Idle connections, and those still before their preface, are also the ones the
  listeners may shed when the process runs out of descriptors (``frontends/accept.py``).
- **Input** (``--grpc-connection-input-bytes``): the bytes of request messages received and
  not yet taken by a handler (messages still arriving, and whole ones waiting), over all the
  connection's calls. Past the bound, the newest calls holding some end RESOURCE_EXHAUSTED
  until it holds again; the oldest is never cut, so one message of the largest size allowed
  always gets through, whatever the bound.
- **Output** (``--grpc-connection-output-bytes``): the response bytes waiting for the peer's
  flow-control windows (or its TCP window) over all calls. While at the bound, a new call
  is refused (RESOURCE_EXHAUSTED, Trailers-Only); a response that would have to wait on top
  ends its call: RESOURCE_EXHAUSTED when none of its bytes is waiting yet, else RST_STREAM
  ENHANCE_YOUR_CALM (which gRPC clients read as RESOURCE_EXHAUSTED).
- **Server-wide** (``--connection-memory-bytes``, ``frontends/memory.py``): the connection
  charges the process's one ``Budget`` (``transport/host.py``) with its request bytes held,
  its response bytes waiting and, while the peer reads nothing, its socket's buffer. Past
  the budget a new call is refused (RESOURCE_EXHAUSTED, Trailers-Only); the budget then
  relieves the connections holding the most, which reset their calls holding the most
  (``relieve``).
- **Stall** (``--grpc-stall-timeout-secs``): a call whose client sends nothing of a message it
  started while it has window to send it (or of the one message and END_STREAM a unary
  call waits for), or reads nothing of a response waiting for its window, for that long is
  reset: DEADLINE_EXCEEDED for a request not received, RST_STREAM CANCEL for a response not
  read. Flow control holding a client back is the server's wait, not a stall. One timer per
  connection, armed while a call may wait on its client.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from ..host import Budget, Notices, Pool
from ..http2 import ErrorCode
from .call import ServerCall
from .status import StatusCode

if TYPE_CHECKING:
    from .connection import GrpcConnection
    from .endpoint import GrpcEndpoint

log = logging.getLogger("tritium")
# The shortest wait between two stall checks of a connection.
STALL_CHECK_MIN_DELAY = 0.01
# The kinds of ``Notices`` lines: each is an event an unauthenticated client can repeat at
# will, a few lines a minute each.
PREFACE_LINE, BOUND_LINE, STALL_LINE = "preface", "bound", "stall"


class Bounds:
    """One connection's bounds: its timers (preface, idle, stall), the request bytes its calls
    hold, the response bytes waiting for its peer, its charge on the server's budget."""

    def __init__(self, conn: GrpcConnection, endpoint: GrpcEndpoint) -> None:
        self._conn = conn
        self._limits = endpoint.settings
        self._pool: Pool = endpoint.pool
        self._notices: Notices = endpoint.notices
        self._budget: Budget = endpoint.budget  # the process's, shared by every connection
        self._born = self._idle_at = time.monotonic()
        self._prefaced = False
        self._preface_timer: asyncio.TimerHandle | None = None
        self._idle_timer: asyncio.TimerHandle | None = None
        self._stall_timer: asyncio.TimerHandle | None = None
        # bytes of request messages not yet taken, all calls (call.py keeps it)
        self.input_held = 0
        self.budget_charged = 0  # what this connection has charged the budget
        self._buffer_charge = 0  # of that, the socket's buffer when writing paused
        self._settled = False  # the connection is gone: its charge is given back

    def start(self) -> None:
        """The connection is open (after any TLS handshake): its preface clock runs from
        accept."""
        delay = max(0.0, self._born + self._limits.preface_timeout - time.monotonic())
        self._preface_timer = asyncio.get_running_loop().call_later(delay, self._no_preface)
        self._pool.add(self._conn)
        self._budget.join(self._conn)

    def stop(self) -> None:
        for timer in (self._preface_timer, self._idle_timer, self._stall_timer):
            if timer is not None:
                timer.cancel()
        self._preface_timer = self._idle_timer = self._stall_timer = None
        self._pool.discard(self._conn)
        self._settle()

    # -- preface, idle -----------------------------------------------------------------------
    def preface_done(self) -> None:
        """The client's first SETTINGS arrived: the preface is complete."""
        if not self._prefaced:
            self._prefaced = True
            if self._preface_timer is not None:
                self._preface_timer.cancel()
                self._preface_timer = None
            self.went_idle()

    def _no_preface(self) -> None:
        self._preface_timer = None
        conn = self._conn
        if not self._prefaced and not conn.closed:
            left_out = self._notices.admit(PREFACE_LINE, time.monotonic())
            if left_out is not None:
                log.info("gRPC connection %s: no HTTP/2 preface in time, closing%s",
                         conn.peer, left_out)  # fmt: skip
            conn.hang_up(b"preface timeout")

    def idle_since(self) -> float | None:
        """When this connection last had no open stream (accept, before its preface); None
        while a call is open (frontends/accept.py)."""
        if self._conn.closed or self._conn.calls:
            return None
        return self._idle_at

    def went_idle(self) -> None:
        """No call is open (any more): the idle clock runs from now."""
        self._idle_at = time.monotonic()
        if self._idle_timer is None and self._prefaced:
            self._idle_timer = asyncio.get_running_loop().call_later(
                self._limits.idle_timeout, self._idle_check
            )

    def _idle_check(self) -> None:
        self._idle_timer = None
        conn = self._conn
        if conn.closed or conn.draining or conn.calls:
            return  # armed again when the connection is next idle
        left = self._idle_at + self._limits.idle_timeout - time.monotonic()
        if left > 0:
            self._idle_timer = asyncio.get_running_loop().call_later(left, self._idle_check)
            return
        log.debug("gRPC connection %s: idle, closing", conn.peer)
        conn.close(ErrorCode.NO_ERROR, b"max_idle")  # no call: one GOAWAY, then close

    # -- the server's memory budget ---------------------------------------------------------
    def charge(self, size: int) -> None:
        """``size`` bytes more (or fewer) held for this client, on the server's budget."""
        if not self._settled:
            self.budget_charged += size
            self._budget.charge(size)

    def hold_input(self, size: int) -> None:
        """A call holds ``size`` request bytes more (or fewer): call.py's count."""
        self.input_held += size
        self.charge(size)

    def writing_paused(self, size: int) -> None:
        """The peer reads nothing: the ``size`` bytes its socket's buffer holds are on the
        budget until it drains."""
        self._buffer_charge += size
        self.charge(size)

    def writing_resumed(self) -> None:
        self.charge(-self._buffer_charge)
        self._buffer_charge = 0

    def over_budget(self) -> bool:
        return self._budget.over()

    def _settle(self) -> None:
        """The connection is gone: give back all it charged; it charges nothing more."""
        if not self._settled:
            self._settled = True
            self._budget.leave(self._conn)
            self._budget.charge(-self.budget_charged)
            self.budget_charged = self._buffer_charge = 0

    def drop_pending(self, call: ServerCall) -> None:
        """Forget the response bytes ``call`` keeps for the peer."""
        if call.pending_bytes:
            self.charge(-call.pending_bytes)
        call.pending.clear()
        call.pending_bytes = 0

    def relieve(self, need: int) -> int:
        """The server is past its budget and this connection holds the most: its calls
        holding the most end until ``need`` bytes are freed (RST_STREAM ENHANCE_YOUR_CALM
        for one with response bytes waiting, else RESOURCE_EXHAUSTED); if that is not enough
        (the socket's buffer, a peer reading nothing), the connection is closed. The bytes
        freed."""
        conn = self._conn
        start = self.budget_charged
        holding = [c for c in conn.calls.values() if c.pending_bytes or c.held]
        holding.sort(key=_holding, reverse=True)
        message = _BUDGET_MESSAGE % self._budget.limit
        for call in holding:
            if start - self.budget_charged >= need:
                break
            self._bound_line(message, call.stream_id)
            if call.pending:
                conn.reset_call(call, ErrorCode.ENHANCE_YOUR_CALM)
            else:
                conn.writer.finish_call(call, StatusCode.RESOURCE_EXHAUSTED, message)
                call.cancelled()
        if start - self.budget_charged < need and self.budget_charged > 0:
            self._settle()
            if conn.transport is not None:
                conn.closed = True
                conn.transport.abort()
        return start - self.budget_charged

    def refuse_over_budget(self, sid: int) -> None:
        """A new call while the server is past its budget: Trailers-Only, and the budget
        relieves its largest holders."""
        call = self._conn.open_call(sid, "", {}, None)
        message = _BUDGET_MESSAGE % self._budget.limit
        self._bound_line(message, sid)
        self._conn.writer.finish_call(call, StatusCode.RESOURCE_EXHAUSTED, message)
        self._budget.relieve_soon()

    # -- request bytes held ------------------------------------------------------------------
    def check_input(self, call: ServerCall) -> bool:
        """After ``call`` took DATA: its clock, and the connection's input bound. False when
        the call was ended for it."""
        if not call.half_closed and (call.incomplete or call.task is None):
            self.watch_stall()
        if self.input_held > self._limits.input_bytes:
            self._over_input()
            return not call.done
        return True

    def _over_input(self) -> None:
        """The newest calls holding request bytes end until the bound holds; the oldest
        always goes on."""
        holders = sorted((c for c in self._conn.calls.values() if c.held), key=_stream_id)
        limit = self._limits.input_bytes
        message = f"this connection holds more than {limit} bytes of unfinished request messages"
        for call in reversed(holders[1:]):
            if self.input_held <= limit:
                break
            self._bound_line(message, call.stream_id)
            self._conn.writer.finish_call(call, StatusCode.RESOURCE_EXHAUSTED, message)
            call.cancelled()

    # -- response bytes waiting --------------------------------------------------------------
    def output_waiting(self) -> int:
        """Response bytes waiting for the peer: kept by calls, and in the socket's buffer."""
        conn = self._conn
        waiting = sum(call.pending_bytes for call in conn.blocked.values())
        if conn.transport is not None:
            waiting += conn.transport.get_write_buffer_size()
        return waiting

    def output_full(self) -> bool:
        return bool(self._conn.blocked) and self.output_waiting() >= self._limits.output_bytes

    def refuse_busy(self, sid: int) -> None:
        """A new call while the connection is at its output bound: Trailers-Only."""
        call = self._conn.open_call(sid, "", {}, None)
        self._conn.writer.finish_call(call, StatusCode.RESOURCE_EXHAUSTED, self._output_message())

    def admit_output(self, call: ServerCall, size: int) -> bool:
        """May ``size`` bytes of ``call``'s response be written or kept? No when they would
        wait on top of the connection's bound: the call then ends (True: go on)."""
        conn = self._conn
        if not conn.blocked or self.output_waiting() < self._limits.output_bytes:
            return True
        if not call.pending and not conn.paused and size <= conn.h2.send_window(call.stream_id):
            return True  # goes out at once
        self._bound_line(self._output_message(), call.stream_id)
        if call.pending:  # part of a message is out: the stream cannot end with a status
            conn.reset_call(call, ErrorCode.ENHANCE_YOUR_CALM)
        else:
            conn.writer.finish_call(call, StatusCode.RESOURCE_EXHAUSTED, self._output_message())
            call.cancelled()
        return False

    def _output_message(self) -> str:
        return (
            f"the client is not reading: more than {self._limits.output_bytes} bytes of "
            "responses wait for its flow-control window on this connection"
        )

    def _bound_line(self, message: str, stream_id: int) -> None:
        left_out = self._notices.admit(BOUND_LINE, time.monotonic())
        if left_out is not None:
            log.info("gRPC connection %s: %s; stream %d ended%s", self._conn.peer, message,
                     stream_id, left_out)  # fmt: skip

    # -- stalls ------------------------------------------------------------------------------
    def watch_stall(self, delay: float | None = None) -> None:
        """A call waits on its client: make sure the stall clock runs (next check in
        ``delay`` seconds, by default one timeout)."""
        if self._stall_timer is None and not self._conn.closed:
            self._stall_timer = asyncio.get_running_loop().call_later(
                self._limits.stall_timeout if delay is None else delay, self._stall_check
            )

    def _stall_check(self) -> None:
        self._stall_timer = None
        conn = self._conn
        if conn.closed:
            return
        now, limit = time.monotonic(), self._limits.stall_timeout
        due = float("inf")  # when the first call still waiting would have stalled
        for call in list(conn.calls.values()):
            stalled = self._waits_on_client(call)
            if stalled is None:
                continue
            if now - call.progress < limit:
                due = min(due, call.progress + limit)
            elif stalled == "output":
                left_out = self._notices.admit(STALL_LINE, now)
                if left_out is not None:
                    log.info("gRPC connection %s: stream %d read nothing for %g s, reset%s",
                             conn.peer, call.stream_id, limit, left_out)  # fmt: skip
                conn.reset_call(call, ErrorCode.CANCEL)
            else:
                why = f"no request data for {limit:g} s (stalled stream)"
                conn.writer.finish_call(call, StatusCode.DEADLINE_EXCEEDED, why)
                call.cancelled()
        if due != float("inf"):
            # Checked again when that call's time is up, not a whole timeout later: a stall
            # is reset within a few milliseconds of the timeout.
            self.watch_stall(max(due - now, STALL_CHECK_MIN_DELAY))

    def _waits_on_client(self, call: ServerCall) -> str | None:
        """ "output" when the call's response waits for the peer's window, "input" when its
        request waits for bytes the client may send (a message it began, with window to send
        it: flow control holding it back is the server's wait, not the client's; or the one
        message and END_STREAM of a unary call), else None."""
        if call.pending:
            return "output"
        if call.half_closed or call.done:
            return None
        if call.incomplete:
            return "input" if self._conn.h2.receive_window(call.stream_id) > 0 else None
        return "input" if call.task is None else None


def _stream_id(call: ServerCall) -> int:
    return call.stream_id


def _holding(call: ServerCall) -> int:
    return call.pending_bytes + call.held


_BUDGET_MESSAGE = (
    "the server holds more than its --connection-memory-bytes=%d bytes of requests and "
    "responses for its clients; try again later"
)
