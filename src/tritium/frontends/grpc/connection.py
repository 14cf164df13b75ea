"""One client connection of the gRPC server: HTTP/2 (the ``h2`` state machine) on the event
loop, calls dispatched to the service's handlers.

- Flow control both ways: received bytes are given back when a handler takes its message
  (``call``); responses are written as far as the peer's windows allow and the rest waits for
  its WINDOW_UPDATE, and the socket's own back-pressure (``pause_writing``) holds everything.
- SETTINGS: ``--grpc-max-concurrent-streams`` and a header-list bound (an HPACK bomb ends
  the connection with ENHANCE_YOUR_CALM instead of being buffered).
- Pings: grpc core's abuse policy (``--grpc-http2-min-recv-ping-interval-without-data``,
  ``--grpc-keepalive-permit-without-calls``, ``--grpc-http2-max-ping-strikes``: GOAWAY
  ENHANCE_YOUR_CALM "too_many_pings"), and keepalive pings of our own
  (``--grpc-keepalive-time`` / ``-timeout``, at most ``--grpc-http2-max-pings-without-data``
  between data frames).
- Draining: GOAWAY (``--grpc-max-connection-age``, server shutdown) lets in-flight calls end,
  refuses new streams, and closes once they are done or the grace is over.
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
from h2.errors import ErrorCodes
from h2.settings import SettingCodes
from h2.stream import StreamInputs
from hyperframe.frame import GoAwayFrame

from .call import ServerCall
from .frames import RESPONSE_HEADERS, FrameSizeGuard, data_frame, headers_frame, unary_answer
from .hpack_fast import CachingDecoder, LiteralEncoder
from .metadata import encode_grpc_message
from .pings import PingPolicy
from .status import RpcError, StatusCode

if TYPE_CHECKING:
    from .listener import GrpcListener

log = logging.getLogger("tritium")

MAX_FRAME = 1 << 20  # SETTINGS_MAX_FRAME_SIZE we accept: large messages in few frames
MAX_HEADER_LIST = 16 * 1024  # bytes of decoded request headers (grpc's default hard limit)
STREAM_WINDOW = 1 << 20  # each stream's receive window
CONNECTION_WINDOW = 16 << 20  # the connection's receive window
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
_JOIN_BELOW = 1 << 16  # a smaller message is copied behind its prefix: one DATA frame


class GrpcConnection(asyncio.Protocol):
    def __init__(self, listener: GrpcListener) -> None:
        self._listener = listener
        self.max_receive = listener.max_receive
        self.max_send = listener.max_send
        self._h2 = h2.connection.H2Connection(config=_H2_CONFIG)
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
        self._frames = FrameSizeGuard(MAX_FRAME)

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
        if options.grpc_keepalive_time_ms > 0:
            self._keepalive = loop.call_later(
                options.grpc_keepalive_time_ms / 1000, self._send_keepalive
            )
        if options.grpc_max_connection_age_ms > 0:
            self._age = loop.call_later(options.grpc_max_connection_age_ms / 1000, self._aged)
        self._listener.connections.add(self)

    def data_received(self, data: bytes) -> None:
        refused = self._frames.check(data)
        if refused is not None:  # a bad preface, or a frame refused from its header alone
            self._close(refused)
            return
        try:
            events = self._h2.receive_data(data)
        except h2.exceptions.ProtocolError as exc:
            self._protocol_error(exc)
            return
        self._corked = True  # what the events make is written once, below
        try:
            for event in events:
                if type(event) in _DATA_EVENTS:
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
        for timer in (self._keepalive, self._ping_timeout, self._age):
            if timer is not None:
                timer.cancel()
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
        self._write_blocked()
        self._flush()

    # -- events ------------------------------------------------------------------------------
    def _request(self, event: h2.events.RequestReceived) -> None:
        sid = event.stream_id
        if self._draining and sid > self._last_stream:
            self._h2.reset_stream(sid, ErrorCodes.REFUSED_STREAM)
            return
        self._last_stream = max(self._last_stream, sid)
        self._listener.dispatch.start(self, sid, event.headers or [])  # END_STREAM: its event

    def open_call(
        self, sid: int, method: str, metadata: dict[str, str], encoding: str | None
    ) -> ServerCall:
        call = ServerCall(self, sid, method, metadata, encoding)
        self.calls[sid] = call
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
        except h2.exceptions.StreamClosedError:
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
            call.feed(event.data or b"", flow)
        except RpcError as exc:
            self.finish_call(call, exc.code, exc.message)
            call.cancelled()
            return
        if event.stream_ended:
            self._ended_input(call)

    def _stream_ended(self, event: h2.events.StreamEnded) -> None:
        call = self.calls.get(event.stream_id)
        if call is not None and not call.half_closed:
            self._ended_input(call)

    def _ended_input(self, call: ServerCall) -> None:
        call.end_of_input()
        if not call.done:
            self._listener.dispatch.input_ended(call)

    def _reset(self, event: h2.events.StreamReset) -> None:
        call = self.calls.pop(event.stream_id, None)
        self._blocked.pop(event.stream_id, None)
        if call is not None:
            call.cancelled()
            self._maybe_close()

    def _window(self, event: h2.events.WindowUpdated) -> None:
        self._write_blocked(event.stream_id)

    def _settings(self, event: h2.events.RemoteSettingsChanged) -> None:
        self._write_blocked()

    def _ping(self, event: h2.events.PingReceived) -> None:
        """h2 has queued the ACK; too many pings without data end the connection."""
        if self._pings.received(time.monotonic(), bool(self.calls)):
            self._close(ErrorCodes.ENHANCE_YOUR_CALM, b"too_many_pings")

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

    def _headers(self, call: ServerCall) -> None:
        call.headers_sent = True
        headers = RESPONSE_HEADERS
        if call.response_encoding is not None:
            headers = [*headers, (b"grpc-encoding", call.response_encoding[0].encode())]
        self._h2.send_headers(call.stream_id, headers)

    def send_message(self, call: ServerCall, head: bytes, payload: bytes) -> None:
        """Writes one framed message: ``head`` is its 5-byte prefix."""
        if self._closed or call.done:
            return
        if len(payload) < _JOIN_BELOW:
            data = head + payload
            if not self._data_frame(call, data):
                if not call.headers_sent:
                    self._headers(call)
                self._send_data(call, data)
        else:  # no copy of a large message: the prefix goes as a frame of its own
            if not call.headers_sent:
                self._headers(call)
            self._send_data(call, head)
            self._send_data(call, payload)
        self._pings.sent_data()
        self._flush()

    def _data_frame(self, call: ServerCall, data: bytes) -> bool:
        """``data`` as one DATA frame built here (with the response headers before the
        first), when it fits the windows and one frame; h2's state and windows advanced as
        ``send_headers``/``send_data`` would. False leaves it to h2."""
        h2conn = self._h2
        sid = call.stream_id
        size = len(data)
        stream = h2conn.streams.get(sid)
        if (
            stream is None
            or call.pending
            or self._paused
            or size > h2conn.max_outbound_frame_size
            or size > h2conn.local_flow_control_window(sid)
        ):
            return False
        machine = stream.state_machine
        frames = b""
        if not call.headers_sent:
            machine.process_input(StreamInputs.SEND_HEADERS)
            frames = headers_frame(sid, _encoding(call))
            call.headers_sent = True
        machine.process_input(StreamInputs.SEND_DATA)
        stream.outbound_flow_control_window -= size
        h2conn.outbound_flow_control_window -= size
        h2conn._data_to_send += frames + data_frame(sid, data)
        return True

    def answer(self, call: ServerCall, data: bytes) -> bool:
        """A whole successful unary answer (headers, one DATA frame, ``grpc-status: 0``) as
        one piece of frames built here, when it fits the windows and one frame; False
        leaves it to the general path. h2's own calls cost ~30 µs for the three frames; the
        stream's state and windows are advanced exactly as ``send_headers``/``send_data``
        would (tests/unit/test_grpc_answer.py checks it against an h2 client)."""
        h2conn = self._h2
        size = len(data)
        stream = h2conn.streams.get(call.stream_id)
        if (
            stream is None
            or not call.half_closed
            or call.headers_sent
            or call.pending
            or self._paused
            or self._closed
            or size > h2conn.max_outbound_frame_size
            or size > h2conn.local_flow_control_window(call.stream_id)
        ):
            return False
        machine = stream.state_machine
        machine.process_input(StreamInputs.SEND_HEADERS)
        machine.process_input(StreamInputs.SEND_DATA)
        machine.process_input(StreamInputs.SEND_HEADERS)
        machine.process_input(StreamInputs.SEND_END_STREAM)
        stream.outbound_flow_control_window -= size
        h2conn.outbound_flow_control_window -= size
        h2conn._data_to_send += unary_answer(call.stream_id, _encoding(call), data)
        call.headers_sent = True
        call.done = True
        self._ended(call)
        return True

    def _ended(self, call: ServerCall) -> None:
        """The answer is out: forget the call."""
        if call.timer is not None:
            call.timer.cancel()
            call.timer = None
        self._pings.sent_data()
        self.calls.pop(call.stream_id, None)
        self._blocked.pop(call.stream_id, None)
        self._flush()
        self._maybe_close()

    def _send_data(self, call: ServerCall, data: bytes) -> None:
        """Sends what the windows allow; keeps the rest in ``call.pending`` (no copies)."""
        if call.pending or self._paused:
            call.keep(memoryview(data))
            self._blocked[call.stream_id] = call
            return
        rest = self._push(call.stream_id, memoryview(data))
        if rest is not None:
            call.keep(rest)
            self._blocked[call.stream_id] = call

    def _push(self, sid: int, view: memoryview) -> memoryview | None:
        """DATA frames from ``view`` while the windows allow, built here in one piece (h2's
        send_data serialises a frame object per 16 KiB); the unsent rest, if any."""
        h2conn = self._h2
        window = h2conn.local_flow_control_window(sid)
        size = min(len(view), window)
        if size <= 0:
            return view if len(view) else None
        step = h2conn.max_outbound_frame_size
        frames = [data_frame(sid, view[at : min(at + step, size)]) for at in range(0, size, step)]
        stream = h2conn.streams[sid]
        stream.state_machine.process_input(StreamInputs.SEND_DATA)
        stream.outbound_flow_control_window -= size
        h2conn.outbound_flow_control_window -= size
        h2conn._data_to_send += b"".join(frames)
        return view[size:] if size < len(view) else None

    def _write_blocked(self, sid: int = 0) -> None:
        if not self._blocked:
            return
        if sid:
            calls = [self._blocked[sid]] if sid in self._blocked else []
        else:
            calls = list(self._blocked.values())
        for call in calls:
            if self._paused:
                break
            try:
                self._write_pending(call)
            except h2.exceptions.StreamClosedError:
                self._blocked.pop(call.stream_id, None)
        self._flush()

    def _write_pending(self, call: ServerCall) -> None:
        pending = call.pending
        while pending and not self._paused:
            head = pending[0]
            rest = self._push(call.stream_id, head)
            call.pending_bytes -= len(head) - (0 if rest is None else len(rest))
            if rest is not None:
                pending[0] = rest
                break
            pending.popleft()
            self._write_now()  # let the socket apply its own back-pressure (pause_writing)
        if not pending:
            self._blocked.pop(call.stream_id, None)
            if call.trailers is not None:
                self._send_trailers(call, call.trailers)
        call.writable()

    def finish_call(self, call: ServerCall, code: StatusCode, message: str) -> None:
        if call.done or self._closed:
            call.done = True
            return
        call.done = True
        trailers = [("grpc-status", str(int(code)))]
        if message:
            trailers.append(("grpc-message", encode_grpc_message(message)))
        if call.pending:
            call.trailers = trailers  # after the bytes the window holds back
        else:
            self._send_trailers(call, trailers)
        self._flush()

    def _send_trailers(self, call: ServerCall, trailers: list[tuple[str, str]]) -> None:
        sid = call.stream_id
        self._pings.sent_data()
        encoded = [(k.encode(), v.encode()) for k, v in trailers]
        try:
            if call.headers_sent:
                self._h2.send_headers(sid, encoded, end_stream=True)
            else:  # Trailers-Only
                self._h2.send_headers(sid, [*RESPONSE_HEADERS, *encoded], end_stream=True)
                call.headers_sent = True
            if not call.half_closed:  # the client may still be sending: tell it to stop
                self._h2.reset_stream(sid, ErrorCodes.NO_ERROR)
        except h2.exceptions.StreamClosedError:
            pass
        self._ended(call)

    def _flush(self) -> None:
        """Frames h2 has made go out once per loop iteration: everything one event or one
        batch of answers produced leaves in one write (one system call)."""
        if self._corked or self._flush_soon:
            return
        self._flush_soon = True
        asyncio.get_running_loop().call_soon(self._write_soon)

    def _write_soon(self) -> None:
        self._flush_soon = False
        self._write_now()

    def _write_now(self) -> None:
        data = self._h2.data_to_send()
        if data and self._transport is not None and not self._closed:
            self._transport.write(data)

    # -- pings, age, draining ----------------------------------------------------------------
    def _send_keepalive(self) -> None:
        options = self._listener.options
        if not self._closed and self._pings.may_send_keepalive(bool(self.calls)):
            self._h2.ping(b"tritium\x00")
            self._pings.sent_without_data += 1
            self._flush()
            loop = asyncio.get_running_loop()
            self._ping_timeout = loop.call_later(
                options.grpc_keepalive_timeout_ms / 1000, self._keepalive_expired
            )
        self._keepalive = asyncio.get_running_loop().call_later(
            options.grpc_keepalive_time_ms / 1000, self._send_keepalive
        )

    def _keepalive_expired(self) -> None:
        log.info("gRPC connection %s: keepalive ping not acknowledged, closing", self.peer)
        self.abort()

    def _aged(self) -> None:
        grace = self._listener.options.grpc_max_connection_age_grace_ms
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
        if self._draining and not self.calls and not self._closed:
            self._close(ErrorCodes.NO_ERROR)

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
        if self._transport is not None:
            self._transport.close()

    def abort(self) -> None:
        """Ends the connection now (grace over, keepalive lost)."""
        if self._transport is not None and not self._transport.is_closing():
            self._close(ErrorCodes.NO_ERROR)

    def _protocol_error(self, exc: h2.exceptions.ProtocolError) -> None:
        code = getattr(exc, "error_code", None) or ErrorCodes.PROTOCOL_ERROR
        log.debug("gRPC connection %s: HTTP/2 protocol error: %s", self.peer, exc)
        self._close(code)


def _encoding(call: ServerCall) -> str | None:
    encoding = call.response_encoding
    return encoding[0] if encoding is not None else None


_DATA_EVENTS = frozenset({h2.events.RequestReceived, h2.events.DataReceived})
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
