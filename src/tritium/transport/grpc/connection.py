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
- Bounds (``bounds.py``, ``self.bounds``): the preface and idle timeouts, the bytes of
  requests held and of responses waiting for the peer (per connection, and on the server's
  memory budget), stalled streams.
- Writing (``outbound.py``, ``self.writer``): headers, messages within the windows,
  trailers, one write per loop iteration.
- Reading in turns (``inbound.py``, ``self.reader``): a bounded number of frames and
  messages per turn of the event loop, reading paused while the rest waits or while the peer
  leaves our answers unread; a control-frame flood (``transport/http2/flood.py``) ends the
  connection with GOAWAY ENHANCE_YOUR_CALM.
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
from .bounds import Bounds
from .budgets import MESSAGES_PER_TURN, UNREAD
from .call import ServerCall
from .frames import Pieces
from .inbound import Reader
from .outbound import Writer
from .settings import ping_policy
from .state import RESET
from .status import RpcError, StatusCode

if TYPE_CHECKING:
    from .endpoint import GrpcEndpoint

log = logging.getLogger("tritium")

MAX_FRAME = 1 << 20  # SETTINGS_MAX_FRAME_SIZE we accept: large messages in few frames
MAX_HEADER_LIST = 16 * 1024  # bytes of decoded request headers (grpc's default hard limit)
STREAM_WINDOW = 1 << 20  # each stream's receive window
CONNECTION_WINDOW = 16 << 20  # the connection's receive window
_LINGER_SECS = 1.0  # after our GOAWAY, how long the peer's bytes are read and dropped


