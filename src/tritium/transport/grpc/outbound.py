"""The writing side of a gRPC connection (``conn.writer``): response headers, messages as
DATA frames within the peer's flow-control windows (the rest kept per call until
WINDOW_UPDATE), trailers, and one write per loop iteration. The frames are the HTTP/2 core's
(``transport/http2``); a small unary answer goes out as its three frames in one piece
(``H2Server.answer``).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from ..http2 import ErrorCode, StreamGone
from .budgets import MAX_UNREAD_BYTES, UNREAD
from .call import ServerCall
from .frames import OK_TRAILERS, RESPONSE_HEADERS, Pieces, response_headers
from .metadata import encode_grpc_message
from .state import ANSWER, FINISH, RESET, TRAILERS
from .status import StatusCode

if TYPE_CHECKING:
    from .connection import GrpcConnection

STREAM_GONE = StreamGone  # the core no longer has the stream open to us (reset, or closed)
_JOIN_BELOW = 1 << 16  # a smaller message is copied behind its prefix: one DATA frame


class Writer:
    """What one connection writes, and when."""

    def __init__(self, conn: GrpcConnection) -> None:
        self._conn = conn
        self.corked = False  # inside data_received: writes wait for its end
        self._flush_soon = False  # a write is scheduled for this loop iteration
        self.unread = 0  # bytes written while the peer did not read

    def _headers(self, call: ServerCall) -> None:
        call.headers_sent = True
        self._conn.h2.send_headers(call.stream_id, response_headers(_encoding(call)))

    def send_message(self, call: ServerCall, head: bytes, payload: bytes | Pieces) -> None:
        """Writes one framed message: ``head`` is its 5-byte prefix."""
        if self._conn.closed or call.done:
            return
        try:
            self._send_message(call, head, payload)
        except STREAM_GONE:
            self._stream_gone(call)
            return
        self._conn.pings.sent_data()
        self.flush()

    def _stream_gone(self, call: ServerCall) -> None:
        """The stream closed under the call: it ends as if the peer had reset it."""
        conn = self._conn
        conn.calls.pop(call.stream_id, None)
        conn.blocked.pop(call.stream_id, None)
        conn.bounds.drop_pending(call)
        call.respond(RESET)
        call.cancelled()
        conn.maybe_close()

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
        conn = self._conn
        if (
            not call.half_closed
            or call.headers_sent
            or call.pending
            or conn.paused
            or conn.closed
            or not conn.h2.answer(
                call.stream_id, response_headers(_encoding(call)), data, OK_TRAILERS
            )
        ):
            return False
        call.headers_sent = True
        call.respond(ANSWER)
        self._ended(call)
        return True

    def _ended(self, call: ServerCall) -> None:
        """The answer is out: forget the call."""
        conn = self._conn
        if call.timer is not None:
            call.timer.cancel()
            call.timer = None
        conn.pings.sent_data()
        conn.calls.pop(call.stream_id, None)
        conn.blocked.pop(call.stream_id, None)
        call.release()
        self.flush()
        conn.maybe_close()
        if not conn.calls and not conn.closed:  # idle: maybe spin (after the write above)
            conn.pace.went_idle(asyncio.get_running_loop())

    def _send_data(self, call: ServerCall, data: bytes | memoryview) -> None:
        """Sends what the windows allow; keeps the rest in ``call.pending`` (no copies)."""
        conn = self._conn
        if call.pending or conn.paused:
            view = memoryview(data)
            call.keep(view)
            conn.blocked[call.stream_id] = call
            conn.bounds.charge(len(view))
            return
        rest = self._push(call.stream_id, memoryview(data))
        if rest is not None:
            call.keep(rest)
            conn.blocked[call.stream_id] = call
            conn.bounds.charge(len(rest))

    def _push(self, sid: int, view: memoryview) -> memoryview | None:
        """DATA frames from ``view`` while the windows allow; the unsent rest, if any."""
        size = self._conn.h2.send_data(sid, view)
        return view[size:] if size < len(view) else None

    def write_blocked(self, sid: int = 0) -> None:
        """The peer's windows (or its socket) may have opened: what calls keep goes on."""
        conn = self._conn
        blocked = conn.blocked
        if not blocked:
            return
        if sid:
            calls = [blocked[sid]] if sid in blocked else []
        else:
            calls = list(blocked.values())
        for call in calls:
            if conn.paused:
                break
            try:
                self._write_pending(call)
            except STREAM_GONE:
                blocked.pop(call.stream_id, None)
                conn.bounds.drop_pending(call)
        self.flush()

    def _write_pending(self, call: ServerCall) -> None:
        conn = self._conn
        pending = call.pending
        while pending and not conn.paused:
            head = pending[0]
            rest = self._push(call.stream_id, head)
            sent = len(head) - (0 if rest is None else len(rest))
            call.pending_bytes -= sent
            conn.bounds.charge(-sent)
            if rest is not None:
                pending[0] = rest
                break
            pending.popleft()
            self.write_now()  # let the socket apply its own back-pressure (pause_writing)
        if not pending:
            conn.blocked.pop(call.stream_id, None)
            if call.trailers is not None:
                self._send_trailers(call, call.trailers)
        call.writable()

    def finish_call(self, call: ServerCall, code: StatusCode, message: str) -> None:
        if call.done:
            return
        if self._conn.closed:
            call.respond(RESET)  # the connection is gone: no status goes out
            return
        call.respond(FINISH)
        trailers = [("grpc-status", str(int(code)))]
        if message:
            trailers.append(("grpc-message", encode_grpc_message(message)))
        if call.pending:
            call.trailers = trailers  # after the bytes the window holds back
        else:
            self._send_trailers(call, trailers)
        self.flush()

    def _send_trailers(self, call: ServerCall, trailers: list[tuple[str, str]]) -> None:
        sid = call.stream_id
        h2 = self._conn.h2
        self._conn.pings.sent_data()
        encoded = tuple((k.encode(), v.encode()) for k, v in trailers)
        try:
            if call.headers_sent:
                h2.send_headers(sid, encoded, end_stream=True)
            else:  # Trailers-Only
                h2.send_headers(sid, RESPONSE_HEADERS + encoded, end_stream=True)
                call.headers_sent = True
            if not call.half_closed:  # the client may still be sending: tell it to stop
                h2.reset_stream(sid, ErrorCode.NO_ERROR)
        except STREAM_GONE:
            pass
        call.respond(TRAILERS)
        self._ended(call)

    def flush(self) -> None:
        """Frames the core has made go out once per loop iteration: everything one event or one
        batch of answers produced leaves in one write (one system call)."""
        if self.corked or self._flush_soon:
            return
        self._flush_soon = True
        asyncio.get_running_loop().call_soon(self._write_soon)

    def _write_soon(self) -> None:
        self._flush_soon = False
        self.write_now()

    def write_now(self) -> None:
        conn = self._conn
        data = conn.h2.take_output()
        transport = conn.transport
        if data and transport is not None and not conn.closed:
            if conn.paused:  # the peer reads nothing: stop reading what makes us write
                self.unread += len(data)
                if self.unread > MAX_UNREAD_BYTES:
                    conn.reader.hold_reading(UNREAD)
            transport.write(data)


def _encoding(call: ServerCall) -> str | None:
    encoding = call.response_encoding
    return encoding[0] if encoding is not None else None
