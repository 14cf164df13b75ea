"""One client connection of the gRPC server: HTTP/2 (tritium's own sans-IO core,
``transport/http2``, whose ``Events`` this class implements) on the event loop, calls
dispatched to the service's handlers.

- Flow control both ways: received bytes are given back when a handler takes its message
  (``call``); responses are written as far as the peer's windows allow and the rest waits for
  its WINDOW_UPDATE, and the socket's own back-pressure (``pause_writing``) holds everything.
- SETTINGS: ``--grpc-max-concurrent-streams`` (a stream beyond it is answered
  RST_STREAM(REFUSED_STREAM) and the connection goes on) and a header-list
  bound (an HPACK bomb ends the connection with ENHANCE_YOUR_CALM instead of being buffered).
- Pings: grpc core's abuse policy (``--grpc-http2-min-recv-ping-interval-without-data``,
  ``--grpc-keepalive-permit-without-calls``, ``--grpc-http2-max-ping-strikes``: GOAWAY
  ENHANCE_YOUR_CALM "too_many_pings"), and keepalive pings of our own
  (``--grpc-keepalive-time`` / ``-timeout``, at most ``--grpc-http2-max-pings-without-data``
  between data frames).
- Draining: GOAWAY (``--grpc-max-connection-age``, server shutdown) lets in-flight calls end,
  refuses new streams, and closes once they are done or the grace is over.
- Bounds (``bounds.py``): the preface and idle timeouts, the bytes of requests held and of
  responses waiting for the peer (per connection, and on the server's memory budget),
  stalled streams.
- Reading in turns (``inbound.py``): a bounded number of frames and messages per turn of the
  event loop, reading paused while the rest waits or while the peer leaves our answers unread;
  a control-frame flood (``budgets.py:FloodLedger``) ends the connection with GOAWAY
  ENHANCE_YOUR_CALM.
- A protocol error ends this connection with its HTTP/2 error code; nothing else is touched.
"""

from __future__ import annotations

import asyncio
import asyncio.protocols  # noqa: F401  # mypyc's code for the base class below refers to it
import logging
import time
from typing import TYPE_CHECKING, Any

from mypy_extensions import mypyc_attr

from ..http2 import ErrorCode, FloodLedger, H2Server, Limits
from ..http2.headers import Headers
from .budgets import UNREAD
from .call import ServerCall
from .inbound import Inbound
from .settings import ping_policy
from .status import RpcError

if TYPE_CHECKING:
    from .endpoint import GrpcEndpoint

log = logging.getLogger("tritium")

MAX_FRAME = 1 << 20  # SETTINGS_MAX_FRAME_SIZE we accept: large messages in few frames
MAX_HEADER_LIST = 16 * 1024  # bytes of decoded request headers (grpc's default hard limit)
STREAM_WINDOW = 1 << 20  # each stream's receive window
CONNECTION_WINDOW = 16 << 20  # the connection's receive window
_LINGER_SECS = 1.0  # after our GOAWAY, how long the peer's bytes are read and dropped


