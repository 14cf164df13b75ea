"""The writing side of a gRPC connection: response headers, messages as DATA frames within
the peer's flow-control windows (the rest kept per call until WINDOW_UPDATE), trailers, and
one write per loop iteration. The frames are the HTTP/2 core's (``transport/http2``); a
small unary answer goes out as its three frames in one piece (``H2Server.answer``).
"""

from __future__ import annotations

import asyncio

from ..http2 import ErrorCode, StreamGone
from .bounds import Bounds
from .budgets import MAX_UNREAD_BYTES, UNREAD
from .call import ServerCall
from .frames import OK_TRAILERS, RESPONSE_HEADERS, Pieces, response_headers
from .metadata import encode_grpc_message
from .status import StatusCode

STREAM_GONE = StreamGone  # the core no longer has the stream open to us (reset, or closed)
_JOIN_BELOW = 1 << 16  # a smaller message is copied behind its prefix: one DATA frame


class Outbound(Bounds):
    """The second of ``GrpcConnection``'s bases (its state is declared in ``Bounds``)."""

    def _headers(self, call: ServerCall) -> None:
        call.headers_sent = True
        self._h2.send_headers(call.stream_id, response_headers(_encoding(call)))

    def send_message(self, call: ServerCall, head: bytes, payload: bytes | Pieces) -> None:
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
        """The stream closed under the call: it ends as if the peer had reset it."""
        self.calls.pop(call.stream_id, None)
        self._blocked.pop(call.stream_id, None)
        self.drop_pending(call)
        call.cancelled()
        self._maybe_close()

    def _send_message(self, call: ServerCall, head: bytes, payload: bytes | Pieces) -> None:
        if not call.headers_sent:
            self._headers(call)
        if isinstance(payload, Pieces):  # the large parts are the arrays' memory: no copy
            parts = payload.parts
            self._send_data(call, head + parts[0])
            for part in parts[1:]:
                self._send_data(call, part)
        elif len(payload) < _JOIN_BELOW:
            self._send_data(call, head + payload)
        else:  # no copy of a large message: the prefix goes as a frame of its own
            self._send_data(call, head)
            self._send_data(call, payload)

    def answer(self, call: ServerCall, data: bytes) -> bool:
        """A whole successful unary answer (headers, one DATA frame, ``grpc-status: 0``) in
        one piece, when it fits the windows and one frame; False leaves it to the general
        path."""
        if (
            not call.half_closed
            or call.headers_sent
            or call.pending
            or self._paused
            or self._closed
            or not self._h2.answer(
                call.stream_id, response_headers(_encoding(call)), data, OK_TRAILERS
            )
        ):
            return False
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
        if not self.calls and not self._closed:  # idle: maybe spin (after the write above)
            self._pace.went_idle(asyncio.get_running_loop())

    def _send_data(self, call: ServerCall, data: bytes | memoryview) -> None:
        """Sends what the windows allow; keeps the rest in ``call.pending`` (no copies)."""
        if call.pending or self._paused:
            view = memoryview(data)
            call.keep(view)
            self._blocked[call.stream_id] = call
            self.charge(len(view))
            return
        rest = self._push(call.stream_id, memoryview(data))
        if rest is not None:
            call.keep(rest)
            self._blocked[call.stream_id] = call
            self.charge(len(rest))

    def _push(self, sid: int, view: memoryview) -> memoryview | None:
        """DATA frames from ``view`` while the windows allow; the unsent rest, if any."""
        size = self._h2.send_data(sid, view)
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
                self.drop_pending(call)
        self._flush()

    def _write_pending(self, call: ServerCall) -> None:
        pending = call.pending
        while pending and not self._paused:
            head = pending[0]
            rest = self._push(call.stream_id, head)
            sent = len(head) - (0 if rest is None else len(rest))
            call.pending_bytes -= sent
            self.charge(-sent)
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
        encoded = tuple((k.encode(), v.encode()) for k, v in trailers)
        try:
            if call.headers_sent:
                self._h2.send_headers(sid, encoded, end_stream=True)
            else:  # Trailers-Only
                self._h2.send_headers(sid, RESPONSE_HEADERS + encoded, end_stream=True)
                call.headers_sent = True
            if not call.half_closed:  # the client may still be sending: tell it to stop
                self._h2.reset_stream(sid, ErrorCode.NO_ERROR)
        except STREAM_GONE:
            pass
        self._ended(call)

    def _flush(self) -> None:
        """Frames the core has made go out once per loop iteration: everything one event or one
        batch of answers produced leaves in one write (one system call)."""
        if self._corked or self._flush_soon:
            return
        self._flush_soon = True
        asyncio.get_running_loop().call_soon(self._write_soon)

    def _write_soon(self) -> None:
        self._flush_soon = False
        self._write_now()

    def _write_now(self) -> None:
        data = self._h2.take_output()
        if data and self._transport is not None and not self._closed:
            if self._paused:  # the peer reads nothing: stop reading what makes us write
                self._unread += len(data)
                if self._unread > MAX_UNREAD_BYTES:
                    self._hold_reading(UNREAD)
            self._transport.write(data)


def _encoding(call: ServerCall) -> str | None:
    encoding = call.response_encoding
    return encoding[0] if encoding is not None else None
