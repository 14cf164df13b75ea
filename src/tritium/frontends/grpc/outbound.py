"""The writing side of a gRPC connection: response headers, messages as DATA frames within
the peer's flow-control windows (the rest kept per call until WINDOW_UPDATE), trailers, and
one write per loop iteration.

Small answers are built here as finished frames (``frames.py``) with h2's stream state and
windows advanced exactly as its ``send_headers``/``send_data`` would (checked against an h2
client in tests/unit/test_grpc_answer.py); everything else goes through h2.
"""

from __future__ import annotations

import asyncio

import h2.connection
import h2.exceptions
from h2.errors import ErrorCodes
from h2.stream import StreamInputs

from .budgets import MAX_UNREAD_BYTES, UNREAD, FloodLedger
from .call import ServerCall
from .frames import RESPONSE_HEADERS, data_frame, headers_frame, unary_answer
from .metadata import encode_grpc_message
from .pings import PingPolicy
from .status import StatusCode

# h2 no longer has the stream: closed (a reset, or DATA after END_STREAM, in the same read as
# the event being handled), or already forgotten once a later stream opened (it would then
# try to open it anew and find the ID too low)
STREAM_GONE = (h2.exceptions.NoSuchStreamError, h2.exceptions.StreamIDTooLowError)
_JOIN_BELOW = 1 << 16  # a smaller message is copied behind its prefix: one DATA frame


class Outbound:
    """Mixed into ``GrpcConnection``, whose state it shares (declared here)."""

    _h2: h2.connection.H2Connection
    _transport: asyncio.Transport | None
    calls: dict[int, ServerCall]
    _blocked: dict[int, ServerCall]  # calls with bytes waiting for a window
    _paused: bool  # the socket's write buffer is full
    _corked: bool  # inside data_received: writes wait for its end
    _flush_soon: bool  # a write is scheduled for this loop iteration
    _closed: bool
    _pings: PingPolicy
    _ledger: FloodLedger  # credited for the DATA frames sent
    _unread: int  # bytes written while the peer did not read (inbound.py)

    def _maybe_close(self) -> None:
        raise NotImplementedError  # GrpcConnection's

    def _hold_reading(self, reason: int) -> None:
        raise NotImplementedError  # inbound.py's

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
        try:
            self._send_message(call, head, payload)
        except STREAM_GONE:
            self._stream_gone(call)
            return
        self._pings.sent_data()
        self._flush()

    def _stream_gone(self, call: ServerCall) -> None:
        """h2 closed the stream under the call (the peer sent DATA after its END_STREAM in
        the same read: h2 reset it): the call ends as if the peer had reset it."""
        self.calls.pop(call.stream_id, None)
        self._blocked.pop(call.stream_id, None)
        call.cancelled()
        self._maybe_close()

    def _send_message(self, call: ServerCall, head: bytes, payload: bytes) -> None:
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
            or stream.closed
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
        self._ledger.sent(1, size)
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
            or stream.closed
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
        self._ledger.sent(1, size)
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
        call.release()
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
        self._ledger.sent(len(frames), size)
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
            except STREAM_GONE:
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
        except STREAM_GONE:
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
            if self._paused:  # the peer reads nothing: stop reading what makes us write
                self._unread += len(data)
                if self._unread > MAX_UNREAD_BYTES:
                    self._hold_reading(UNREAD)
            self._transport.write(data)


def _encoding(call: ServerCall) -> str | None:
    encoding = call.response_encoding
    return encoding[0] if encoding is not None else None