class GrpcConnection(Inbound):
    """One connection's state and logic: a native class when compiled (its bases are one
    line, ``Bounds`` ← ``Outbound`` ← ``Inbound``), behind ``GrpcProtocol``, the regular
    class asyncio's transport calls. Unit tests drive it directly as a protocol."""

    def __init__(self, endpoint: GrpcEndpoint) -> None:
        settings = endpoint.settings
        self._endpoint = endpoint
        self._dispatch = endpoint.dispatch
        self.max_receive = settings.max_receive
        self.max_send = settings.max_send
        self._transport: asyncio.Transport | None = None
        self.peer = ""
        self.calls: dict[int, ServerCall] = {}
        self._blocked: dict[int, ServerCall] = {}  # calls with bytes waiting for a window
        self._paused = False  # the socket's write buffer is full
        self._corked = False  # inside data_received: writes wait for its end
        self._flush_soon = False  # a write is scheduled for this loop iteration
        self._draining = False
        self._last_stream = 0
        self._closed = False
        self._pace = endpoint.pace()  # whether to spin for the next call (outbound.py)
        self._pings = ping_policy(settings)
        self._keepalive: asyncio.TimerHandle | None = None
        self._ping_timeout: asyncio.TimerHandle | None = None
        self._age: asyncio.TimerHandle | None = None
        self._ledger = FloodLedger(time.monotonic())
        # Our SETTINGS are in force from the first frame it writes; header blocks longer than
        # twice the decoded bound are refused before they are buffered.
        limits = Limits(
            max_streams=settings.max_streams,
            max_frame=MAX_FRAME,
            max_header_list=MAX_HEADER_LIST,
            max_block=2 * MAX_HEADER_LIST,
            stream_window=STREAM_WINDOW,
            connection_window=CONNECTION_WINDOW,
        )
        self._h2 = H2Server(self, limits, self._ledger)
        self._init_inbound()
        self._init_bounds(endpoint)

    # -- asyncio.Protocol --------------------------------------------------------------------
    def connection_made(self, transport: Any) -> None:
        self._transport = transport
        address = transport.get_extra_info("peername")
        if isinstance(address, tuple):
            host = address[0]
            self.peer = f"[{host}]:{address[1]}" if ":" in host else f"{host}:{address[1]}"
        settings = self._limits
        self._write_now()
        loop = asyncio.get_running_loop()
        if settings.keepalive_time > 0:
            self._keepalive = loop.call_later(settings.keepalive_time, self._send_keepalive)
        if settings.max_age > 0:
            self._age = loop.call_later(settings.max_age, self._aged)
        self._endpoint.connections.add(self)
        self._start_bounds()

    def data_received(self, data: bytes) -> None:
        if self._closed:
            return  # lingering after our GOAWAY: dropped
        self._read(data)  # in turns: inbound.py

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._stop_turns()
        for timer in (self._keepalive, self._ping_timeout, self._age):
            if timer is not None:
                timer.cancel()
        self._stop_bounds()
        calls = list(self.calls.values())
        self.calls.clear()
        self._blocked.clear()
        for call in calls:
            call.cancelled()
        self._endpoint.connections.discard(self)
        self._endpoint.connection_closed()

    def pause_writing(self) -> None:
        """The peer reads nothing: what its socket's buffer holds is on the memory budget
        until it drains."""
        self._paused = True
        if self._transport is not None:
            size = self._transport.get_write_buffer_size()
            self._buffer_charge += size
            self.charge(size)

    def resume_writing(self) -> None:
        self._paused = False
        self.charge(-self._buffer_charge)
        self._buffer_charge = 0
        self._unread = 0
        self._release_reading(UNREAD)
        self._schedule()  # the turns left waiting while the peer did not read
        self._write_blocked()
        self._flush()

    # -- events (transport/http2's Events) --------------------------------------------------
    def on_request(self, sid: int, headers: Headers, end_stream: bool) -> None:
        self._pings.data()
        if not self.calls:
            self._pace.request_began()
        if self._draining and sid > self._last_stream:
            self._h2.reset_stream(sid, ErrorCode.REFUSED_STREAM)
            return
        self._last_stream = max(self._last_stream, sid)
        if self._blocked and self.output_full():
            self.refuse_busy(sid)
            return
        if self._budget.over():
            self.refuse_over_budget(sid)
            return
        self._dispatch.start(self, sid, headers)
        if end_stream:
            call = self.calls.get(sid)
            if call is not None and not call.half_closed:
                self._ended_input(call)

    def open_call(
        self, sid: int, method: str, metadata: dict[str, str], encoding: str | None
    ) -> ServerCall:
        call = ServerCall(self, sid, method, metadata, encoding)
        self.calls[sid] = call
        self.watch_stall()
        return call

    def refuse(self, sid: int, status: int) -> None:
        """An HTTP answer without gRPC (wrong method or content-type); a client still
        sending is told to stop."""
        headers = ((b":status", str(status).encode()), (b"content-type", b"text/plain"))
        if self._h2.can_send(sid):
            self._h2.send_headers(sid, headers, end_stream=True)
            self._h2.reset_stream(sid, ErrorCode.NO_ERROR)  # only if the client still sends

    def on_data(self, sid: int, data: memoryview, flow: int, end_stream: bool) -> None:
        if flow:
            self._pings.data()  # DATA with a payload: the pings so far were not abuse
        call = self.calls.get(sid)
        if call is None or call.done:
            if flow:  # an answered or unknown stream: drop the bytes, keep the window open
                self.acknowledge(sid, flow)
            return
        if flow:
            try:
                more = call.feed(data, flow)
            except RpcError as exc:
                self.finish_call(call, exc.code, exc.message)
                call.cancelled()
                return
            if more:  # messages left for a later turn
                self.defer(call)
            if not self.check_input(call):
                return  # ended by the connection's input bound
        if end_stream and not call.half_closed:
            self._ended_input(call)

    def _ended_input(self, call: ServerCall) -> None:
        if self.deferred_end(call):
            return  # after the messages still to be cut (inbound.py)
        call.end_of_input()
        if not call.done:
            self._dispatch.input_ended(call)

    def on_reset(self, sid: int, code: int) -> None:
        call = self.calls.pop(sid, None)
        self._blocked.pop(sid, None)
        self._forget(sid)
        if call is not None:
            call.cancelled()
            self._maybe_close()

    def on_window(self, sid: int) -> None:
        self._write_blocked(sid)

    def on_settings(self) -> None:
        self._preface_done()
        self._write_blocked()

    def on_ping(self) -> None:
        """The ACK is queued; too many pings without data end the connection."""
        if self._pings.received(time.monotonic(), bool(self.calls)):
            self.end_flood(b"too_many_pings")

    def on_ping_ack(self, payload: bytes) -> None:
        if self._ping_timeout is not None:
            self._ping_timeout.cancel()
            self._ping_timeout = None

    def on_goaway(self, last_stream_id: int, code: int, debug: bytes) -> None:
        """The client is going away: finish what is in flight, then close."""
        self._draining = True
        self._last_stream = max(self._last_stream, last_stream_id)
        self._maybe_close()

    # -- writing -----------------------------------------------------------------------------
    def acknowledge(self, sid: int, size: int) -> None:
        """Gives ``size`` received bytes back to the connection's and the stream's windows
        (the core skips the stream's when it is closed)."""
        if not self._closed:
            self._h2.acknowledge(sid, size)
            if self._h2.has_output():
                self._flush()

    # -- pings, age, draining ----------------------------------------------------------------
    def _send_keepalive(self) -> None:
        settings = self._limits
        if not self._closed and self._pings.may_send_keepalive(bool(self.calls)):
            self._h2.ping(b"tritium\x00")
            self._pings.sent_without_data += 1
            self._flush()
            loop = asyncio.get_running_loop()
            self._ping_timeout = loop.call_later(
                settings.keepalive_timeout, self._keepalive_expired
            )
        self._keepalive = asyncio.get_running_loop().call_later(
            settings.keepalive_time, self._send_keepalive
        )

    def _keepalive_expired(self) -> None:
        log.info("gRPC connection %s: keepalive ping not acknowledged, closing", self.peer)
        self.abort()

    def _aged(self) -> None:
        grace = self._limits.max_age_grace
        self.drain(grace if grace > 0 else None)

    def drain(self, grace: float | None) -> None:
        """GOAWAY(NO_ERROR): no new streams; close when the calls are done or after ``grace``
        seconds; the calls in flight are still answered."""
        if self._closed or self._draining:
            return
        self._draining = True
        self._h2.goaway(ErrorCode.NO_ERROR, self._last_stream)
        self._write_now()
        if grace is not None:
            asyncio.get_running_loop().call_later(grace, self.abort)
        self._maybe_close()

    def _maybe_close(self) -> None:
        if self.calls or self._closed:
            return
        if self._draining:
            self._close(ErrorCode.NO_ERROR)
        else:
            self._went_idle()

    def _close(self, code: int, debug: bytes = b"") -> None:
        if self._closed:
            return
        for call in list(self.calls.values()):
            call.cancelled()
        self.calls.clear()
        for call in list(self._blocked.values()):
            self.drop_pending(call)  # never written now
        self._blocked.clear()
        self._h2.close(code, debug)
        self._write_now()
        self._closed = True
        self._stop_turns()
        transport = self._transport
        if transport is None:
            return
        if transport.can_write_eof():
            # Lingering close: our side ends after the GOAWAY, and what the peer is still
            # sending is read and dropped for a moment, so that closing on unread bytes
            # (a TCP reset) does not destroy the GOAWAY before the peer reads it.
            transport.write_eof()
            loop = asyncio.get_running_loop()
            loop.call_later(_LINGER_SECS, _end_linger, transport)
            # a peer that reads nothing would keep the socket until its buffer is written
            loop.call_later(self._limits.stall_timeout, transport.abort)
        else:
            transport.close()

    def abort(self) -> None:
        """Ends the connection now (grace over, keepalive lost)."""
        if self._transport is not None and not self._transport.is_closing():
            self._close(ErrorCode.NO_ERROR)


# A regular Python class even when compiled, as asyncio's transports need (a native class
# cannot have asyncio.Protocol's non-native base): it hands the transport's calls to the native
# ``GrpcConnection`` it makes. Every method of a regular class, and every attribute it uses,
# is looked up by name; so only this shell is one.
@mypyc_attr(native_class=False)
class GrpcProtocol(asyncio.Protocol):
    __slots__ = ("conn",)

    def __init__(self, endpoint: GrpcEndpoint) -> None:
        self.conn = GrpcConnection(endpoint)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.conn.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        self.conn.data_received(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.conn.connection_lost(exc)

    def pause_writing(self) -> None:
        self.conn.pause_writing()

    def resume_writing(self) -> None:
        self.conn.resume_writing()


def _end_linger(transport: asyncio.Transport) -> None:
    """Closes after the linger; aborts when the peer left what we wrote unread (a close
    would wait for it to read, and go on reading what it sends)."""
    if transport.get_write_buffer_size():
        transport.abort()
    else:
        transport.close()
