"""Tensor bytes: Triton's BYTES wire format and zero-copy views of fixed-size tensors.

Shared by the front-ends (HTTP binary extension, gRPC raw contents) and the Python backend's
stub protocol, so there is one implementation of the length-prefixed format."""

from __future__ import annotations

import struct

import numpy as np

from .errors import invalid_arg
from .types import DataType

_U32 = struct.Struct("<I")


def deserialize_bytes(buf: bytes | bytearray | memoryview, name: str) -> list[bytes]:
    """Split Triton's BYTES format: each element is a u32 LE length, then the bytes."""
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
                f"incomplete string data for input '{name}': expected {n} bytes, {end - pos} remain"
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


def object_array(items: list[bytes], shape: tuple[int, ...]) -> np.ndarray:
    array = np.empty(len(items), dtype=object)
    array[:] = items
    return array.reshape(shape)


def raw_bytes(array: np.ndarray, datatype: DataType) -> bytes | memoryview:
    """The wire bytes of a tensor: little-endian, row-major, BYTES length-prefixed."""
    if datatype is DataType.BYTES:
        return serialize_bytes(array)
    if array.dtype != datatype.dtype:
        array = array.astype(datatype.dtype)
    if not array.flags.c_contiguous:
        array = np.ascontiguousarray(array)
    return memoryview(array.reshape(-1).view(np.uint8)) if array.size else b""
