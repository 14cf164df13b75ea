"""The server side of one HTTP/2 connection (RFC 9113), sans-IO.

``receive(data, frames, size)`` reads frames (at most ``frames`` begun, about ``size`` bytes:
the caller's turn) and calls the ``Events`` handler as each one is understood; the send
methods queue frames, and ``take_output`` hands them out in one piece. A connection error
raises ``H2ConnectionError`` (the caller sends GOAWAY with ``close``); a stream error is
answered here with RST_STREAM, and the handler hears of it through ``on_reset``.

- Preface: the client's magic, then SETTINGS as its first frame.
- Frames: a frame whose header declares more than our SETTINGS_MAX_FRAME_SIZE is refused
  from its header alone (FRAME_SIZE_ERROR), as is a header block (HEADERS + CONTINUATION)
  longer than ``max_block`` (ENHANCE_YOUR_CALM): nothing is buffered first. Each header is
  also shown to the ``FloodLedger`` (``flood.py``).
- SETTINGS: ours are in force from the start (the first frame we send states them); the
  peer's are applied and acknowledged. INITIAL_WINDOW_SIZE moves every stream's window.
- Streams (§5.1): idle → open → half-closed → closed; a stream is forgotten once closed both
  ways. A new stream over our SETTINGS_MAX_CONCURRENT_STREAMS is refused with
  RST_STREAM(REFUSED_STREAM) (§5.1.2; its block still goes through HPACK), and the
  connection goes on. Frames on a closed stream are dropped (DATA's bytes still go back to
  the connection's window).
- Flow control (§6.9): received DATA counts against the connection's and the stream's
  windows; the handler gives bytes back with ``acknowledge``, and WINDOW_UPDATE goes out once
  half a window is given back (or a window is empty). Sending keeps the peer's windows:
  ``send_window`` says how much may go now, WINDOW_UPDATE raises it (``on_window``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Protocol

from .flood import FloodLedger
from .frames import (
    ACK,
    CONTINUATION,
    DATA,
    DEFAULT_FRAME_SIZE,
    DEFAULT_WINDOW,
    END_HEADERS,
    END_STREAM,
    ENABLE_CONNECT_PROTOCOL,
    ENABLE_PUSH,
    HEAD,
    HEADER_TABLE_SIZE,
    HEADERS,
    INITIAL_WINDOW_SIZE,
    KNOWN_TYPES,
    LARGEST_FRAME_SIZE,
    MAX_CONCURRENT_STREAMS,
    MAX_FRAME_SIZE,
    MAX_HEADER_LIST_SIZE,
    MAX_WINDOW,
    PADDED,
    PING,
    PREFACE,
    PRIORITY_FLAG,
    PUSH_PROMISE,
    SETTINGS,
    SETTINGS_ACK,
    Buffer,
    ErrorCode,
    goaway,
    head,
    rst_stream,
    setting_pairs,
    settings,
    u32,
    window_update,
)
from .headers import HeaderDecoder, HeaderEncoder, HeaderError, Headers

_STREAM_MASK: Final = 0x7FFFFFFF
_EMPTY = memoryview(b"")
_BLOCK_FRAMES = (HEADERS, PUSH_PROMISE, CONTINUATION)


class Events(Protocol):
    """What the connection tells its user, as it reads (the one seam to a front-end)."""

    def on_request(self, stream_id: int, headers: Headers, end_stream: bool) -> None: ...

    def on_data(self, stream_id: int, data: memoryview, flow: int, end_stream: bool) -> None:
        """``data`` (valid only during the call) without padding; ``flow``: the bytes it
        took of the windows, to ``acknowledge``. Trailers come as empty data that ends."""

    def on_reset(self, stream_id: int, code: int) -> None:
        """The stream is gone: the peer reset it, or a stream error made us reset it."""

    def on_window(self, stream_id: int) -> None:
        """The peer's window grew (0: the connection's, or every stream's by SETTINGS)."""

    def on_settings(self) -> None: ...

    def on_ping(self) -> None:
        """A PING arrived (its ACK is queued)."""

    def on_ping_ack(self, payload: bytes) -> None: ...

    def on_goaway(self, last_stream_id: int, code: int, debug: bytes) -> None: ...


