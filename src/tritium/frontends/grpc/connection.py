"""One client connection of the gRPC server: HTTP/2 (the ``h2`` state machine) on the event
loop, calls dispatched to the service's handlers.

- Flow control both ways: received bytes are given back when a handler takes its message
  (``call``); responses are written as far as the peer's windows allow and the rest waits for
  its WINDOW_UPDATE, and the socket's own back-pressure (``pause_writing``) holds everything.
- SETTINGS: ``--grpc-max-concurrent-streams`` (a stream beyond it is answered
  RST_STREAM(REFUSED_STREAM) and the connection goes on: ``h2_server.py``) and a header-list
  bound (an HPACK bomb ends the connection with ENHANCE_YOUR_CALM instead of being buffered).
- Pings: grpc core's abuse policy (``--grpc-http2-min-recv-ping-interval-without-data``,
  ``--grpc-keepalive-permit-without-calls``, ``--grpc-http2-max-ping-strikes``: GOAWAY
  ENHANCE_YOUR_CALM "too_many_pings"), and keepalive pings of our own
  (``--grpc-keepalive-time`` / ``-timeout``, at most ``--grpc-http2-max-pings-without-data``
  between data frames).
- Draining: GOAWAY (``--grpc-max-connection-age``, server shutdown) lets in-flight calls end,
  refuses new streams, and closes once they are done or the grace is over.
- Bounds (``bounds.py``): the preface and idle timeouts, the bytes of requests held and of
  responses waiting for the peer, stalled streams.
- Reading in turns (``inbound.py``): a bounded number of frames and messages per turn of the
  event loop, reading paused while the rest waits or while the peer leaves our answers unread;
  a control-frame flood (``budgets.py:FloodLedger``) ends the connection with GOAWAY
  ENHANCE_YOUR_CALM.
- A protocol error ends this connection with its HTTP/2 error code; nothing else is touched.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
from h2.connection import ConnectionState
from h2.errors import ErrorCodes
from h2.settings import SettingCodes
from hyperframe.frame import GoAwayFrame

from .bounds import Bounds
from .budgets import UNREAD, FloodLedger
from .call import ServerCall
from .frames import Buffer, FrameSizeGuard
from .h2_server import ServerConnection
from .hpack_fast import CachingDecoder, LiteralEncoder
from .inbound import Inbound
from .outbound import STREAM_GONE, Outbound
from .pings import PingPolicy
from .status import RpcError

if TYPE_CHECKING:
    from .listener import GrpcListener

log = logging.getLogger("tritium")

MAX_FRAME = 1 << 20  # SETTINGS_MAX_FRAME_SIZE we accept: large messages in few frames
MAX_HEADER_LIST = 16 * 1024  # bytes of decoded request headers (grpc's default hard limit)
STREAM_WINDOW = 1 << 20  # each stream's receive window
CONNECTION_WINDOW = 16 << 20  # the connection's receive window
_LINGER_SECS = 1.0  # after our GOAWAY, how long the peer's bytes are read and dropped
# Inbound header validation is the dispatcher's (it reads :method, :path and content-type;
# everything else is opaque metadata): h2's per-character checks cost ~10 µs a call.
_H2_CONFIG = h2.config.H2Configuration(
    client_side=False,
    header_encoding=None,
    validate_inbound_headers=False,
    normalize_inbound_headers=False,
    validate_outbound_headers=False,
    normalize_outbound_headers=False,
)


class GrpcConnection(Inbound, Outbound, Bounds, asyncio.Protocol):
    def __init__(self, listener: GrpcListener) -> None:
        self._listener = listener
        self.max_receive = listener.max_receive
        self.max_send = listener.max_send
        self._h2 = ServerConnection(config=_H2_CONFIG)  # REFUSED_STREAM over the bound
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
        self._pings = PingPolicy(listener.options)
        self._keepalive: asyncio.TimerHandle | None = None
        self._ping_timeout: asyncio.TimerHandle | None = None
        self._age: asyncio.TimerHandle | None = None
        self._ledger = FloodLedger(time.monotonic())
        self._frames = FrameSizeGuard(MAX_FRAME, 2 * MAX_HEADER_LIST, self._ledger)
        self._init_inbound()
        self._init_bounds(listener.limits, listener.pool)

    # -- asyncio.Protocol --------------------------------------------------------------------
    def connection_made(self, transport: Any) -> None:
        self._transport = transport
        address = transport.get_extra_info("peername")
        if isinstance(address, tuple):
            host = address[0]
            self.peer = f"[{host}]:{address[1]}" if ":" in host else f"{host}:{address[1]}"
        options = self._listener.options
        # Our SETTINGS as initial values: what the first SETTINGS frame says is what h2
        # enforces from the start (values set afterwards would wait for the peer's ACK).
        self._h2.local_settings = h2.settings.Settings(
            client=False,
            initial_values={
                SettingCodes.MAX_CONCURRENT_STREAMS: self._listener.max_streams,
                SettingCodes.MAX_HEADER_LIST_SIZE: MAX_HEADER_LIST,
                SettingCodes.INITIAL_WINDOW_SIZE: STREAM_WINDOW,
                SettingCodes.ENABLE_PUSH: 0,
                SettingCodes.MAX_FRAME_SIZE: MAX_FRAME,
            },
        )
        self._h2.max_inbound_frame_size = MAX_FRAME  # h2 read it from its own defaults
        self._h2.decoder = CachingDecoder(MAX_HEADER_LIST)
        self._h2.encoder = LiteralEncoder()
        self._h2.initiate_connection()
        self._h2.increment_flow_control_window(CONNECTION_WINDOW - 65535)
        self._write_now()
        loop = asyncio.get_running_loop()
        if options.grpc.keepalive_time_ms > 0:
            self._keepalive = loop.call_later(
                options.grpc.keepalive_time_ms / 1000, self._send_keepalive
            )
        if options.grpc.max_connection_age_ms > 0:
            self._age = loop.call_later(options.grpc.max_connection_age_ms / 1000, self._aged)
        self._listener.connections.add(self)
        self._start_bounds()

    def data_received(self, data: bytes) -> None:
        if self._closed:
            return  # lingering after our GOAWAY: dropped
        self._read(data)  # in turns: inbound.py

    def _receive(self, data: Buffer) -> None:
        """Frames (one turn's, checked by ``FrameSizeGuard``) to h2, their events to the
        handlers. A GOAWAY from the peer closes h2's side of the connection and drops what
        it had not written: what is queued goes first, and the calls in flight (this batch's
        too) can still be answered (``_goaway``)."""
        self._write_now()
        try:
            events = self._h2.receive_data(data)
        except h2.exceptions.ProtocolError as exc:
            self._protocol_error(exc)
            return
        machine = self._h2.state_machine
        if machine.state is ConnectionState.CLOSED and any(
            type(event) is h2.events.ConnectionTerminated for event in events
        ):
            machine.state = ConnectionState.SERVER_OPEN
        self._corked = True  # what the events make is written once, below
        try:
            for event in events:
                if _is_data(event):
                    self._pings.data()
                handler = _EVENTS.get(type(event))
                if handler is not None:
                    handler(self, event)
        except Exception:  # a bug: this connection ends, the server goes on
            log.exception("gRPC connection %s: unexpected error", self.peer)
            self._corked = False
            self._close(ErrorCodes.INTERNAL_ERROR)
            return
        self._corked = False
        self._write_now()

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
        self._listener.connections.discard(self)
        self._listener.connection_closed()

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self._unread = 0
        self._release_reading(UNREAD)
        self._schedule()  # the turns left waiting while the peer did not read
        self._write_blocked()
        self._flush()

    # -- events ------------------------------------------------------------------------------
    def _request(self, event: h2.events.RequestReceived) -> None:
        sid = event.stream_id
        if self._draining and sid > self._last_stream:
            try:
                self._h2.reset_stream(sid, ErrorCodes.REFUSED_STREAM)
            except STREAM_GONE:
                pass
            return
        self._last_stream = max(self._last_stream, sid)
        if self._blocked and self.output_full():
            self.refuse_busy(sid)
            return
        self._listener.dispatch.start(self, sid, event.headers or [])  # END_STREAM: its event

    def open_call(
        self, sid: int, method: str, metadata: dict[str, str], encoding: str | None
    ) -> ServerCall:
        call = ServerCall(self, sid, method, metadata, encoding)
        self.calls[sid] = call
        self.watch_stall()
        return call

    def refuse(self, sid: int, status: int) -> None:
        """An HTTP answer without gRPC (wrong method or content-type); a client still
        sending is told to stop (h2 may already have closed a stream whose DATA came in the
        same read)."""
        headers = [(b":status", str(status).encode()), (b"content-type", b"text/plain")]
        try:
            self._h2.send_headers(sid, headers, end_stream=True)
            stream = self._h2.streams.get(sid)
            if stream is not None and not stream.closed:
                self._h2.reset_stream(sid, ErrorCodes.NO_ERROR)
        except STREAM_GONE:
            pass

    def _data(self, event: h2.events.DataReceived) -> None:
        sid = event.stream_id
        flow = event.flow_controlled_length or 0
        call = self.calls.get(sid)
        if call is None or call.done:
            if flow:  # an answered or unknown stream: drop the bytes, keep the window open
                self.acknowledge(sid, flow)
            return
        try:
            more = call.feed(event.data or b"", flow)
        except RpcError as exc:
            self.finish_call(call, exc.code, exc.message)
            call.cancelled()
            return
        if more:  # messages left for a later turn
            self.defer(call)
        if not self.check_input(call):
            return  # ended by the connection's input bound
        if event.stream_ended:
            self._ended_input(call)

    def _stream_ended(self, event: h2.events.StreamEnded) -> None:
        call = self.calls.get(event.stream_id)
        if call is not None and not call.half_closed:
            self._ended_input(call)

    def _ended_input(self, call: ServerCall) -> None:
        if self.deferred_end(call):
            return  # after the messages still to be cut (inbound.py)
        call.end_of_input()
        if not call.done:
            self._listener.dispatch.input_ended(call)

    def _reset(self, event: h2.events.StreamReset) -> None:
        call = self.calls.pop(event.stream_id, None)
        self._blocked.pop(event.stream_id, None)
        self._forget(event.stream_id)
        if call is not None:
            call.cancelled()
            self._maybe_close()

    def _window(self, event: h2.events.WindowUpdated) -> None:
        self._write_blocked(event.stream_id)

    def _settings(self, event: h2.events.RemoteSettingsChanged) -> None:
        self._preface_done()
        self._write_blocked()

    def _ping(self, event: h2.events.PingReceived) -> None:
        """h2 has queued the ACK; too many pings without data end the connection."""
        if self._pings.received(time.monotonic(), bool(self.calls)):
            self.end_flood(b"too_many_pings")

    def _ping_ack(self, event: h2.events.PingAckReceived) -> None:
        if self._ping_timeout is not None:
            self._ping_timeout.cancel()
            self._ping_timeout = None

    def _goaway(self, event: h2.events.ConnectionTerminated) -> None:
        """The client is going away: finish what is in flight, then close."""
        self._draining = True
        self._last_stream = max(self._last_stream, event.last_stream_id or 0)
        self._maybe_close()

    # -- writing -----------------------------------------------------------------------------
    def acknowledge(self, sid: int, size: int) -> None:
        """Gives ``size`` received bytes back to the connection's and the stream's windows
        (h2 skips the stream's when it is closed)."""
        if not self._closed:
            self._h2.acknowledge_received_data(size, sid)
            self._flush()

    # -- pings, age, draining ----------------------------------------------------------------
    def _send_keepalive(self) -> None:
        options = self._listener.options
        if not self._closed and self._pings.may_send_keepalive(bool(self.calls)):
            self._h2.ping(b"tritium\x00")
            self._pings.sent_without_data += 1
            self._flush()
            loop = asyncio.get_running_loop()
            self._ping_timeout = loop.call_later(
                options.grpc.keepalive_timeout_ms / 1000, self._keepalive_expired
            )
        self._keepalive = asyncio.get_running_loop().call_later(
            options.grpc.keepalive_time_ms / 1000, self._send_keepalive
        )

    def _keepalive_expired(self) -> None:
        log.info("gRPC connection %s: keepalive ping not acknowledged, closing", self.peer)
        self.abort()

    def _aged(self) -> None:
        grace = self._listener.options.grpc.max_connection_age_grace_ms
        self.drain(grace / 1000 if grace > 0 else None)

    def drain(self, grace: float | None) -> None:
        """GOAWAY(NO_ERROR): no new streams; close when the calls are done or after ``grace``
        seconds. The frame is written by hand: h2 allows nothing after its own GOAWAY, and
        the calls in flight must still be answered."""
        if self._closed or self._draining:
            return
        self._draining = True
        self._write_now()  # what h2 holds goes before the GOAWAY
        frame = GoAwayFrame(0)
        frame.last_stream_id = self._last_stream
        frame.error_code = ErrorCodes.NO_ERROR
        assert self._transport is not None
        self._transport.write(frame.serialize())
        if grace is not None:
            asyncio.get_running_loop().call_later(grace, self.abort)
        self._maybe_close()

    def _maybe_close(self) -> None:
        if self.calls or self._closed:
            return
        if self._draining:
            self._close(ErrorCodes.NO_ERROR)
        else:
            self._went_idle()

    def _close(self, code: int, debug: bytes = b"") -> None:
        if self._closed:
            return
        for call in list(self.calls.values()):
            call.cancelled()
        self.calls.clear()
        try:
            self._h2.close_connection(code, additional_data=debug or None)
        except h2.exceptions.ProtocolError:
            pass
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
            self._close(ErrorCodes.NO_ERROR)

    def _protocol_error(self, exc: h2.exceptions.ProtocolError) -> None:
        code = getattr(exc, "error_code", None) or ErrorCodes.PROTOCOL_ERROR
        log.debug("gRPC connection %s: HTTP/2 protocol error: %s", self.peer, exc)
        self._close(code)


def _end_linger(transport: asyncio.Transport) -> None:
    """Closes after the linger; aborts when the peer left what we wrote unread (a close
    would wait for it to read, and go on reading what it sends)."""
    if transport.get_write_buffer_size():
        transport.abort()
    else:
        transport.close()


def _is_data(event: h2.events.Event) -> bool:
    """Headers or DATA with a payload: the pings so far were not abuse (empty DATA is not)."""
    if type(event) is h2.events.DataReceived:
        return bool(event.flow_controlled_length)
    return type(event) is h2.events.RequestReceived


_EVENTS: dict[type, Callable[[GrpcConnection, Any], None]] = {
    h2.events.RequestReceived: GrpcConnection._request,
    h2.events.DataReceived: GrpcConnection._data,
    h2.events.StreamEnded: GrpcConnection._stream_ended,
    h2.events.StreamReset: GrpcConnection._reset,
    h2.events.WindowUpdated: GrpcConnection._window,
    h2.events.RemoteSettingsChanged: GrpcConnection._settings,
    h2.events.PingReceived: GrpcConnection._ping,
    h2.events.PingAckReceived: GrpcConnection._ping_ack,
    h2.events.ConnectionTerminated: GrpcConnection._goaway,
}
