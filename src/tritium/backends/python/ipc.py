"""Framing between the server and a Python-model stub process.

A frame is ``<u32 payload_len><u32 nbuf><u64 len>*nbuf`` + a ``marshal`` payload of plain
values + raw buffers. Tensors never go through pickle: ``pack_array`` turns an array into a
small ``(datatype, shape, buffer index)`` tuple plus its bytes, and ``unpack_array`` makes a
numpy view over the received buffer. One frame is one write and one wake-up.

The server reads a stub's frames as untrusted (the model in it may be hostile or broken):
``FrameReader`` refuses a head that declares more than a stub can legitimately send
(``MAX_PAYLOAD_BYTES`` of payload, ``MAX_INLINE_BYTES`` of buffers, ``MAX_BUFFERS``; larger
tensors travel in shared-memory segments, ``shm_tensors``) before buffering anything of it,
and checks a payload that could hold a large tuple or a code object (``check_payload``)
before ``marshal`` builds it: marshal allocates and zero-fills a tuple of the size its data
declares, so 5 bytes could cost gigabytes. The stub checks the same bounds before it sends
(``FrameTooLarge``).
"""

from __future__ import annotations

import marshal
import re
import select
import socket
import struct
from typing import Any, Final

import numpy as np

from ...tensor_codec import COPY_BELOW, deserialize_bytes, object_array, raw_bytes
from ...types import DataType

_HEAD: Final = struct.Struct("<II")
_SMALL: Final = 1 << 16

# What one frame from a stub may hold. The payload carries names, shapes, messages, request
# parameters, logs (``stub_observe`` keeps at most 4 Mi characters waiting) and the files of a
# model loaded from a model (BLS model control); the buffers, tensors below the shared-memory
# threshold, at most MAX_INLINE_BYTES in all (``shm_tensors.FrameTensors`` sends the rest
# through segments).
MAX_PAYLOAD_BYTES: Final = 64 << 20
MAX_INLINE_BYTES: Final = 8 << 20
MAX_BUFFERS: Final = 1 << 16


class MalformedFrame(ValueError):
    """A stub sent what no stub sends: the server stops trusting (and kills) it."""


class FrameTooLarge(ValueError):
    """A frame the stub was about to send is over the bounds the server accepts."""


# server → stub
AUTOCOMPLETE, INIT, EXECUTE, IS_READY, FINALIZE, CANCEL = range(1, 7)
BLS_RESPONSE, BLS_REPLY = 7, 8  # BLS (bls_client / bls_host): a child's response; a control reply
RELEASED = 9  # one-way: segments the server copied out of, back to the stub (shm_tensors)
CALL_REPLY = 40  # observability (stub_observe): the answer to a CALL
# stub → server
REPLY, EXEC_DONE, RESPONSE = range(10, 13)
BLS_REQUEST, BLS_CANCEL, BLS_CONTROL = 13, 14, 15  # BLS: a child request; cancel it; load etc.
READY_REPLY = 16  # the answer to IS_READY, (ok, ready or error): apart from REPLY (its own thread)
INPUTS_FREE = 17  # one-way: input segments the stub is done with, back to the server (shm_tensors)
OBSERVE, CALL = 41, 42  # observability: logs and metric updates (one-way); a call to the server
# server → stub, one-way (logging extension): the pb_utils.Logger levels now on, as INIT's
# "log_levels" (INFO, WARNING, ERROR, VERBOSE); sent to running stubs when they change.
LOG_LEVELS = 50