class H2ConnectionError(Exception):
    """A connection error: GOAWAY with ``code`` (and ``debug``) ends the connection."""

    def __init__(self, code: ErrorCode, message: str, debug: bytes = b"") -> None:
        super().__init__(message)
        self.code = code
        self.debug = debug


class StreamGone(Exception):
    """The stream is closed (or was never opened) for what was asked of it."""


class _Stream:
    __slots__ = ("send_window", "recv_window", "unacked", "remote_closed", "local_closed")

    def __init__(self, send_window: int, recv_window: int) -> None:
        self.send_window = send_window
        self.recv_window = recv_window  # what the peer may still send
        self.unacked = 0  # bytes the handler gave back, not yet in a WINDOW_UPDATE
        self.remote_closed = False
        self.local_closed = False


@dataclass(frozen=True, slots=True)
class Limits:
    """Our side of a connection. ``max_frame``: our SETTINGS_MAX_FRAME_SIZE; ``max_block``:
    the bytes of one header block read; ``max_header_list``: SETTINGS_MAX_HEADER_LIST_SIZE
    (the decoded bound); ``stream_window``/``connection_window``: our receive windows."""

    max_streams: int
    max_frame: int
    max_header_list: int
    max_block: int
    stream_window: int
    connection_window: int


class H2Server:
    """One server connection, its events to ``events``, its control frames to ``ledger``."""

    def __init__(self, events: Events, limits: Limits, ledger: FloodLedger) -> None:
        max_streams, max_frame = limits.max_streams, limits.max_frame
        max_header_list, stream_window = limits.max_header_list, limits.stream_window
        connection_window = limits.connection_window
        self._events = events
        self._max_streams = max_streams
        self._max_frame = max_frame
        self._max_block = limits.max_block
        self._stream_window = stream_window
        self._conn_max = connection_window
        self.ledger = ledger
        self._decoder = HeaderDecoder(max_header_list)
        self._encoder = HeaderEncoder()
        self._out: list[Buffer] = [
            settings(
                {
                    MAX_CONCURRENT_STREAMS: max_streams,
                    MAX_HEADER_LIST_SIZE: max_header_list,
                    INITIAL_WINDOW_SIZE: stream_window,
                    ENABLE_PUSH: 0,
                    MAX_FRAME_SIZE: max_frame,
                }
            )
        ]
        if connection_window > DEFAULT_WINDOW:
            self._out.append(window_update(0, connection_window - DEFAULT_WINDOW))
        self.streams: dict[int, _Stream] = {}
        self.highest = 0  # the highest stream id the peer used
        self.closed = False  # GOAWAY sent by ``close``: nothing more is read
        self.send_frame = DEFAULT_FRAME_SIZE  # the peer's SETTINGS_MAX_FRAME_SIZE
        self._initial_send = DEFAULT_WINDOW  # the peer's SETTINGS_INITIAL_WINDOW_SIZE
        self._send_conn = DEFAULT_WINDOW  # what we may send on the connection
        self._recv_conn = connection_window
        self._conn_unacked = 0
        self._preface_left = len(PREFACE)
        self._settled = False  # the peer's first SETTINGS arrived
        self._partial: bytearray | None = None  # a frame begun in an earlier read
        self._need = 0  # the bytes of _partial's whole frame (9 until its header is in)
        self._block_sid = 0  # a header block is open on this stream (CONTINUATION due)
        self._block_flags = 0
        self._block: list[bytes] = []
        self._block_size = 0
        self._handlers = (
            self._data,
            self._headers,
            self._priority,
            self._rst_stream,
            self._settings,
            self._push_promise,
            self._ping,
            self._goaway,
            self._window_update,
            self._continuation,
        )

    # -- reading -----------------------------------------------------------------------------
    def receive(self, data: Buffer, frames: int, size: int) -> tuple[int, int]:
        """Reads ``data`` until ``frames`` frames have begun (the next one is left) or about
        ``size`` bytes went by: (bytes taken, frames begun). A frame cut short is kept for
        the next call."""
        view = data if isinstance(data, memoryview) else memoryview(data)
        end = min(len(view), size)
        pos = self._preface(view, end) if self._preface_left else 0
        begun = 0
        while pos < end and not self.closed:
            partial = self._partial
            if partial is not None:
                pos = self._continue_partial(partial, view, pos, end)
                continue
            if begun >= frames:
                break
            begun += 1
            if end - pos < 9:
                self._partial, self._need = bytearray(view[pos:end]), 9
                return end, begun
            high, low, kind, flags, sid = HEAD.unpack_from(view, pos)
            length = high << 16 | low
            sid &= _STREAM_MASK
            self._check_head(kind, flags, length, sid)
            total = 9 + length
            if end - pos < total:
                self._partial, self._need = bytearray(view[pos:end]), total
                return end, begun
            self._frame(kind, flags, sid, view[pos + 9 : pos + total])
            pos += total
        return pos, begun

    def _continue_partial(self, partial: bytearray, view: memoryview, pos: int, end: int) -> int:
        take = min(self._need - len(partial), end - pos)
        partial += view[pos : pos + take]
        pos += take
        if len(partial) < self._need:
            return pos
        high, low, kind, flags, sid = HEAD.unpack_from(partial, 0)
        length = high << 16 | low
        sid &= _STREAM_MASK
        if self._need == 9:  # the header is in: checked before its body is kept
            self._check_head(kind, flags, length, sid)
            self._need = 9 + length
            if length:
                return pos
        self._partial = None
        with memoryview(partial) as frame:
            self._frame(kind, flags, sid, frame[9:])
        return pos

    def _preface(self, view: memoryview, end: int) -> int:
        done = len(PREFACE) - self._preface_left
        take = min(self._preface_left, end)
        if view[:take] != PREFACE[done : done + take]:
            raise H2ConnectionError(ErrorCode.PROTOCOL_ERROR, "not an HTTP/2 client preface")
        self._preface_left -= take
        return take

    def _check_head(self, kind: int, flags: int, length: int, sid: int) -> None:
        if length > self._max_frame:
            raise H2ConnectionError(ErrorCode.FRAME_SIZE_ERROR, f"a frame of {length} bytes")
        if not self._settled and kind != SETTINGS:
            raise H2ConnectionError(ErrorCode.PROTOCOL_ERROR, "the preface's SETTINGS is due")
        if self._block_sid:
            if kind != CONTINUATION or sid != self._block_sid:
                raise H2ConnectionError(ErrorCode.PROTOCOL_ERROR, "CONTINUATION expected")
        if kind in _BLOCK_FRAMES:
            self._block_size = length if kind != CONTINUATION else self._block_size + length
            if self._block_size > self._max_block:  # an HPACK bomb in the making
                raise H2ConnectionError(ErrorCode.ENHANCE_YOUR_CALM, "header block too long")
        if self.ledger.frame(kind, flags, length, sid):
            raise H2ConnectionError(
                ErrorCode.ENHANCE_YOUR_CALM, "control-frame flood", b"too_many_control_frames"
            )

    def _frame(self, kind: int, flags: int, sid: int, payload: memoryview) -> None:
        if kind < KNOWN_TYPES:
            self._handlers[kind](flags, sid, payload)
        # an unknown type is ignored (§5.5)

    # -- frames, by type -----------------------------------------------------------------------
    def _data(self, flags: int, sid: int, payload: memoryview) -> None:
        if not sid:
            raise H2ConnectionError(ErrorCode.PROTOCOL_ERROR, "DATA on stream 0")
        flow = len(payload)
        if flags & PADDED:
            payload = _unpad(payload)
        if flow > self._recv_conn:
            raise H2ConnectionError(ErrorCode.FLOW_CONTROL_ERROR, "DATA past the window")
        self._recv_conn -= flow
        stream = self.streams.get(sid)
        if stream is None or stream.remote_closed:
            self._idle(sid, "DATA")
            self._give_back(flow)  # dropped: the connection's window is not the peer's loss
            if stream is not None:  # after END_STREAM (§5.1 half-closed (remote))
                self._stream_error(sid, ErrorCode.STREAM_CLOSED)
            return
        if flow > stream.recv_window:
            self._give_back(flow)
            self._stream_error(sid, ErrorCode.FLOW_CONTROL_ERROR)
            return
        stream.recv_window -= flow
        ended = bool(flags & END_STREAM)
        if ended:
            self._remote_end(sid, stream)
        self._events.on_data(sid, payload, flow, ended)

    def _headers(self, flags: int, sid: int, payload: memoryview) -> None:
        if not sid or not sid & 1:
            raise H2ConnectionError(ErrorCode.PROTOCOL_ERROR, "HEADERS on a server stream id")
        if flags & PADDED:
            payload = _unpad(payload)
        if flags & PRIORITY_FLAG:
            if len(payload) < 5:
                raise H2ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "HEADERS priority cut")
            payload = payload[5:]
        self._block = [bytes(payload)]
        self._block_flags = flags
        if flags & END_HEADERS:
            self._end_block(sid)
        else:
            self._block_sid = sid

    def _continuation(self, flags: int, sid: int, payload: memoryview) -> None:
        if not self._block_sid:
            raise H2ConnectionError(ErrorCode.PROTOCOL_ERROR, "CONTINUATION without HEADERS")
        self._block.append(bytes(payload))
        if flags & END_HEADERS:
            self._block_sid = 0
            self._end_block(sid)

    def _end_block(self, sid: int) -> None:
        block = self._block[0] if len(self._block) == 1 else b"".join(self._block)
        self._block = []
        try:
            headers = self._decoder.decode(block)
        except HeaderError as exc:
            if exc.too_large:
                raise H2ConnectionError(ErrorCode.ENHANCE_YOUR_CALM, str(exc)) from None
            raise H2ConnectionError(ErrorCode.COMPRESSION_ERROR, str(exc)) from None
        ended = bool(self._block_flags & END_STREAM)
        stream = self.streams.get(sid)
        if stream is not None:  # trailers
            if stream.remote_closed or not ended:
                code = ErrorCode.STREAM_CLOSED if stream.remote_closed else ErrorCode.PROTOCOL_ERROR
                self._stream_error(sid, code)
                return
            self._remote_end(sid, stream)
            self._events.on_data(sid, _EMPTY, 0, True)
            return
        if sid <= self.highest:  # a stream closed (or refused) before: dropped
            self._out.append(rst_stream(sid, ErrorCode.STREAM_CLOSED))
            return
        self.highest = sid
        if len(self.streams) >= self._max_streams:
            self._out.append(rst_stream(sid, ErrorCode.REFUSED_STREAM))
            return
        stream = self.streams[sid] = _Stream(self._initial_send, self._stream_window)
        stream.remote_closed = ended
        self._events.on_request(sid, headers, ended)

    def _priority(self, flags: int, sid: int, payload: memoryview) -> None:
        if not sid:
            raise H2ConnectionError(ErrorCode.PROTOCOL_ERROR, "PRIORITY on stream 0")
        if len(payload) != 5:
            self._stream_error(sid, ErrorCode.FRAME_SIZE_ERROR)
        elif u32(payload) & _STREAM_MASK == sid:
            self._stream_error(sid, ErrorCode.PROTOCOL_ERROR)  # depends on itself
        # priorities are advice (RFC 9113 deprecates them): nothing else to do

    def _rst_stream(self, flags: int, sid: int, payload: memoryview) -> None:
        if not sid:
            raise H2ConnectionError(ErrorCode.PROTOCOL_ERROR, "RST_STREAM on stream 0")
        if len(payload) != 4:
            raise H2ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "RST_STREAM of bad length")
        self._idle(sid, "RST_STREAM")
        if self.streams.pop(sid, None) is not None:
            self._events.on_reset(sid, u32(payload))

    def _settings(self, flags: int, sid: int, payload: memoryview) -> None:
        if sid:
            raise H2ConnectionError(ErrorCode.PROTOCOL_ERROR, "SETTINGS on a stream")
        if flags & ACK:
            if payload:
                raise H2ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "SETTINGS ACK with a body")
            return
        if len(payload) % 6:
            raise H2ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "SETTINGS of bad length")
        for ident, value in setting_pairs(payload):
            self._setting(ident, value)
        self._out.append(SETTINGS_ACK)
        self._settled = True
        self._events.on_settings()

    def _setting(self, ident: int, value: int) -> None:
        if ident == INITIAL_WINDOW_SIZE:
            if value > MAX_WINDOW:
                raise H2ConnectionError(ErrorCode.FLOW_CONTROL_ERROR, "INITIAL_WINDOW_SIZE")
            delta, self._initial_send = value - self._initial_send, value
            for stream in self.streams.values():
                stream.send_window += delta
                if stream.send_window > MAX_WINDOW:
                    raise H2ConnectionError(ErrorCode.FLOW_CONTROL_ERROR, "a window overflows")
        elif ident == MAX_FRAME_SIZE:
            if not DEFAULT_FRAME_SIZE <= value <= LARGEST_FRAME_SIZE:
                raise H2ConnectionError(ErrorCode.PROTOCOL_ERROR, "MAX_FRAME_SIZE")
            self.send_frame = value
        elif ident == HEADER_TABLE_SIZE:
            self._encoder.table_size_changed()
        elif ident in (ENABLE_PUSH, ENABLE_CONNECT_PROTOCOL) and value > 1:
            raise H2ConnectionError(ErrorCode.PROTOCOL_ERROR, f"SETTINGS {ident} = {value}")
        # MAX_CONCURRENT_STREAMS (we open none), MAX_HEADER_LIST_SIZE (advice), unknown ones

    def _push_promise(self, flags: int, sid: int, payload: memoryview) -> None:
        raise H2ConnectionError(ErrorCode.PROTOCOL_ERROR, "PUSH_PROMISE from a client")

    def _ping(self, flags: int, sid: int, payload: memoryview) -> None:
        if sid:
            raise H2ConnectionError(ErrorCode.PROTOCOL_ERROR, "PING on a stream")
        if len(payload) != 8:
            raise H2ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "PING of bad length")
        if flags & ACK:
            self._events.on_ping_ack(bytes(payload))
            return
        self._out.append(head(8, PING, ACK, 0) + payload)
        self._events.on_ping()

    def _goaway(self, flags: int, sid: int, payload: memoryview) -> None:
        if sid:
            raise H2ConnectionError(ErrorCode.PROTOCOL_ERROR, "GOAWAY on a stream")
        if len(payload) < 8:
            raise H2ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "GOAWAY of bad length")
        last, code = u32(payload) & _STREAM_MASK, u32(payload, 4)
        self._events.on_goaway(last, code, bytes(payload[8:]))

    def _window_update(self, flags: int, sid: int, payload: memoryview) -> None:
        if len(payload) != 4:
            raise H2ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "WINDOW_UPDATE of bad length")
        increment = u32(payload) & _STREAM_MASK
        if not sid:
            if not increment:
                raise H2ConnectionError(ErrorCode.PROTOCOL_ERROR, "WINDOW_UPDATE of 0")
            self._send_conn += increment
            if self._send_conn > MAX_WINDOW:
                raise H2ConnectionError(ErrorCode.FLOW_CONTROL_ERROR, "the window overflows")
            self._events.on_window(0)
            return
        self._idle(sid, "WINDOW_UPDATE")
        stream = self.streams.get(sid)
        if stream is None:
            return  # closed: dropped
        if not increment:
            self._stream_error(sid, ErrorCode.PROTOCOL_ERROR)
            return
        stream.send_window += increment
        if stream.send_window > MAX_WINDOW:
            self._stream_error(sid, ErrorCode.FLOW_CONTROL_ERROR)
            return
        self._events.on_window(sid)

    def _idle(self, sid: int, what: str) -> None:
        """Only HEADERS and PRIORITY may name a stream never opened (§5.1 idle)."""
        if sid > self.highest or not sid & 1:
            raise H2ConnectionError(ErrorCode.PROTOCOL_ERROR, f"{what} on an idle stream")

    # -- stream states -------------------------------------------------------------------------
    def _remote_end(self, sid: int, stream: _Stream) -> None:
        stream.remote_closed = True
        if stream.local_closed:
            del self.streams[sid]

    def _local_end(self, sid: int, stream: _Stream) -> None:
        stream.local_closed = True
        if stream.remote_closed:
            del self.streams[sid]

    def _stream_error(self, sid: int, code: ErrorCode) -> None:
        self._out.append(rst_stream(sid, code))
        if self.streams.pop(sid, None) is not None:
            self._events.on_reset(sid, code)

    # -- flow control, our receiving side -----------------------------------------------------
    def acknowledge(self, sid: int, size: int) -> None:
        """The handler is done with ``size`` received bytes of stream ``sid``: they go back
        to the connection's window, and to the stream's while the peer may still send."""
        self._give_back(size)
        stream = self.streams.get(sid)
        if stream is None or stream.remote_closed:
            return
        stream.unacked += size
        unacked, window = stream.unacked, stream.recv_window
        if unacked >= self._stream_window >> 1 or (not window and unacked):
            stream.unacked = 0
            stream.recv_window = window + unacked
            self._out.append(window_update(sid, unacked))

    def _give_back(self, size: int) -> None:
        unacked = self._conn_unacked = self._conn_unacked + size
        if unacked >= self._conn_max >> 1 or (not self._recv_conn and unacked):
            self._conn_unacked = 0
            self._recv_conn += unacked
            self._out.append(window_update(0, unacked))

    def receive_window(self, sid: int) -> int:
        """What the peer may still send on stream ``sid`` (0 once it may send nothing)."""
        stream = self.streams.get(sid)
        if stream is None or stream.remote_closed:
            return 0
        return min(stream.recv_window, self._recv_conn)

    @property
    def connection_windows(self) -> tuple[int, int]:
        """(what we may send, what the peer may send) on the connection."""
        return self._send_conn, self._recv_conn

    # -- sending -------------------------------------------------------------------------------
    def send_window(self, sid: int) -> int:
        """What may be sent on stream ``sid`` now (0 when it is closed to us)."""
        stream = self.streams.get(sid)
        if stream is None or stream.local_closed:
            return 0
        return max(0, min(stream.send_window, self._send_conn))

    def can_send(self, sid: int) -> bool:
        stream = self.streams.get(sid)
        return stream is not None and not stream.local_closed

    def send_headers(self, sid: int, headers: Headers, end_stream: bool = False) -> None:
        stream = self._writable(sid)
        self._out.append(self._headers_frames(sid, headers, end_stream))
        if end_stream:
            self._local_end(sid, stream)

    def _headers_frames(self, sid: int, headers: Headers, end_stream: bool) -> bytes:
        block = self._encoder.encode(headers)
        if len(block) <= self.send_frame:
            flags = END_HEADERS | END_STREAM if end_stream else END_HEADERS
            return head(len(block), HEADERS, flags, sid) + block
        from .frames import headers as headers_frames  # a block past one frame: rare

        return headers_frames(sid, block, end_stream, self.send_frame)

    def send_data(self, sid: int, data: Buffer, end_stream: bool = False) -> int:
        """As much of ``data`` as the windows allow, in frames of the peer's size; the bytes
        sent. ``end_stream`` ends the stream when all of it went."""
        stream = self._writable(sid)
        size = max(0, min(len(data), stream.send_window, self._send_conn))
        step = self.send_frame
        out = self._out
        ending = end_stream and size == len(data)
        frames = 0
        for at in range(0, size, step):
            count = min(step, size - at)
            flags = END_STREAM if ending and at + count == size else 0
            out.append(head(count, DATA, flags, sid))
            out.append(data if count == len(data) else data[at : at + count])
            frames += 1
        if ending:
            if not frames:
                out.append(head(0, DATA, END_STREAM, sid))
            self._local_end(sid, stream)
        stream.send_window -= size
        self._send_conn -= size
        self.ledger.sent(frames, size)
        return size

    def answer(self, sid: int, headers: Headers, data: Buffer, trailers: Headers) -> bool:
        """A whole answer in one piece: headers, ``data`` in one DATA frame, trailers that
        end the stream; False (nothing done) when ``data`` does not fit one frame or the
        windows."""
        stream = self.streams.get(sid)
        size = len(data)
        if (
            stream is None
            or stream.local_closed
            or size > self.send_frame
            or size > stream.send_window
            or size > self._send_conn
        ):
            return False
        encode = self._encoder.encode
        block, tail = encode(headers), encode(trailers)
        if len(block) > self.send_frame or len(tail) > self.send_frame:
            return False
        self._out.append(
            b"".join(
                (
                    head(len(block), HEADERS, END_HEADERS, sid),
                    block,
                    head(size, DATA, 0, sid),
                    data,
                    head(len(tail), HEADERS, END_HEADERS | END_STREAM, sid),
                    tail,
                )
            )
        )
        stream.send_window -= size
        self._send_conn -= size
        self.ledger.sent(1, size)
        self._local_end(sid, stream)
        return True

    def _writable(self, sid: int) -> _Stream:
        stream = self.streams.get(sid)
        if stream is None or stream.local_closed:
            raise StreamGone(f"stream {sid} is closed")
        return stream

    def reset_stream(self, sid: int, code: int) -> None:
        """RST_STREAM ``code`` on a stream still open (a closed one is left alone)."""
        if self.streams.pop(sid, None) is not None:
            self._out.append(rst_stream(sid, code))

    def ping(self, payload: bytes) -> None:
        self._out.append(head(8, PING, 0, 0) + payload)

    def goaway(self, code: int, last_stream_id: int | None = None, debug: bytes = b"") -> None:
        """GOAWAY: no stream above ``last_stream_id`` (default: the highest seen) will be
        served; the streams at or below it may still be answered."""
        last = self.highest if last_stream_id is None else last_stream_id
        self._out.append(goaway(last, code, debug))

    def close(self, code: int, debug: bytes = b"") -> None:
        """GOAWAY ``code`` and stop reading: the connection ends."""
        if not self.closed:
            self.goaway(code, None, debug)
            self.closed = True

    def has_output(self) -> bool:
        return bool(self._out)

    def take_output(self) -> bytes:
        out = self._out
        if not out:
            return b""
        data = out[0] if len(out) == 1 else b"".join(out)
        out.clear()
        return bytes(data)


def _unpad(payload: memoryview) -> memoryview:
    if not payload:
        raise H2ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "padded frame without pad length")
    end = len(payload) - payload[0]
    if end < 1:
        raise H2ConnectionError(ErrorCode.PROTOCOL_ERROR, "padding longer than the payload")
    return payload[1:end]
