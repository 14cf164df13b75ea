"""HTTP/2 frames (RFC 9113 §4 and §6): types, flags, error codes, the 9-byte header, and the
serialisation of every frame type. ``parse_frame`` cuts one frame off a buffer and checks
what its type fixes about it (lengths, stream 0 or not, padding); the connection
(``connection.py``) reads frames itself on its hot path with the same rules.
"""

from __future__ import annotations

import enum
import struct
from typing import Final, NamedTuple

Buffer = bytes | bytearray | memoryview

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"  # the client connection preface

# Final: constants on the hot path (docs/compiled-code.md)
DATA: Final = 0x0
HEADERS: Final = 0x1
PRIORITY: Final = 0x2
RST_STREAM: Final = 0x3
SETTINGS: Final = 0x4
PUSH_PROMISE: Final = 0x5
PING: Final = 0x6
GOAWAY: Final = 0x7
WINDOW_UPDATE: Final = 0x8
CONTINUATION: Final = 0x9
KNOWN_TYPES: Final = 10  # types 0..9; others are ignored (§4.1, §5.5)

END_STREAM: Final = 0x1
ACK: Final = 0x1
END_HEADERS: Final = 0x4
PADDED: Final = 0x8
PRIORITY_FLAG: Final = 0x20

# SETTINGS identifiers (§6.5.2)
HEADER_TABLE_SIZE, ENABLE_PUSH, MAX_CONCURRENT_STREAMS = 0x1, 0x2, 0x3
INITIAL_WINDOW_SIZE, MAX_FRAME_SIZE, MAX_HEADER_LIST_SIZE = 0x4, 0x5, 0x6
ENABLE_CONNECT_PROTOCOL = 0x8

DEFAULT_FRAME_SIZE = 16384  # SETTINGS_MAX_FRAME_SIZE before SETTINGS say otherwise
LARGEST_FRAME_SIZE = (1 << 24) - 1
DEFAULT_WINDOW = 65535
MAX_WINDOW = (1 << 31) - 1


class ErrorCode(enum.IntEnum):
    NO_ERROR = 0x0
    PROTOCOL_ERROR = 0x1
    INTERNAL_ERROR = 0x2
    FLOW_CONTROL_ERROR = 0x3
    SETTINGS_TIMEOUT = 0x4
    STREAM_CLOSED = 0x5
    FRAME_SIZE_ERROR = 0x6
    REFUSED_STREAM = 0x7
    CANCEL = 0x8
    COMPRESSION_ERROR = 0x9
    CONNECT_ERROR = 0xA
    ENHANCE_YOUR_CALM = 0xB
    INADEQUATE_SECURITY = 0xC
    HTTP_1_1_REQUIRED = 0xD


# length (24 bits, as a byte and 16 bits), type, flags, stream id (with its reserved bit)
HEAD: Final = struct.Struct(">BHBBL")
_U32: Final = struct.Struct(">L")
_TWO_U32: Final = struct.Struct(">LL")
_SETTING: Final = struct.Struct(">HL")
_PRIORITY: Final = struct.Struct(">LB")
_STREAM_MASK: Final = 0x7FFFFFFF