Buffers = list[Any]
# The payloads' shapes (marshal keeps tuples). A tensor: (datatype, shape, buffer index).
PackedArray = tuple[str, tuple[int, ...], int]
# A request for ``execute``: id, correlation id, flags, timeout (us), inputs, outputs, parameters;
# a large input's ``where`` is (segment name, byte size), a segment the server lent the stub
# (shm_tensors.InputSegments).
RequestWire = tuple[str, int | str, int, int, list[tuple[str, Any]], list[str], str]
# A response's tensor: as PackedArray, but its ``where`` may also be (segment name, byte size)
# for a tensor sent in shared memory (shm_tensors.FrameTensors).
SentArray = tuple[str, tuple[int, ...], Any]
# One response: (outputs, None, parameters JSON or None), or (None, error message, error code).
ResponseWire = tuple[list[tuple[str, SentArray]] | None, str | None, Any]
# EXEC_DONE entry of one ``execute``: batch id, error message or None, responses or None,
# the indices of the requests the model released with RESCHEDULE (to run again).
ExecDone = tuple[int, str | None, list[ResponseWire | None] | None, tuple[int, ...]]
# EXEC_DONE's error of an execution the stub did not run (``not_run``): its requests were all
# cancelled while it waited behind the others of its frame.
NOT_RUN: Final = "\x00not run: cancelled while queued"


def not_run(batch_id: int) -> ExecDone:
    """The EXEC_DONE entry of an execution the stub skipped (``NOT_RUN``)."""
    return (batch_id, NOT_RUN, None, ())


# RESPONSE (a response sender's): batch id, request index, the response or None, final flag.
ResponseFrame = tuple[int, int, ResponseWire | None, bool]


# The common case's lookups, done once: a native fixed-size dtype → its wire name, and back.
_WIRE_OF: Final[dict[np.dtype, str]] = {
    t.dtype: t.wire for t in DataType if t is not DataType.BYTES and t is not DataType.BF16
}
_DTYPE_OF: Final[dict[str, np.dtype]] = {wire: dtype for dtype, wire in _WIRE_OF.items()}


def pack_array(array: Any, buffers: Buffers) -> PackedArray:
    """Describe ``array`` in the payload and queue its bytes as an out-of-band buffer."""
    if type(array) is np.ndarray:
        wire = _WIRE_OF.get(array.dtype)
        if wire is not None and array.nbytes < COPY_BELOW:  # the hot path: one copy, small
            buffers.append(array.tobytes())  # in C order, whatever the array's strides
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
        # One array over the received bytes (frombuffer then reshape makes two); numpy
        # refuses a buffer too small for the shape, and one too large is refused here.
        buf = buffers[index]
        array = np.ndarray(shape, dtype, buf)
        if array.nbytes != _nbytes(buf):
            raise ValueError(f"a {wire} tensor of shape {shape} sent with {_nbytes(buf)} bytes")
        return array
    datatype = DataType.from_wire(wire)
    if datatype is None:
        raise ValueError(f"unknown datatype '{wire}'")
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


def check_size(payload_bytes: int, buffers: Buffers | tuple[()]) -> None:
    """Raise ``FrameTooLarge`` for a frame the server would refuse (the stub's side)."""
    if payload_bytes > MAX_PAYLOAD_BYTES:
        raise FrameTooLarge(
            f"{payload_bytes} bytes of metadata in one message (at most {MAX_PAYLOAD_BYTES})"
        )
    if not buffers:
        return
    inline = sum(map(_nbytes, buffers))
    if len(buffers) > MAX_BUFFERS or inline > MAX_INLINE_BYTES:
        raise FrameTooLarge(
            f"{len(buffers)} tensors of {inline} bytes in one message (at most "
            f"{MAX_BUFFERS} of {MAX_INLINE_BYTES} bytes in all outside shared memory)"
        )


Frame = tuple[int, Any, Buffers]


