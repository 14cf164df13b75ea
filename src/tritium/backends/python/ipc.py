"""Framing between the server and a Python-model stub process.

A frame is ``<u32 payload_len><u32 nbuf><u64 len>*nbuf`` + a ``marshal`` payload of plain
values + raw buffers. Tensors never go through pickle: ``pack_array`` turns an array into a
small ``(datatype, shape, buffer index)`` tuple plus its bytes, and ``unpack_array`` makes a
numpy view over the received buffer. One frame is one write and one wake-up.
"""

from __future__ import annotations

import marshal
import select
import socket
import struct
from typing import Any

import numpy as np

from ...tensor_codec import deserialize_bytes, object_array, raw_bytes
from ...types import DataType

_HEAD = struct.Struct("<II")
_SMALL = 1 << 16

# server → stub
AUTOCOMPLETE, INIT, EXECUTE, IS_READY, FINALIZE, CANCEL = range(1, 7)
BLS_RESPONSE, BLS_REPLY = 7, 8  # BLS (bls_client / bls_host): a child's response; a control reply
CALL_REPLY = 40  # observability (stub_observe): the answer to a CALL
# stub → server
REPLY, EXEC_DONE, RESPONSE = range(10, 13)
BLS_REQUEST, BLS_CANCEL, BLS_CONTROL = 13, 14, 15  # BLS: a child request; cancel it; load etc.
OBSERVE, CALL = 41, 42  # observability: logs and metric updates (one-way); a call to the server
# server → stub, one-way (logging extension): the pb_utils.Logger levels now on, as INIT's
# "log_levels" (INFO, WARNING, ERROR, VERBOSE); sent to running stubs when they change.
LOG_LEVELS = 50

Buffers = list[Any]
# The payloads' shapes (marshal keeps tuples). A tensor: (datatype, shape, buffer index).
PackedArray = tuple[str, tuple[int, ...], int]
# A request for ``execute``: id, correlation id, flags, timeout (us), inputs, outputs, parameters.
RequestWire = tuple[str, int | str, int, int, list[tuple[str, PackedArray]], list[str], str]
# One response: (outputs, None, parameters JSON or None), or (None, error message, error code).
ResponseWire = tuple[list[tuple[str, PackedArray]] | None, str | None, Any]
# EXEC_DONE entry of one ``execute``: batch id, error message or None, responses or None.
ExecDone = tuple[int, str | None, list[ResponseWire | None] | None]


# The common case's lookups, done once: a native fixed-size dtype → its wire name, and back.
_WIRE_OF: dict[np.dtype, str] = {
    t.dtype: t.wire for t in DataType if t is not DataType.BYTES and t is not DataType.BF16
}
_DTYPE_OF: dict[str, np.dtype] = {wire: dtype for dtype, wire in _WIRE_OF.items()}
_COPY_BELOW = 1 << 16  # smaller tensors are copied into bytes (cheaper than a memoryview)


def pack_array(array: Any, buffers: Buffers) -> PackedArray:
    """Describe ``array`` in the payload and queue its bytes as an out-of-band buffer."""
    if type(array) is np.ndarray and array.flags.c_contiguous:
        wire = _WIRE_OF.get(array.dtype)
        if wire is not None and array.nbytes < _COPY_BELOW:  # the hot path: one copy, small
            buffers.append(array.tobytes())
            return (wire, array.shape, len(buffers) - 1)
    array = np.asarray(array)
    datatype = DataType.from_numpy(array.dtype)
    if datatype is None:
        raise TypeError(f"unsupported numpy dtype {array.dtype}")
    buffers.append(raw_bytes(array, datatype))
    return (datatype.wire, tuple(array.shape), len(buffers) - 1)


def unpack_array(packed: PackedArray, buffers: Buffers) -> np.ndarray:
    wire, shape, index = packed
    dtype = _DTYPE_OF.get(wire)
    if dtype is not None:  # the hot path: a fixed-size type numpy knows
        return np.frombuffer(buffers[index], dtype=dtype).reshape(shape)
    datatype = DataType.from_wire(wire)
    assert datatype is not None
    buf = buffers[index]
    if datatype is DataType.BYTES:
        return object_array(deserialize_bytes(buf, "tensor"), tuple(shape))
    return np.frombuffer(buf, dtype=datatype.dtype).reshape(shape)