class FrameError(Exception):
    """A frame that breaks its type's rules: ``code`` is the HTTP/2 error it calls for."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class Frame(NamedTuple):
    kind: int
    flags: int
    stream_id: int
    payload: bytes  # the frame's whole payload (padding included)


def head(length: int, kind: int, flags: int, stream_id: int) -> bytes:
    return HEAD.pack(length >> 16, length & 0xFFFF, kind, flags, stream_id)


def frame(kind: int, flags: int, stream_id: int, payload: Buffer = b"") -> bytes:
    return head(len(payload), kind, flags, stream_id) + payload


def data(stream_id: int, payload: Buffer, end_stream: bool = False) -> bytes:
    return frame(DATA, END_STREAM if end_stream else 0, stream_id, payload)


def headers(stream_id: int, block: bytes, end_stream: bool, max_frame: int) -> bytes:
    """A header block as HEADERS and, past ``max_frame``, CONTINUATION frames."""
    flags = END_STREAM if end_stream else 0
    if len(block) <= max_frame:
        return frame(HEADERS, flags | END_HEADERS, stream_id, block)
    pieces = [block[at : at + max_frame] for at in range(0, len(block), max_frame)]
    out = [frame(HEADERS, flags, stream_id, pieces[0])]
    for piece in pieces[1:-1]:
        out.append(frame(CONTINUATION, 0, stream_id, piece))
    out.append(frame(CONTINUATION, END_HEADERS, stream_id, pieces[-1]))
    return b"".join(out)


def priority(stream_id: int, depends_on: int, weight: int, exclusive: bool = False) -> bytes:
    dependency = depends_on | (1 << 31 if exclusive else 0)
    return frame(PRIORITY, 0, stream_id, _PRIORITY.pack(dependency, weight - 1))


def rst_stream(stream_id: int, code: int) -> bytes:
    return frame(RST_STREAM, 0, stream_id, _U32.pack(code))


def settings(values: dict[int, int]) -> bytes:
    return frame(SETTINGS, 0, 0, b"".join(_SETTING.pack(k, v) for k, v in values.items()))


SETTINGS_ACK = frame(SETTINGS, ACK, 0)


def push_promise(stream_id: int, promised: int, block: bytes) -> bytes:
    return frame(PUSH_PROMISE, END_HEADERS, stream_id, _U32.pack(promised) + block)


def ping(payload: bytes, ack: bool = False) -> bytes:
    if len(payload) != 8:
        raise ValueError("a PING carries 8 bytes")
    return frame(PING, ACK if ack else 0, 0, payload)


def goaway(last_stream_id: int, code: int, debug: bytes = b"") -> bytes:
    return frame(GOAWAY, 0, 0, _TWO_U32.pack(last_stream_id, code) + debug)


def window_update(stream_id: int, increment: int) -> bytes:
    return frame(WINDOW_UPDATE, 0, stream_id, _U32.pack(increment))


def continuation(stream_id: int, block: bytes, end_headers: bool = True) -> bytes:
    return frame(CONTINUATION, END_HEADERS if end_headers else 0, stream_id, block)


# -- parsing -----------------------------------------------------------------------------------


def parse_frame(buffer: Buffer, max_frame: int = DEFAULT_FRAME_SIZE) -> tuple[Frame, int] | None:
    """The first frame of ``buffer`` and the bytes it took, or None when it is not all
    there; FrameError when its header or its type's rules are broken."""
    if len(buffer) < 9:
        return None
    high, low, kind, flags, sid = HEAD.unpack_from(buffer, 0)
    length = high << 16 | low
    if length > max_frame:
        raise FrameError(ErrorCode.FRAME_SIZE_ERROR, f"frame of {length} bytes")
    if len(buffer) < 9 + length:
        return None
    result = Frame(kind, flags, sid & _STREAM_MASK, bytes(buffer[9 : 9 + length]))
    check(result)
    return result, 9 + length


_ON_STREAM_ZERO = frozenset({SETTINGS, PING, GOAWAY})
_ON_A_STREAM = frozenset({DATA, HEADERS, PRIORITY, RST_STREAM, PUSH_PROMISE, CONTINUATION})
_FIXED_LENGTH = {PRIORITY: 5, RST_STREAM: 4, PING: 8, WINDOW_UPDATE: 4}


def check(f: Frame) -> None:
    """The rules a frame's type sets on its stream id, length and padding (§6)."""
    if f.kind >= KNOWN_TYPES:
        return
    if f.kind in _ON_STREAM_ZERO and f.stream_id:
        raise FrameError(ErrorCode.PROTOCOL_ERROR, f"frame type {f.kind} on a stream")
    if f.kind in _ON_A_STREAM and not f.stream_id:
        raise FrameError(ErrorCode.PROTOCOL_ERROR, f"frame type {f.kind} on stream 0")
    fixed = _FIXED_LENGTH.get(f.kind)
    if fixed is not None and len(f.payload) != fixed:
        raise FrameError(ErrorCode.FRAME_SIZE_ERROR, f"frame type {f.kind} of bad length")
    if f.kind == SETTINGS and (len(f.payload) % 6 or (f.flags & ACK and f.payload)):
        raise FrameError(ErrorCode.FRAME_SIZE_ERROR, "SETTINGS of bad length")
    if f.kind == GOAWAY and len(f.payload) < 8:
        raise FrameError(ErrorCode.FRAME_SIZE_ERROR, "GOAWAY shorter than 8 bytes")
    if f.kind in (DATA, HEADERS, PUSH_PROMISE):
        unpadded(f.kind, f.flags, f.payload)


def unpadded(kind: int, flags: int, payload: Buffer) -> Buffer:
    """The payload of DATA, HEADERS or PUSH_PROMISE without its padding (and without the
    priority fields of HEADERS, the promised id of PUSH_PROMISE)."""
    start, end = 0, len(payload)
    if flags & PADDED:
        if not end:
            raise FrameError(ErrorCode.FRAME_SIZE_ERROR, "padded frame without a pad length")
        start, end = 1, end - payload[0]
    if kind == HEADERS and flags & PRIORITY_FLAG:
        start += 5
    elif kind == PUSH_PROMISE:
        start += 4
    if end < start:
        raise FrameError(ErrorCode.PROTOCOL_ERROR, "padding longer than the payload")
    return payload[start:end] if start or end != len(payload) else payload


def setting_pairs(payload: Buffer) -> list[tuple[int, int]]:
    return list(_SETTING.iter_unpack(payload))


def u32(payload: Buffer, at: int = 0) -> int:
    value: int = _U32.unpack_from(payload, at)[0]
    return value
