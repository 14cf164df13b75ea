"""HTTP/1.1 connections on a bare ``asyncio.Protocol`` (as uvicorn's ``httptools_impl``):
bytes in to ``transport/http1/reader.py:RequestReader`` (httptools and the size bounds),
whose requests and refusals come back here (``ReaderEvents``); timeouts and pipelining here.

A connection reads requests and hands each, once complete, to a ``RequestCycle`` that answers
it; answers leave in request order. It holds at most ``max_pipelined`` requests and stops
reading until one is answered. Everything a client could make grow is bounded: the request
line and headers (414 / 431), the body before and after decompression (400), the time to send
headers and the pauses within a body (408), idle keep-alive time (closed). While the client
reads nothing (the socket's buffer past its high-water mark) no other answer starts, and what
the buffer holds, with the bodies of the requests queued behind it, is charged to the
server's memory budget (``frontends/memory.py``), which closes the connections holding the
most when the process holds too much for its clients."""

from __future__ import annotations

import asyncio
import asyncio.protocols  # noqa: F401  # mypyc's code for the base class below refers to it
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Final

from mypy_extensions import mypyc_attr

from ... import loop_spin
from ...access.policy import format_peer
from ...logs.budget import UNEXPECTED_ERRORS
from ..accept import Connections
from ..memory import MemoryBudget
from .cors import CorsPolicy
from .cycle import RequestCycle
from ...transport.http1.flow import FlowControl
from ...transport.http1.inflate import BodyRejected
from ...transport.http1.reader import BODY, HEAD, IDLE, RequestReader
from .limits import HttpLimits
from .messages import ErrorRenderer, Handler, HttpRequest, HttpResponse, error_response


# A whole answer up to this size waits for the end of the loop's turn (write_soon); a bigger
# one is written at once, so that the transport's back-pressure sees it before the next.
WRITE_SOON_MAX_BYTES: Final = 64 * 1024


def render_internal(exc: BaseException) -> HttpResponse:
    """The renderer of last resort: a bug in a handler answers 500 and the server goes on."""
    UNEXPECTED_ERRORS.report("unhandled error in HTTP handler", exc)
    return error_response(500, f"{type(exc).__name__}: {exc}")


class _NoTracing:
    active = False


_NO_TRACING = _NoTracing()


