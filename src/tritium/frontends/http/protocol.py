"""HTTP/1.1 connections on a bare ``asyncio.Protocol`` with httptools (as uvicorn's
``httptools_impl``): bytes in, parser callbacks, limits and timeouts, pipelining.

A connection reads requests and hands each, once complete, to a ``RequestCycle`` that answers
it; answers leave in request order. It holds at most ``max_pipelined`` requests and stops
reading until one is answered. Everything a client could make grow is bounded: the request
line and headers (414 / 431), the body before and after decompression (400), the time to send
headers and the pauses within a body (408), idle keep-alive time (closed)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from typing import Any

import httptools

from ...access.policy import format_peer
from ..accept import Connections
from .cors import CorsPolicy
from .cycle import RequestCycle
from .flow import FlowControl
from .inflate import BodyRejected, Inflater, too_large
from .limits import HttpLimits
from .messages import ErrorRenderer, Handler, HttpRequest, HttpResponse, error_response

log = logging.getLogger("tritium")

_IDLE, _HEAD, _BODY = 0, 1, 2  # what the parser is reading
_GATHER_AFTER = 16  # body pieces kept as they are; past that, gathered as they arrive


def render_internal(exc: BaseException) -> HttpResponse:
    """The renderer of last resort: a bug in a handler answers 500 and the server goes on."""
    log.error("unhandled error in HTTP handler", exc_info=exc)
    return error_response(500, f"{type(exc).__name__}: {exc}")


class _NoTracing:
    active = False


_NO_TRACING = _NoTracing()


class HttpProtocol(asyncio.Protocol):
    kind = "HTTP"  # for the log of frontends/accept.py
    __slots__ = (
        "_tracer",
        "_recv_ns",
        "handler",
        "render_error",
        "cors",
        "flow",
        "_limits",
        "_parser",
        "_transport",
        "_peer",
        "loop",
        "_state",
        "_timed",
        "_messages",
        "_url",
        "_headers",
        "_head_size",
        "_header_lines",
        "_max_head",
        "_body",
        "_size",
        "_inflater",
        "_rejected",
        "_failed",
        "_active",
        "_queue",
        "_deadline",
        "_timer",
        "registry",
        "_idle_at",
        "__weakref__",
    )

    def __init__(
        self, handler: Handler, limits: HttpLimits, render_error: ErrorRenderer = render_internal
    ) -> None:
        self.handler = handler
        self.render_error = render_error
        # The handler's CORS policy (HttpApp.cors; None: off): its headers go on every answer.
        self.cors: CorsPolicy | None = getattr(handler, "cors", None)
        # The server's TraceManager when the handler serves inferences: while it traces,
        # each request's read times are taken (HTTP_RECV_START/END).
        self._tracer = getattr(handler, "tracer", _NO_TRACING)
        self._recv_ns = 0
        self._limits = limits
        self._parser: Any = httptools.HttpRequestParser(self)
        self._transport: asyncio.Transport | None = None
        self.flow: FlowControl = None  # type: ignore[assignment]  # set by connection_made
        self._peer = ""
        self.loop = asyncio.get_running_loop()
        self._state = _IDLE
        self._timed = _IDLE  # the read phase whose clock runs
        self._messages = 0  # requests begun on this connection
        self._url = b""
        self._headers: dict[bytes, bytes] = {}
        self._head_size = 0
        self._header_lines = 0
        self._max_head = limits.max_header_bytes
        self._body: list[bytes | bytearray] = []
        self._size = 0
        self._inflater: Inflater | None = None
        self._rejected: BodyRejected | None = None  # why the body being read is refused
        self._failed = False  # the byte stream is unusable: answer what came before, close
        self._active: RequestCycle | None = None
        self._queue: deque[RequestCycle] = deque()
        self._deadline = 0.0  # when the current read phase times out (0: it does not)
        self._timer: asyncio.TimerHandle | None = None
        # The server's live connections, so a listener can shed idle ones when out of
        # descriptors (frontends/accept.py).
        self.registry: Connections | None = None
        self._idle_at = self.loop.time()  # when the current keep-alive wait began

    def idle_deadline(self) -> float | None:
        """When this connection's keep-alive wait ends, while it sits idle between requests
        (nothing being read, nothing to answer); None while it is busy or closed."""
        if self._transport is None or self._state != _IDLE:
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
        if self._transport is not None:
            self._transport.close()

    # transport callbacks -------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        self.flow = FlowControl(transport)  # type: ignore[arg-type]
        self._peer = format_peer(transport.get_extra_info("peername"))
        self._keep_alive()
        if self.registry is not None:
            self.registry.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        """Release everything the connection held, and the parser's reference back to it, so
        its memory is freed now rather than by the cyclic garbage collector."""
        if self.registry is not None:
            self.registry.discard(self)
            self.registry = None
        self._transport = None
        self._parser = None
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
        self._drop_message()
        if self.flow is not None:
            self.flow.resume_writing()  # wake a streamed response so that it ends

    def pause_writing(self) -> None:
        self.flow.pause_writing()

    def resume_writing(self) -> None:
        self.flow.resume_writing()
        if self._active is None:
            self._next()

    def data_received(self, data: bytes) -> None:
        if self._failed:
            return
        before, begun = self._state, self._messages
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(400, "protocol upgrade is not supported")
        except httptools.HttpParserError as exc:
            self._fail(400, f"malformed HTTP request: {str(exc)[:100]}")
        if self._state != _IDLE and not self._failed:  # usually idle: whole requests came
            self._partial(len(data), before == _HEAD and begun == self._messages)

    def _partial(self, size: int, all_head: bool) -> None:
        """A request is partly read: count its header bytes, and move its clock."""
        state = self._state
        if all_head and state == _HEAD:
            # The whole chunk belongs to one request's headers, which httptools accumulates
            # itself until they end: count it here so a huge header is refused early.
            self._head_size += size
            if self._head_size > self._limits.max_header_bytes + self._limits.max_url:
                self._fail(431, "the request header block is too large")
                return
        if state == _BODY:  # the body's clock restarts with every piece
            self._arm(self._limits.body_timeout)
        elif self._timed != _HEAD:  # the headers' clock runs from their first piece
            self._arm(self._limits.header_timeout)
        self._timed = state

    # parser callbacks ----------------------------------------------------------------------
    def on_message_begin(self) -> None:
        if self._failed:
            return
        self._messages += 1
        self._state = _HEAD
        self._recv_ns = time.perf_counter_ns() if self._tracer.active else 0
        self._timed = _IDLE
        self._url = b""
        self._headers = {}
        self._head_size = 0
        self._header_lines = 0
        self._body = []
        self._size = 0

    def on_url(self, url: bytes) -> None:
        if self._failed:
            return
        self._url += url
        if len(self._url) > self._limits.max_url:
            self._url = b""
            self._fail(414, f"the request URL is longer than {self._limits.max_url} bytes")

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers[name.lower()] = value
        self._head_size += len(name) + len(value) + 4
        self._header_lines += 1
        if self._head_size > self._max_head:
            self._fail(431, f"the request headers exceed {self._max_head} bytes")

    def on_headers_complete(self) -> None:
        if self._failed:
            return
        self._state = _BODY
        if self._header_lines > self._limits.max_headers:
            self._fail(431, f"the request has more than {self._limits.max_headers} headers")
            return
        encoding = self._headers.get(b"content-encoding")
        if encoding is not None:
            encoding = encoding.strip().lower()
            if encoding not in (b"", b"identity"):
                try:
                    self._inflater = Inflater(encoding, self._limits.max_body)
                except BodyRejected as exc:
                    self._rejected = exc

    def on_body(self, body: bytes) -> None:
        if self._failed:
            return
        self._size += len(body)
        if self._rejected is not None:
            return  # read to its end and dropped, so the answer comes in order
        if self._size > self._limits.max_body:
            self._reject(too_large(self._size, self._limits.max_body))
        elif self._inflater is None:
            self._gather(body)
        else:
            try:
                for piece in self._inflater.feed(body):
                    self._gather(piece)
            except BodyRejected as exc:
                self._reject(exc)

    def _gather(self, piece: bytes) -> None:
        """Keep a piece of the body. A body of many pieces is gathered into one bytearray as
        it arrives, so no single join of tens of MiB (with its page faults) stalls the loop
        when the message completes."""
        parts = self._body
        if len(parts) == 1 and type(parts[0]) is bytearray:
            parts[0] += piece
        elif len(parts) >= _GATHER_AFTER:
            gathered = bytearray().join(parts)
            gathered += piece
            parts[:] = [gathered]
        else:
            parts.append(piece)

    def on_message_complete(self) -> None:
        if self._failed:
            return
        self._state = _IDLE
        parser = self._parser
        if self._rejected is not None or self._inflater is not None:
            self._enqueue(self._decoded_or_refused(parser.should_keep_alive()))
            return
        parts = self._body
        self._body = []  # the request holds the body now; the connection keeps nothing
        body = parts[0] if len(parts) == 1 else b"".join(parts)
        url = self._url.decode("latin-1")
        request = HttpRequest(parser.get_method().decode(), url, self._headers, body, self._peer)
        if self._recv_ns:
            request.received = (self._recv_ns, time.perf_counter_ns())
        self._enqueue(RequestCycle(self, request, parser.should_keep_alive()))

    def _decoded_or_refused(self, keep_alive: bool) -> RequestCycle:
        """The cycle of a request whose body was inflated, or refused."""
        rejected = self._rejected
        if rejected is None and self._inflater is not None:
            try:
                self._inflater.finish()
            except BodyRejected as exc:
                rejected = exc
        if rejected is None:
            parts = self._body
            body = parts[0] if len(parts) == 1 else b"".join(parts)
            method = self._parser.get_method().decode()
            url = self._url.decode("latin-1")
            request = HttpRequest(method, url, self._headers, body, self._peer)
            if self._recv_ns:
                request.received = (self._recv_ns, time.perf_counter_ns())
            self._drop_message()
            return RequestCycle(self, request, keep_alive)
        self._drop_message()
        keep_alive = keep_alive and not rejected.close
        return RequestCycle(self, None, keep_alive, error_response(400, rejected.message))

    # pipelining ----------------------------------------------------------------------------
    def _enqueue(self, cycle: RequestCycle) -> None:
        queue = self._queue
        if self._active is None and not queue and self.flow.writable:
            self._active = cycle
            cycle.start()
            if self._limits.max_pipelined > 1:
                return
        else:
            queue.append(cycle)
        if self._held() >= self._limits.max_pipelined:
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
            transport.close()
            return
        self._next()

    def _next(self) -> None:
        while self._active is None and self._queue and self.flow.writable:
            self._active = cycle = self._queue.popleft()
            cycle.start()
        if self.flow.read_paused and not self._failed:
            if self._held() < self._limits.max_pipelined:
                self.flow.resume_reading()
                self._rearm()
        elif self._active is None and not self._queue and self._state == _IDLE:
            self._keep_alive()

    # writing (for cycles) ------------------------------------------------------------------
    def write(self, parts: list[Any]) -> None:
        transport = self._transport
        if transport is not None:
            transport.writelines(parts)

    # errors --------------------------------------------------------------------------------
    def _reject(self, reason: BodyRejected) -> None:
        """Refuse the body being read: drop what was kept, answer 400 once it has ended."""
        self._rejected = reason
        self._body = []
        self._inflater = None

    def _fail(self, status: int, message: str) -> None:
        """The byte stream cannot be trusted past this point: stop reading, answer the requests
        already received, then this error, then close."""
        if self._failed:
            return
        self._failed = True
        self._deadline = 0.0
        self._drop_message()
        if self._transport is None:
            return
        self.flow.pause_reading()
        self._enqueue(RequestCycle(self, None, False, error_response(status, message)))

    def _drop_message(self) -> None:
        self._url = b""
        self._headers = {}
        self._body = []
        self._inflater = None
        self._rejected = None

    # timeouts ------------------------------------------------------------------------------
    def _arm(self, seconds: float) -> None:
        """Start the current phase's clock; one timer per connection, moved lazily."""
        if self.flow.read_paused:
            self._deadline = 0.0  # nothing is read now: no read phase can time out
            return
        self._deadline = deadline = self.loop.time() + seconds
        timer = self._timer
        if timer is None or timer.when() > deadline:
            if timer is not None:
                timer.cancel()
            self._timer = self.loop.call_at(deadline, self._on_timer)

    def _keep_alive(self) -> None:
        """Idle from now: the keep-alive clock runs."""
        self._idle_at = self.loop.time()
        self._arm(self._limits.keepalive_timeout)

    def _rearm(self) -> None:
        limits = self._limits
        self._timed = self._state
        if self._state == _HEAD:
            self._arm(limits.header_timeout)
        elif self._state == _BODY:
            self._arm(limits.body_timeout)
        elif self._active is None and not self._queue:
            self._keep_alive()

    def _on_timer(self) -> None:
        self._timer = None
        if self._deadline == 0.0 or self._transport is None:
            return
        now = self.loop.time()
        if now < self._deadline:
            self._timer = self.loop.call_at(self._deadline, self._on_timer)
            return
        if self._state == _HEAD:
            self._fail(408, "timed out waiting for the request headers")
        elif self._state == _BODY:
            self._fail(408, f"timed out waiting for the request body (received {self._size})")
        elif self._active is None and not self._queue:
            self._failed = True
            self._transport.close()  # idle keep-alive connection
