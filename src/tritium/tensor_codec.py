"""Tensor bytes: Triton's BYTES wire format and zero-copy views of fixed-size tensors.

Shared by the front-ends (HTTP binary extension, gRPC raw contents) and the Python backend's
stub protocol, so there is one implementation of the length-prefixed format."""

from __future__ import annotations

import struct
import time
from typing import Final

import numpy as np

from .errors import invalid_arg
from .types import DataType

_U32 = struct.Struct("<I")
_BYTES: Final = DataType.BYTES
# Tensors smaller than this are copied into bytes rather than viewed (raw_bytes, and the
# Python backend's frames: ipc.pack_array): one copy costs less than a memoryview.
COPY_BELOW: Final = 1 << 16


# Elements per step of a long decode: each numpy call or Python loop over one step is short, so
# a decode on a worker thread lets the event loop take the GIL back within milliseconds.
CHUNK = 1 << 16


def let_threads_run() -> None:
    """Give the other threads (the event loop) a turn: called between the steps of a long loop
    that may run on a worker thread. Interpreted code lets the GIL go every switch interval
    by itself, compiled code never does (the interpreter asks between bytecodes, and mypyc's
    loops run none): ``time.sleep(0)`` lets it go and takes it back, and a thread that has
    waited a switch interval takes it meanwhile (about a microsecond when none waits)."""
    time.sleep(0)


def deserialize_bytes(buf: bytes | bytearray | memoryview, name: str) -> list[bytes]:
    """Split Triton's BYTES format: each element is a u32 LE length, then the bytes."""
    items: list[bytes] = bytes_array(buf, name).tolist()
    return items


def bytes_array(
    buf: bytes | bytearray | memoryview, name: str, expected: int | None = None
) -> np.ndarray:
    """The elements of a BYTES buffer as a 1-D object array.

    Elements of one length (a tensor of empty strings, fixed-width ids) are checked and split
    with numpy over the length prefixes; other buffers are scanned in chunks of ``CHUNK``
    elements. With ``expected``, a wrong element count is refused before the array is built,
    and a scan stops as soon as the buffer holds more elements than that."""
    view = memoryview(buf).cast("B") if isinstance(buf, memoryview) else memoryview(buf)
    if len(view) == 0:
        _elements_count(name, 0, expected)
        return np.empty(0, dtype=object)
    uniform = _uniform(view, name, expected)
    return uniform if uniform is not None else _scan(view, name, expected)


def _elements_count(name: str, count: int, expected: int | None, more: bool = False) -> None:
    if expected is not None and (more or count != expected):
        got = f"more than {expected}" if more else str(count)
        raise invalid_arg(
            f"input '{name}' got unexpected elements count {got}, expected {expected}"
        )


def _uniform(view: memoryview, name: str, expected: int | None) -> np.ndarray | None:
    """Split a buffer whose elements all have the first element's length; None otherwise."""
    end = len(view)
    if end < 4:
        return None
    (length,) = _U32.unpack_from(view, 0)
    stride = 4 + length
    if end % stride:
        return None
    count = end // stride
    prefixes = np.ndarray((count,), dtype="<u4", buffer=view, strides=(stride,))
    for start in range(0, count, CHUNK):
        if not (prefixes[start : start + CHUNK] == length).all():
            return None
    _elements_count(name, count, expected)
    if length == 0:
        return empty_strings(count)
    return strided_items(view, count, 4, stride, length)


def strided_items(
    view: memoryview, count: int, offset: int, stride: int, length: int
) -> np.ndarray:
    """``count`` byte strings of ``length`` bytes at ``offset + i * stride`` in ``view``, as an
    object array built ``CHUNK`` elements at a time (short steps off the event loop)."""
    out = np.empty(count, dtype=object)
    for start in range(0, count, CHUNK):
        if start:
            let_threads_run()
        stop = min(start + CHUNK, count)
        first = start * stride + offset
        out[start:stop] = [bytes(view[p : p + length]) for p in range(first, stop * stride, stride)]
    return out


def empty_strings(count: int) -> np.ndarray:
    """``count`` empty strings: one object seen ``count`` times through a read-only view (as
    fixed-size inputs are read-only views of the request), so a tensor of millions of empty
    strings costs neither memory nor a long allocation."""
    return np.broadcast_to(np.array([b""], dtype=object), (count,))


def _scan(view: memoryview, name: str, expected: int | None) -> np.ndarray:
    """Elements of mixed lengths, one chunk of elements at a time."""
    parts: list[np.ndarray] = []
    pos, end, count = 0, len(view), 0
    unpack = _U32.unpack_from
    while pos < end:
        if parts:
            let_threads_run()
        items = []
        for _ in range(CHUNK):
            if pos + 4 > end:
                raise invalid_arg(f"incomplete string length for input '{name}'")
            (n,) = unpack(view, pos)
            pos += 4
            if pos + n > end:
                raise invalid_arg(
                    f"incomplete string data for input '{name}': expected {n} bytes, "
                    f"{end - pos} remain"
                )
            items.append(bytes(view[pos : pos + n]))
            pos += n
            if pos == end:
                break
        count += len(items)
        if expected is not None and count > expected:
            _elements_count(name, count, expected, more=True)
        parts.append(object_array(items, (len(items),)))
    _elements_count(name, count, expected)
    return np.concatenate(parts) if len(parts) > 1 else parts[0]


def serialize_bytes(array: np.ndarray) -> bytes:
    parts = []
    for item in array.reshape(-1):
        if isinstance(item, str):
            item = item.encode("utf-8")
        elif not isinstance(item, (bytes, bytearray)):
            item = str(item).encode("utf-8")
        parts.append(_U32.pack(len(item)))
        parts.append(item)
    return b"".join(parts)


def object_array(items: list[bytes], shape: tuple[int, ...]) -> np.ndarray:
    array = np.empty(len(items), dtype=object)
    array[:] = items
    return array.reshape(shape)


def raw_bytes(array: np.ndarray, datatype: DataType) -> bytes | memoryview:
    """The wire bytes of a tensor: little-endian, row-major, BYTES length-prefixed. A small
    tensor's are a copy (one call; the view of a large one's is three numpy calls)."""
    if datatype is _BYTES:
        return serialize_bytes(array)
    dtype, wanted = array.dtype, datatype.dtype
    if dtype is not wanted and dtype != wanted:
        array = array.astype(wanted)
    if array.nbytes < COPY_BELOW:
        return array.tobytes()  # row-major whatever the strides
    if not array.flags.c_contiguous:
        array = np.ascontiguousarray(array)
    return array.reshape(-1).view(np.uint8).data
