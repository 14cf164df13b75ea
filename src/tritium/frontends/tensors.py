"""Tensor bytes shared by both front-ends: raw buffers ↔ numpy, BYTES length prefixes."""

from __future__ import annotations

import struct
from math import prod

import numpy as np

from ..errors import invalid_arg
from ..types import DataType, Tensor

_U32 = struct.Struct("<I")


def deserialize_bytes(buf: bytes | memoryview, name: str) -> list[bytes]:
    """Split Triton's BYTES wire format: each element is a u32 LE length then the bytes."""
    view = memoryview(buf)
    out = []
    pos, end = 0, len(view)
    while pos < end:
        if pos + 4 > end:
            raise invalid_arg(f"incomplete string length for input '{name}'")
        (n,) = _U32.unpack_from(view, pos)
        pos += 4
        if pos + n > end:
            raise invalid_arg(
                f"incomplete string data for input '{name}': expected {n} bytes, "
                f"{end - pos} remain"
            )
        out.append(bytes(view[pos : pos + n]))
        pos += n
    return out


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


def tensor_from_buffer(
    name: str, datatype: DataType, shape: tuple[int, ...], buf: bytes | memoryview, model: str
) -> Tensor:
    """A tensor over ``buf`` (zero-copy for fixed-size types); sizes are checked."""
    count = prod(shape)
    if datatype is DataType.BYTES:
        items = deserialize_bytes(buf, name)
        if len(items) != count:
            raise invalid_arg(
                f"input '{name}' got unexpected elements count {len(items)}, expected {count}"
            )
        array = np.empty(count, dtype=object)
        array[:] = items
        return Tensor(name, datatype, shape, array.reshape(shape))
    expected = count * datatype.size
    size = len(buf) if isinstance(buf, bytes) else buf.nbytes
    if size != expected:
        raise invalid_arg(
            f"input byte size mismatch for input '{name}' for model '{model}'. "
            f"Expected {expected}, got {size}"
        )
    array = np.frombuffer(buf, dtype=datatype.dtype).reshape(shape)
    return Tensor(name, datatype, shape, array)


def tensor_bytes(tensor: Tensor) -> bytes | memoryview:
    """The wire bytes of an output: little-endian, row-major, BYTES length-prefixed."""
    data = tensor.data
    if tensor.datatype is DataType.BYTES:
        return serialize_bytes(data)
    if data.dtype != tensor.datatype.dtype:
        data = data.astype(tensor.datatype.dtype)
    if not data.flags.c_contiguous:
        data = np.ascontiguousarray(data)
    return memoryview(data.reshape(-1).view(np.uint8)) if data.size else b""


def parse_shape(value: object, name: str) -> tuple[int, ...]:
    if not isinstance(value, (list, tuple)) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in value
    ):
        raise invalid_arg(
            f"unable to parse 'shape' for input '{name}': expected a list of non-negative integers"
        )
    return tuple(value)