class GrpcConnection:
    """One connection's state and logic: a native class when compiled, which owns its
    ``reader``, ``writer`` and ``bounds`` (native classes too: their calls to each other are
    direct), behind ``GrpcProtocol``, the regular class asyncio's transport calls. Unit tests
    drive it directly as a protocol."""

    kind = "gRPC"  # for the log of frontends/accept.py

    def __init__(self, endpoint: GrpcEndpoint) -> None:
        settings = endpoint.settings
        self._endpoint = endpoint
        self._dispatch = endpoint.dispatch
        self._settings = settings
        self.notices = endpoint.notices
        self.max_receive = settings.max_receive
        self.max_send = settings.max_send
        self.transport: asyncio.Transport | None = None
        self.peer = ""
        self.calls: dict[int, ServerCall] = {}
        self.blocked: dict[int, ServerCall] = {}  # calls with bytes waiting for a window
        self.paused = False  # the socket's write buffer is full
        self.draining = False
        self._last_stream = 0
        self.closed = False
        self.pace = endpoint.pace()  # whether to spin for the next call (outbound.py)
        self.pings = ping_policy(settings)
        self._keepalive: asyncio.TimerHandle | None = None
        self._ping_timeout: asyncio.TimerHandle | None = None
        self._age: asyncio.TimerHandle | None = None
        # request messages this loop turn may still cut (ServerCall.feed; inbound.py refills)
        self.message_budget = MESSAGES_PER_TURN
        self.ledger = FloodLedger(time.monotonic())
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
        self.h2 = H2Server(self, limits, self.ledger)
        self.writer = Writer(self)
        self.reader = Reader(self)
        self.bounds = Bounds(self, endpoint)

    # -- asyncio.Protocol --------------------------------------------------------------------
    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        address = transport.get_extra_info("peername")
        if isinstance(address, tuple):
            host = address[0]
            self.peer = f"[{host}]:{address[1]}" if ":" in host else f"{host}:{address[1]}"
        settings = self._settings
        self.writer.write_now()
        loop = asyncio.get_running_loop()
        if settings.keepalive_time > 0:
            self._keepalive = loop.call_later(settings.keepalive_time, self._send_keepalive)
        if settings.max_age > 0:
            self._age = loop.call_later(settings.max_age, self._aged)
        self._endpoint.connections.add(self)
        self.bounds.start()

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return  # lingering after our GOAWAY: dropped
        self.reader.read(data)  # in turns: inbound.py

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.reader.stop()
        for timer in (self._keepalive, self._ping_timeout, self._age):
            if timer is not None:
                timer.cancel()
        self.bounds.stop()
        calls = list(self.calls.values())
        self.calls.clear()
        self.blocked.clear()
        for call in calls:
            call.respond(RESET)
            call.cancelled()
        self._endpoint.connections.discard(self)
        self._endpoint.connection_closed()

    def pause_writing(self) -> None:
        """The peer reads nothing: what its socket's buffer holds is on the memory budget
        until it drains."""
        self.paused = True
        if self.transport is not None:
            self.bounds.writing_paused(self.transport.get_write_buffer_size())

    def resume_writing(self) -> None:
        self.paused = False
        self.bounds.writing_resumed()
        self.writer.unread = 0
        self.reader.release_reading(UNREAD)
        self.reader.schedule()  # the turns left waiting while the peer did not read
        self.writer.write_blocked()
        self.writer.flush()

    # -- events (transport/http2's Events) --------------------------------------------------
    def on_request(self, sid: int, headers: Headers, end_stream: bool) -> None:
        self.pings.data()
        if not self.calls:
            self.pace.request_began()
        if self.draining and sid > self._last_stream:
            self.h2.reset_stream(sid, ErrorCode.REFUSED_STREAM)
            return
        self._last_stream = max(self._last_stream, sid)
        if self.blocked and self.bounds.output_full():
            self.bounds.refuse_busy(sid)
            return
        if self.bounds.over_budget():
            self.bounds.refuse_over_budget(sid)
            return
        self._dispatch.start(self, sid, headers)
        if end_stream:
            call = self.calls.get(sid)
            if call is not None and not call.half_closed:
                self.ended_input(call)

    def open_call(
        self, sid: int, method: str, metadata: dict[str, str], encoding: str | None
    ) -> ServerCall:
        call = ServerCall(self, sid, method, metadata, encoding)
        self.calls[sid] = call
        self.bounds.watch_stall()
        return call

    def refuse(self, sid: int, status: int) -> None:
        """An HTTP answer without gRPC (wrong method or content-type); a client still
        sending is told to stop."""
        headers = ((b":status", str(status).encode()), (b"content-type", b"text/plain"))
        if self.h2.can_send(sid):
            self.h2.send_headers(sid, headers, end_stream=True)
            self.h2.reset_stream(sid, ErrorCode.NO_ERROR)  # only if the client still sends

    def on_data(self, sid: int, data: memoryview, flow: int, end_stream: bool) -> None:
        if flow:
            self.pings.data()  # DATA with a payload: the pings so far were not abuse
        call = self.calls.get(sid)
        if call is None or call.done:
            if flow:  # an answered or unknown stream: drop the bytes, keep the window open
                self.acknowledge(sid, flow)
            return
        if flow:
            try:
                more = call.feed(data, flow)
            except RpcError as exc:
                self.writer.finish_call(call, exc.code, exc.message)
                call.cancelled()
                return
            if more:  # messages left for a later turn
                self.reader.defer(call)
            if not self.bounds.check_input(call):
                return  # ended by the connection's input bound
        if end_stream and not call.half_closed:
            self.ended_input(call)

    def ended_input(self, call: ServerCall) -> None:
        if self.reader.deferred_end(call):
            return  # after the messages still to be cut (inbound.py)
        call.end_of_input()
        if not call.done:
            self._dispatch.input_ended(call)

    def on_reset(self, sid: int, code: int) -> None:
        call = self.calls.pop(sid, None)
        self.blocked.pop(sid, None)
        self.reader.forget(sid)
        if call is not None:
            call.respond(RESET)
            call.cancelled()
            self.maybe_close()

    def on_window(self, sid: int) -> None:
        self.writer.write_blocked(sid)

    def on_settings(self) -> None:
        self.bounds.preface_done()
        self.writer.write_blocked()

    def on_ping(self) -> None:
        """The ACK is queued; too many pings without data end the connection."""
        if self.pings.received(time.monotonic(), bool(self.calls)):
            self.reader.end_flood(b"too_many_pings")

    def on_ping_ack(self, payload: bytes) -> None:
        if self._ping_timeout is not None:
            self._ping_timeout.cancel()
            self._ping_timeout = None

    def on_goaway(self, last_stream_id: int, code: int, debug: bytes) -> None:
        """The client is going away: finish what is in flight, then close."""
        self.draining = True
        self._last_stream = max(self._last_stream, last_stream_id)
        self.maybe_close()

    # -- what a call uses (call.py's CallOwner) ----------------------------------------------
    def acknowledge(self, sid: int, size: int) -> None:
        """Gives ``size`` received bytes back to the connection's and the stream's windows
        (the core skips the stream's when it is closed)."""
        if not self.closed:
            self.h2.acknowledge(sid, size)
            if self.h2.has_output():
                self.writer.flush()

    def hold_input(self, size: int) -> None:
        self.bounds.hold_input(size)

    def admit_output(self, call: ServerCall, size: int) -> bool:
        return self.bounds.admit_output(call, size)

    def answer(self, call: ServerCall, data: bytes) -> bool:
        return self.writer.answer(call, data)

    def finish_call(self, call: ServerCall, code: StatusCode, message: str) -> None:
        self.writer.finish_call(call, code, message)

    def send_message(self, call: ServerCall, head: bytes, payload: bytes | Pieces) -> None:
        self.writer.send_message(call, head, payload)

    def watch_stall(self, delay: float | None = None) -> None:
        self.bounds.watch_stall(delay)

    # -- what the pool and the budget use (transport/host.py's Idle and Holder) --------------
    def idle_since(self) -> float | None:
        return self.bounds.idle_since()

    def shed(self) -> None:
        """Out of descriptors: close this idle connection now."""
        self.hang_up(b"server out of file descriptors")

    def budget_held(self) -> int:
        return self.bounds.budget_charged

    def relieve(self, need: int) -> int:
        return self.bounds.relieve(need)

    # -- pings, age, draining ----------------------------------------------------------------
    def _send_keepalive(self) -> None:
        settings = self._settings
        if not self.closed and self.pings.may_send_keepalive(bool(self.calls)):
            self.h2.ping(b"tritium\x00")
            self.pings.sent_without_data += 1
            self.writer.flush()
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
        grace = self._settings.max_age_grace
        self.drain(grace if grace > 0 else None)

    def drain(self, grace: float | None) -> None:
        """GOAWAY(NO_ERROR): no new streams; close when the calls are done or after ``grace``
        seconds; the calls in flight are still answered."""
        if self.closed or self.draining:
            return
        self.draining = True
        self.h2.goaway(ErrorCode.NO_ERROR, self._last_stream)
        self.writer.write_now()
        if grace is not None:
            asyncio.get_running_loop().call_later(grace, self.abort)
        self.maybe_close()

    # -- ending calls and the connection -----------------------------------------------------
    def reset_call(self, call: ServerCall, code: int) -> None:
        """RST_STREAM ``code``: the call and everything it holds are dropped."""
        sid = call.stream_id
        self.calls.pop(sid, None)
        self.blocked.pop(sid, None)
        self.bounds.drop_pending(call)
        call.trailers = None
        self.h2.reset_stream(sid, code)
        call.respond(RESET)
        call.cancelled()
        self.writer.flush()
        self.maybe_close()

    def maybe_close(self) -> None:
        if self.calls or self.closed:
            return
        if self.draining:
            self.close(ErrorCode.NO_ERROR)
        else:
            self.bounds.went_idle()

    def hang_up(self, debug: bytes) -> None:
        """GOAWAY(NO_ERROR) and close at once (no lingering: the descriptor is wanted)."""
        if self.closed:
            return
        self.h2.close(ErrorCode.NO_ERROR, debug)
        self.writer.write_now()
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def close(self, code: int, debug: bytes = b"") -> None:
        if self.closed:
            return
        for call in list(self.calls.values()):
            call.respond(RESET)
            call.cancelled()
        self.calls.clear()
        for call in list(self.blocked.values()):
            self.bounds.drop_pending(call)  # never written now
        self.blocked.clear()
        self.h2.close(code, debug)
        self.writer.write_now()
        self.closed = True
        self.reader.stop()
        transport = self.transport
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
            loop.call_later(self._settings.stall_timeout, transport.abort)
        else:
            transport.close()

    def abort(self) -> None:
        """Ends the connection now (grace over, keepalive lost)."""
        if self.transport is not None and not self.transport.is_closing():
            self.close(ErrorCode.NO_ERROR)


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