def _nbytes(buf: Any) -> int:
    return len(buf) if isinstance(buf, (bytes, bytearray)) else buf.nbytes


def encode(kind: int, body: Any, buffers: Buffers | None = None) -> list[Any]:
    payload = marshal.dumps((kind, body))
    buffers = buffers or []
    head = _HEAD.pack(len(payload), len(buffers))
    if buffers:
        head += struct.pack(f"<{len(buffers)}Q", *map(_nbytes, buffers))
    return [head, payload, *buffers]


def join(parts: list[Any]) -> list[Any]:
    """Small frames as one bytes object (one write); large ones as they are (no copy)."""
    size = sum(map(_nbytes, parts))
    return [b"".join(parts)] if size < _SMALL else parts


def frame(kind: int, body: Any, buffers: Buffers | None = None) -> list[Any]:
    """``join(encode(...))`` in one pass: the parts of one frame to write."""
    payload = marshal.dumps((kind, body))
    if not buffers:
        return [_HEAD.pack(len(payload), 0) + payload]
    lens = list(map(_nbytes, buffers))
    head = _HEAD.pack(len(payload), len(lens)) + struct.pack(f"<{len(lens)}Q", *lens)
    if sum(lens) + len(payload) < _SMALL:
        return [b"".join((head, payload, *buffers))]
    return [head, payload, *buffers]


class FrameReader:
    """Incremental parser for the asyncio side: feed bytes, take complete frames."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[tuple[int, Any, Buffers]]:
        buf = self._buf
        buf += data
        frames = []
        pos = 0
        size = len(buf)
        while size - pos >= 8:
            plen, nbuf = _HEAD.unpack_from(buf, pos)
            lens_end = pos + 8 + 8 * nbuf
            if size < lens_end:
                break
            lens = struct.unpack_from(f"<{nbuf}Q", buf, pos + 8) if nbuf else ()
            end = lens_end + plen + sum(lens)
            if size < end:
                break
            kind, body = marshal.loads(buf[lens_end : lens_end + plen])
            at = lens_end + plen
            buffers = []
            for n in lens:
                buffers.append(buf[at : at + n])
                at += n
            frames.append((kind, body, buffers))
            pos = end
        if pos:
            del buf[:pos]
        return frames


class BlockingChannel:
    """The stub's side: blocking reads and writes of whole frames.

    Reads go through a buffer so a small frame costs one ``recv`` system call."""

    _CHUNK = 1 << 16

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buf = bytearray()
        self._pos = 0

    def _take(self, n: int) -> bytearray:
        buf = self._buf
        if len(buf) - self._pos < n:
            if self._pos:
                del buf[: self._pos]
                self._pos = 0
            while len(buf) < n:
                chunk = self._sock.recv(max(self._CHUNK, n - len(buf)))
                if not chunk:
                    raise EOFError("server closed the connection")
                buf += chunk
        start = self._pos
        self._pos = start + n
        return buf[start : start + n]

    def recv(self) -> tuple[int, Any, Buffers]:
        plen, nbuf = _HEAD.unpack(self._take(8))
        lens = struct.unpack(f"<{nbuf}Q", self._take(8 * nbuf)) if nbuf else ()
        kind, body = marshal.loads(self._take(plen))
        buffers = [self._take(n) for n in lens]
        return kind, body, buffers

    def fileno(self) -> int:
        return self._sock.fileno()

    def buffered(self) -> bool:
        """Whether bytes already read are waiting in the buffer (a frame, or its start)."""
        return len(self._buf) > self._pos

    def readable(self) -> bool:
        """Whether a frame has (begun to) arrive: ``recv`` would not wait long."""
        if len(self._buf) > self._pos:
            return True
        return bool(select.select([self._sock], [], [], 0)[0])

    def send(self, kind: int, body: Any, buffers: Buffers | None = None) -> None:
        parts = frame(kind, body, buffers)
        if len(parts) == 1:
            self._sock.sendall(parts[0])
        else:
            for part in parts:
                self._sock.sendall(part)