class FrameReader:
    """Incremental parser for the asyncio side: feed bytes, take complete frames.

    The frames come from a stub, so they are checked: once one is malformed, ``error`` says
    why and nothing more is read (the buffer is dropped)."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self.error: str | None = None

    def feed(self, data: bytes) -> list[Frame]:
        """The frames ``data`` completed (those before a malformed one, if any)."""
        if self.error is not None:
            return []
        buf = self._buf
        buf += data
        frames: list[Frame] = []
        pos = 0
        size = len(buf)
        try:
            while size - pos >= 8:
                plen, nbuf = _HEAD.unpack_from(buf, pos)
                if plen > MAX_PAYLOAD_BYTES or nbuf > MAX_BUFFERS:
                    raise MalformedFrame(_head_problem(plen, nbuf))
                lens_end = pos + 8 + 8 * nbuf
                if size < lens_end:
                    break
                lens = struct.unpack_from(f"<{nbuf}Q", buf, pos + 8) if nbuf else ()
                inline = sum(lens)
                if inline > MAX_INLINE_BYTES:
                    raise MalformedFrame(
                        f"a frame declares {inline} bytes of buffers, more than {MAX_INLINE_BYTES}"
                    )
                end = lens_end + plen + inline
                if size < end:
                    break
                frames.append(_decode(buf, lens_end, plen, lens))
                pos = end
        except MalformedFrame as exc:
            self.error = str(exc)
            self._buf = bytearray()
            return frames
        if pos:
            del buf[:pos]
        return frames


def _head_problem(plen: int, nbuf: int) -> str:
    if plen > MAX_PAYLOAD_BYTES:
        return f"a frame declares a {plen}-byte payload, more than {MAX_PAYLOAD_BYTES}"
    return f"a frame declares {nbuf} buffers, more than {MAX_BUFFERS}"


def _decode(buf: bytearray, at: int, plen: int, lens: tuple[int, ...]) -> Frame:
    end = at + plen
    if _RISKY.search(buf, at, end) is not None:  # the common frame has none of those bytes
        check_payload(buf, at, end)
    try:
        kind, body = marshal.loads(buf[at:end])
    except (ValueError, EOFError, TypeError, OverflowError, MemoryError) as exc:
        raise MalformedFrame(f"a frame's payload does not decode: {exc}") from None
    if type(kind) is not int:
        raise MalformedFrame("a frame's kind is not an integer")
    buffers = []
    for n in lens:
        buffers.append(buf[end : end + n])
        end += n
    return kind, body, buffers


# ``check_payload``: what each marshal type code (without its FLAG_REF bit) is followed by.
_FIXED: Final = 0
_SIZED: Final = 1
_SHORT: Final = 2
_LONG: Final = 3
_SEQ: Final = 4
_SMALL_TUPLE: Final = 5
_DICT: Final = 6
_NULL: Final = 7
_SKIP: Final[dict[int, int]] = {}  # _FIXED codes: how many bytes follow
_CODES: Final[list[int | None]] = [None] * 128
for _code, _skip in (("N", 0), ("F", 0), ("T", 0), (".", 0), ("S", 0), ("i", 4), ("g", 8),
                     ("y", 16), ("r", 4)):  # fmt: skip
    _CODES[ord(_code)] = _FIXED
    _SKIP[ord(_code)] = _skip
for _code in "suatA":  # bytes and str: a u32 length, then the data
    _CODES[ord(_code)] = _SIZED
for _code in "zZ":  # short ASCII str: a u8 length
    _CODES[ord(_code)] = _SHORT
for _code in "([<>":  # tuple, list, set, frozenset: a u32 count of objects
    _CODES[ord(_code)] = _SEQ
_CODES[ord("l")] = _LONG  # a big int: a signed i32 count of 15-bit digits (2 bytes each)
_CODES[ord(")")] = _SMALL_TUPLE  # a u8 count
_CODES[ord("{")] = _DICT  # keys and values until NULL
_CODES[ord("0")] = _NULL
# The bytes that start a tuple of more than 255 items or a code object (with and without
# FLAG_REF): the only objects whose allocation marshal does not bound by the data it has
# (lists are calloc'ed, never touched; strings and bytes are checked against the data left,
# small tuples hold at most 255). A payload without any of them needs no ``check_payload``.
_RISKY: Final = re.compile(b"[\x28\xa8\x63\xe3]")
_U32: Final = struct.Struct("<I").unpack_from
_I32: Final = struct.Struct("<i").unpack_from


def check_payload(data: bytes | bytearray, pos: int, end: int) -> None:
    """Raise ``MalformedFrame`` unless ``data[pos:end]`` is exactly one marshal object made
    of plain values (no code objects) whose every container holds the objects it declares.

    ``marshal.loads`` allocates a tuple of the declared count before reading its items (and
    zero-fills it), so a hostile payload could make the server touch 16 GiB with 5 bytes;
    here a count larger than the bytes left is refused before marshal sees it."""
    todo = [1]  # per open container, objects still to read (-1: a dict, until NULL)
    codes = _CODES
    while todo:
        left = todo[-1]
        if left == 0:
            todo.pop()
            continue
        if pos >= end:
            raise MalformedFrame("a frame's payload ends inside an object")
        code = data[pos] & 0x7F  # without FLAG_REF
        what = codes[code]
        pos += 1
        if left > 0:
            todo[-1] = left - 1
        elif what == _NULL:
            todo.pop()
            continue
        pos = _skip_object(data, pos, end, what, code, todo)
    if pos != end:
        raise MalformedFrame("a frame's payload has bytes after its object")


def _skip_object(
    data: bytes | bytearray,
    pos: int,
    end: int,
    what: int | None,
    code: int,
    todo: list[int],
) -> int:
    """Step over one object's own bytes (a container's items are pushed on ``todo``)."""
    if what == _FIXED:
        pos += _SKIP[code]
    elif what == _SIZED and pos + 4 <= end:
        pos += 4 + _U32(data, pos)[0]
    elif what == _SHORT and pos < end:
        pos += 1 + data[pos]
    elif what == _SEQ and pos + 4 <= end:
        count = _U32(data, pos)[0]
        pos += 4
        if count > end - pos:
            raise MalformedFrame(f"a frame's payload declares {count} objects in fewer bytes")
        todo.append(count)
    elif what == _SMALL_TUPLE and pos < end:
        todo.append(data[pos])
        pos += 1
    elif what == _DICT:
        todo.append(-1)
    elif what == _LONG and pos + 4 <= end:
        pos += 4 + 2 * abs(_I32(data, pos)[0])
    else:
        raise MalformedFrame(f"a frame's payload holds what no stub sends (type {code:#x})")
    if pos > end:
        raise MalformedFrame("a frame's payload ends inside an object")
    return pos


class BlockingChannel:
    """The stub's side: blocking reads and writes of whole frames.

    Reads go through a buffer so a small frame costs one ``recv`` system call. A read that
    must wait first waits in ``poll`` for input: a thread asleep in ``recv`` on a Unix
    socket is also woken each time the server reads a frame it sent (the kernel's
    write-space wake-up, on the same wait queue) and goes back to sleep, a second wake-up
    per request; ``poll`` asks for input only, so an answer costs the stub one wake-up."""

    _CHUNK = 1 << 16

    def __init__(self, sock: socket.socket, checked: bool = True) -> None:
        self._sock = sock
        self._checked = checked  # False: a forked child's link to its stub (stub_fork)
        self._buf = bytearray()
        self._pos = 0
        self._poll: Any = None
        if hasattr(select, "poll"):  # not everywhere (the stub may run on any interpreter)
            self._poll = select.poll()
            self._poll.register(sock.fileno(), select.POLLIN)

    def _recv(self, size: int) -> bytes:
        if self._poll is not None:
            timeout = self._sock.gettimeout()
            self._poll.poll(None if timeout is None else timeout * 1000)
        return self._sock.recv(size)

    def _take(self, n: int) -> bytearray:
        buf = self._buf
        if len(buf) - self._pos < n:
            if self._pos:
                del buf[: self._pos]
                self._pos = 0
            while len(buf) < n:
                chunk = self._recv(max(self._CHUNK, n - len(buf)))
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

    def close(self) -> None:
        self._sock.close()

    def buffered(self) -> bool:
        """Whether bytes already read are waiting in the buffer (a frame, or its start)."""
        return len(self._buf) > self._pos

    def readable(self) -> bool:
        """Whether a frame has (begun to) arrive: ``recv`` would not wait long."""
        if len(self._buf) > self._pos:
            return True
        return bool(select.select([self._sock], [], [], 0)[0])

    def send(self, kind: int, body: Any, buffers: Buffers | None = None) -> None:
        """Send one frame; ``FrameTooLarge`` (nothing sent) when the server would refuse it."""
        parts = frame(kind, body, buffers)
        if self._checked:
            check_size(_HEAD.unpack_from(parts[0])[0], buffers or ())
        if len(parts) == 1:
            self._sock.sendall(parts[0])
        else:
            for part in parts:
                self._sock.sendall(part)