class HttpConnection:
    """One HTTP/1.1 connection, from the transport's ``connection_made`` on: a native class
    when compiled (its attributes are fields, its calls direct), behind ``HttpProtocol``, the
    regular class asyncio's transport calls."""

    def __init__(
        self,
        transport: asyncio.Transport,
        handler: Handler,
        limits: HttpLimits,
        render_error: ErrorRenderer,
        registry: Connections | None,
    ) -> None:
        self.kind = "HTTP"  # for the log of frontends/accept.py
        self.handler = handler
        self.render_error = render_error
        # The handler's CORS policy (HttpApp.cors; None: off): its headers go on every answer.
        self.cors: CorsPolicy | None = getattr(handler, "cors", None)
        # The server's TraceManager when the handler serves inferences: while it traces,
        # each request's read times are taken (HTTP_RECV_START/END).
        self._tracer = getattr(handler, "tracer", _NO_TRACING)
        # The handler's answer to a refused body in its door's own format (HttpApp.refusal;
        # None, or None from it: Triton's 400).
        self._refusal: Callable[[BodyRejected], HttpResponse | None] | None = getattr(
            handler, "refusal", None
        )
        self._recv_ns = 0
        # The limits read per request, as fields (``HttpLimits`` is an interpreted object).
        self._max_pipelined = limits.max_pipelined
        self._header_timeout = limits.header_timeout
        self._body_timeout = limits.body_timeout
        self._keepalive_timeout = limits.keepalive_timeout
        self._reader = RequestReader(
            self, limits.max_body, limits.max_header_bytes, limits.max_url, limits.max_headers
        )
        self._transport: asyncio.Transport | None = transport
        self.flow = FlowControl(transport)
        self._peer = format_peer(transport.get_extra_info("peername"))
        self.loop = asyncio.get_running_loop()
        self._timed = IDLE  # the read phase whose clock runs
        self._failed = False  # the byte stream is unusable: answer what came before, close
        self._active: RequestCycle | None = None
        self._queue: deque[RequestCycle] = deque()
        self._deadline = 0.0  # when the current read phase times out (0: it does not)
        self._timer: asyncio.TimerHandle | None = None
        # The server's live connections, so a listener can shed idle ones when out of
        # descriptors (frontends/accept.py).
        self.registry = registry
        # The server's memory budget, and what this connection has charged it (its socket's
        # buffer while the client reads nothing, the bodies queued behind that answer).
        self._budget: MemoryBudget | None = registry.memory if registry is not None else None
        self._charged = 0
        self._idle_at = self.loop.time()  # when the current keep-alive wait began
        self._out: list[Any] | None = None  # answers written at the end of this loop turn
        self._pace = loop_spin.ClientPace()  # whether to spin for the next request
        # The timer's longest step (see _arm): the shortest read-phase timeout, at least 1 s.
        shortest = min(limits.header_timeout, limits.body_timeout, limits.keepalive_timeout)
        self._tick = max(1.0, shortest)
        self._keep_alive()
        if registry is not None:
            registry.add(self)

    def idle_deadline(self) -> float | None:
        """When this connection's keep-alive wait ends, while it sits idle between requests
        (nothing being read, nothing to answer); None while it is busy or closed."""
        if self._transport is None or self._reader.state != IDLE:
            return None
        if self._active is not None or self._queue:
            return None
        return self._deadline

    def idle_since(self) -> float | None:
        """When this connection's keep-alive wait began, while it sits idle between requests
        (or never sent one); None while it is busy or closed (frontends/accept.py)."""
        return self._idle_at if self.idle_deadline() is not None else None

    def shed(self) -> None:
        """Close this idle connection now to give its descriptor to a new client."""
        self._failed = True
        self._close()

    # transport callbacks (through HttpProtocol) ---------------------------------------------
    def connection_lost(self, exc: Exception | None) -> None:
        """Release everything the connection held, and the parser's reference back to it, so
        its memory is freed now rather than by the cyclic garbage collector."""
        if self.registry is not None:
            self.registry.discard(self)
            self.registry = None
        self._settle()
        self._transport = None
        self._out = None
        self._reader.close()
        self._failed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._active is not None:  # the client went away: stop the work done for it
            self._active.cancel()
            self._active = None
        for cycle in self._queue:
            cycle.cancel()
        self._queue.clear()
        self.flow.resume_writing()  # wake a streamed response so that it ends

    def pause_writing(self) -> None:
        self.flow.pause_writing()
        if self._budget is not None and self._transport is not None:
            self._charge(self._transport.get_write_buffer_size())

    def resume_writing(self) -> None:
        self.flow.resume_writing()
        self._settle()  # the client reads: the bodies still queued start now
        if self._active is None:
            self._next()

    # the server's memory budget --------------------------------------------------------------
    def _charge(self, size: int) -> None:
        budget = self._budget
        if budget is not None and size:
            if not self._charged:
                budget.join(self)
            self._charged += size
            budget.charge(size)

    def _settle(self) -> None:
        budget = self._budget
        if budget is not None and self._charged:
            budget.charge(-self._charged)
            budget.leave(self)
            self._charged = 0

    def budget_held(self) -> int:
        return self._charged

    def relieve(self, need: int) -> int:
        """The process holds too much for its clients and this connection among the most:
        closed now (its answer cannot be cut short as a valid one)."""
        freed = self._charged
        self._settle()
        self._failed = True
        if self._transport is not None:
            self._transport.abort()
        return freed

    def data_received(self, data: bytes) -> None:
        if self._failed:
            return
        reader = self._reader
        reader.feed(data)
        if reader.state != IDLE and not self._failed:  # usually idle: whole requests came
            self._partial(reader.state)

    def _partial(self, state: int) -> None:
        """A request is partly read: move its clock."""
        if state == BODY:  # the body's clock restarts with every piece
            self._arm(self._body_timeout)
        elif self._timed != HEAD:  # the headers' clock runs from their first piece
            self._arm(self._header_timeout)
        self._timed = state

    # the reader's events ---------------------------------------------------------------------
    def on_begin(self) -> None:
        now = self._pace.request_began()
        self._recv_ns = now if self._tracer.active else 0
        self._timed = IDLE

    def on_request(
        self,
        method: str,
        target: str,
        headers: dict[bytes, bytes],
        body: bytes | bytearray,
        keep_alive: bool,
    ) -> None:
        request = HttpRequest(method, target, headers, body, self._peer)
        if self._recv_ns:
            request.received = (self._recv_ns, time.perf_counter_ns())
        self._enqueue(RequestCycle(self, request, keep_alive))

    def on_refused(self, reason: BodyRejected, keep_alive: bool) -> None:
        keep_alive = keep_alive and not reason.close
        answer = self._refusal(reason) if self._refusal is not None else None
        if answer is None:
            answer = error_response(400, reason.message)
        self._enqueue(RequestCycle(self, None, keep_alive, answer))

    # pipelining ----------------------------------------------------------------------------
    def _enqueue(self, cycle: RequestCycle) -> None:
        queue = self._queue
        if self._active is None and not queue and self.flow.writable:
            self._active = cycle
            cycle.start()
            if self._max_pipelined > 1:
                return
        else:
            queue.append(cycle)
            if not self.flow.writable and cycle.request is not None:
                self._charge(len(cycle.request.body))  # waits for a client that does not read
        if self._held() >= self._max_pipelined:
            self.flow.pause_reading()
            self._deadline = 0.0  # nothing is read now: no read phase can time out

    def _held(self) -> int:
        return len(self._queue) + (self._active is not None)

    def cycle_done(self, cycle: RequestCycle) -> None:
        """A cycle wrote its answer: close if it said so, else answer the next request."""
        if cycle is self._active:
            self._active = None
        transport = self._transport
        if transport is None:
            return
        if not cycle.keep_alive:
            self._failed = True
            for queued in self._queue:
                queued.cancel()
            self._queue.clear()
            self._close()
            return
        self._next()

    def _next(self) -> None:
        while self._active is None and self._queue and self.flow.writable:
            self._active = cycle = self._queue.popleft()
            cycle.start()
        if self.flow.read_paused and not self._failed:
            if self._held() < self._max_pipelined:
                self.flow.resume_reading()
                self._rearm()
        elif self._active is None and not self._queue and self._reader.state == IDLE:
            self._keep_alive()

    # writing (for cycles) ------------------------------------------------------------------
    def write(self, parts: list[Any]) -> None:
        """Bytes out now (after any answer that waits for the end of the turn)."""
        transport = self._transport
        if transport is not None:
            if self._out is not None:
                self._write_out()
            transport.writelines(parts)

    def write_soon(self, parts: list[Any], size: int) -> None:
        """A whole answer of ``size`` bytes, written when the loop turns again (a ready
        callback, run before the loop polls) together with the other connections' answers of
        this turn: a write to a client asleep in its poll wakes it, and the wake-up is paid
        inside the writer's system call; a client woken by the first of a turn's answers
        reads the rest without sleeping again (bench/results/mypyc.md). One bigger than
        ``WRITE_SOON_MAX_BYTES`` goes at once (``write``), after any that wait."""
        if size > WRITE_SOON_MAX_BYTES:
            self.write(parts)
            return
        if self._transport is None:
            return
        out = self._out
        if out is not None:
            out.extend(parts)
        else:
            self._out = parts
            self.loop.call_soon(self._write_out)

    def _write_out(self) -> None:
        out, self._out = self._out, None
        if out is not None and self._transport is not None:
            self._transport.writelines(out)

    def _close(self) -> None:
        """Close the connection after what is written (the transport sends its buffer)."""
        if self._transport is not None:
            if self._out is not None:
                self._write_out()
            self._transport.close()

    # errors --------------------------------------------------------------------------------
    def _fail(self, status: int, message: str) -> None:
        """The byte stream cannot be trusted past this point (``on_fail``)."""
        self._reader.fail(status, message)

    def on_fail(self, status: int, message: str) -> None:
        """Stop reading, answer the requests already received, then this error, then
        close."""
        if self._failed:
            return
        self._failed = True
        self._deadline = 0.0
        if self._transport is None:
            return
        self.flow.pause_reading()
        self._enqueue(RequestCycle(self, None, False, error_response(status, message)))

    # timeouts ------------------------------------------------------------------------------
    def _arm(self, seconds: float) -> None:
        """Start the current phase's clock; one timer per connection, moved lazily. The
        timer rings at the deadline or one ``_tick`` from now, whichever comes first, and
        then goes on to the deadline in steps: so the next phase's clock (a body's 60 s after
        the keep-alive's 75 s, when a client sends a request's head and body apart, as
        libcurl does) finds it early enough and no timer is made per request."""
        if self.flow.read_paused:
            self._deadline = 0.0  # nothing is read now: no read phase can time out
            return
        now = self.loop.time()
        self._deadline = deadline = now + seconds
        timer = self._timer
        if timer is None or timer.when() > deadline:
            if timer is not None:
                timer.cancel()
            self._timer = self.loop.call_at(min(deadline, now + self._tick), self._on_timer)

    def _keep_alive(self) -> None:
        """Idle from now: the keep-alive clock runs. A client that sent its next request
        quickly after the last answer is expected to again: while nothing else is in flight,
        the loop polls for it rather than sleep (loop_spin)."""
        self._idle_at = self.loop.time()
        self._arm(self._keepalive_timeout)
        self._pace.went_idle(self.loop)

    def _rearm(self) -> None:
        state = self._timed = self._reader.state
        if state == HEAD:
            self._arm(self._header_timeout)
        elif state == BODY:
            self._arm(self._body_timeout)
        elif self._active is None and not self._queue:
            self._keep_alive()

    def _on_timer(self) -> None:
        self._timer = None
        if self._deadline == 0.0 or self._transport is None:
            return
        now = self.loop.time()
        if now < self._deadline:
            self._timer = self.loop.call_at(min(self._deadline, now + self._tick), self._on_timer)
            return
        state = self._reader.state
        if state == HEAD:
            self._fail(408, "timed out waiting for the request headers")
        elif state == BODY:
            size = self._reader.size
            self._fail(408, f"timed out waiting for the request body (received {size})")
        elif self._active is None and not self._queue:
            self._failed = True
            self._close()  # idle keep-alive connection


