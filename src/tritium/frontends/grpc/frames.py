"""HTTP/2 frames tritium reads or writes itself, beside h2.

- ``FrameSizeGuard`` follows the frame boundaries of what a client sends and stops a frame
  whose header declares more than the frame size we accept, or a header block longer than
  allowed, before h2 would buffer it; it also checks the connection preface, counts the
  frames for the flood ledger and cuts a read into turns of a bounded number of frames.
- ``headers_frame``/``data_frame``/``unary_answer``: response headers, a message, and the
  three frames of a successful unary answer (headers, one DATA frame, ``grpc-status: 0``),
  built from cached header blocks (``GrpcConnection`` advances h2's state to match).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from h2.errors import ErrorCodes
from hyperframe.frame import DataFrame

from .hpack_fast import LiteralEncoder

if TYPE_CHECKING:
    from .budgets import FloodLedger

Buffer = bytes | bytearray | memoryview

# h2 logs ``repr(frame)`` of every frame it receives, eagerly, and a DATA frame's repr
# hex-encodes its whole payload before cutting it to 20 characters: ~10% of the server's CPU
# on a 16 MiB message. The repr is only ever read in debug logs; it now names the size.
DataFrame._body_repr = lambda self: f"data=<{len(self.data)} bytes>"  # type: ignore[attr-defined,method-assign]

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"  # the client connection preface
RESPONSE_HEADERS = [
    (b":status", b"200"),
    (b"content-type", b"application/grpc"),
    (b"grpc-accept-encoding", b"identity,deflate,gzip"),  # no spaces: grpc-js splits on ','
]
_HEADERS, _DATA = b"\x01", b"\x00"
_END_HEADERS, _END_STREAM_HEADERS = b"\x04", b"\x05"
_OK_TRAILERS = LiteralEncoder().encode([(b"grpc-status", b"0")])
_HEADER_BLOCKS: dict[str, bytes] = {}  # response header blocks by grpc-encoding ("": none)


def _frame(kind: bytes, flags: bytes, sid: bytes, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "big") + kind + flags + sid + payload


def headers_frame(stream_id: int, encoding: str | None) -> bytes:
    """The response headers (with ``grpc-encoding`` when the messages are compressed)."""
    key = encoding or ""
    block = _HEADER_BLOCKS.get(key)
    if block is None:
        headers = RESPONSE_HEADERS
        if encoding is not None:
            headers = [*headers, (b"grpc-encoding", encoding.encode())]
        block = _HEADER_BLOCKS[key] = LiteralEncoder().encode(headers)
    return _frame(_HEADERS, _END_HEADERS, stream_id.to_bytes(4, "big"), block)


def data_frame(stream_id: int, data: bytes | memoryview) -> bytes:
    head = len(data).to_bytes(3, "big") + _DATA + b"\x00" + stream_id.to_bytes(4, "big")
    return head + data


def unary_answer(stream_id: int, encoding: str | None, data: bytes) -> bytes:
    """Response headers, ``data`` in one DATA frame, and the OK trailers ending the stream."""
    trailers = _frame(_HEADERS, _END_STREAM_HEADERS, stream_id.to_bytes(4, "big"), _OK_TRAILERS)
    return headers_frame(stream_id, encoding) + data_frame(stream_id, data) + trailers


_HEADER_FRAMES = frozenset({0x1, 0x5, 0x9})  # HEADERS, PUSH_PROMISE, CONTINUATION
_END_HEADERS_FLAG = 0x4


class FrameSizeGuard:
    """Follows the frame boundaries of the bytes a client sends and stops, from the 9-byte
    frame header alone, a frame that declares more than the frame size we accept, and a
    header block (HEADERS + CONTINUATION frames) longer than ``max_block``: h2 buffers a
    frame's whole declared body, and up to 64 CONTINUATION frames, before it checks either.
    Also checks the connection preface, shows each frame header to the ``ledger``
    (``budgets.py:FloodLedger``; ENHANCE_YOUR_CALM once it says the client floods), and cuts
    a read into turns (``scan``)."""

    __slots__ = ("_limit", "_max_block", "_preface", "_skip", "_head", "_block", "ledger")

    def __init__(self, limit: int, max_block: int, ledger: FloodLedger | None = None) -> None:
        self._limit = limit
        self._max_block = max_block
        self._preface = 0  # preface bytes checked so far
        self._skip = 0  # body bytes of the current frame still to come
        self._head = b""
        self._block = 0  # bytes of the header block being received (0: none open)
        self.ledger = ledger

    def check(self, data: bytes) -> int | None:
        """None, or the HTTP/2 error code that ends the connection (all of ``data``)."""
        return self.scan(data, len(data) + 1, len(data))[2]

    def scan(self, data: Buffer, frames: int, size: int) -> tuple[int, int, int | None]:
        """Follows ``data`` until ``frames`` frames have begun (the next one is left for
        later) or about ``size`` bytes went by: how many bytes it took (what h2 gets this
        turn), how many frames began, and None or the HTTP/2 error code that ends the
        connection."""
        pos, end, begun = 0, min(len(data), size), 0
        if self._preface < len(PREFACE):
            pos = min(len(PREFACE) - self._preface, end)
            if data[:pos] != PREFACE[self._preface : self._preface + pos]:
                return pos, begun, ErrorCodes.PROTOCOL_ERROR
            self._preface += pos
        while pos < end:
            if self._skip:
                step = min(self._skip, end - pos)
                self._skip -= step
                pos += step
                continue
            if not self._head:  # a frame begins here
                if begun >= frames:
                    break
                begun += 1
            piece = bytes(data[pos : pos + 9 - len(self._head)])
            self._head += piece
            pos += len(piece)
            if len(self._head) < 9:
                break
            refused = self._frame(self._head)
            if refused is not None:
                return pos, begun, refused
            self._head = b""
        return pos, begun, None

    def _frame(self, head: bytes) -> int | None:
        length = int.from_bytes(head[:3], "big")
        if length > self._limit:
            return ErrorCodes.FRAME_SIZE_ERROR
        if head[3] in _HEADER_FRAMES:
            self._block += length
            if self._block > self._max_block:
                return ErrorCodes.ENHANCE_YOUR_CALM  # an HPACK bomb in the making
            if head[4] & _END_HEADERS_FLAG:
                self._block = 0
        if self.ledger is not None and self.ledger.frame(head):
            return ErrorCodes.ENHANCE_YOUR_CALM  # a control-frame flood
        self._skip = length
        return None