# A regular Python class even when compiled, as asyncio's transports need: mypyc's native class
# with a non-native base keeps a weak-reference slot that its deallocator does not clear (a
# weakref to a freed connection would then point at freed memory; tests/unit/
# test_http_protocol.py takes one). It only hands the transport's calls to the native
# ``HttpConnection`` it makes once connected: an attribute of a regular class is looked up by
# name on every use (the protocol layer's own cost per request, fake transport, compiled:
# 5.1-5.2 µs as one regular class, 4.3-4.5 µs split so).
@mypyc_attr(native_class=False)
class HttpProtocol(asyncio.Protocol):
    __slots__ = ("conn", "_handler", "_limits", "_render", "registry", "__weakref__")

    def __init__(
        self, handler: Handler, limits: HttpLimits, render_error: ErrorRenderer = render_internal
    ) -> None:
        self._handler = handler
        self._limits = limits
        self._render = render_error
        # The server's live connections, so a listener can shed idle ones when out of
        # descriptors (frontends/accept.py): the connection joins them once made.
        self.registry: Connections | None = None
        self.conn: HttpConnection | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.conn = HttpConnection(
            transport,  # type: ignore[arg-type]
            self._handler,
            self._limits,
            self._render,
            self.registry,
        )

    def connection_lost(self, exc: Exception | None) -> None:
        conn = self.conn
        if conn is not None:
            conn.connection_lost(exc)

    def pause_writing(self) -> None:
        conn = self.conn
        if conn is not None:
            conn.pause_writing()

    def resume_writing(self) -> None:
        conn = self.conn
        if conn is not None:
            conn.resume_writing()

    def data_received(self, data: bytes) -> None:
        conn = self.conn
        if conn is not None:
            conn.data_received(data)
