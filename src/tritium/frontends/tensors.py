"""Tensor bytes shared by both front-ends: raw buffers ↔ numpy, BYTES length prefixes."""

from __future__ import annotations

from math import prod
from typing import Any

import numpy as np

from ..errors import invalid_arg
from ..tensor_codec import deserialize_bytes, object_array, raw_bytes, serialize_bytes
from ..types import DataType, ShmRef, Tensor

__all__ = [
    "shm_tensor",
    "deserialize_bytes",
    "serialize_bytes",
    "tensor_bytes",
    "tensor_from_buffer",
    "parse_shape",
]


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
        return Tensor(name, datatype, shape, object_array(items, shape))
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
    """The wire bytes of an output tensor."""
    return raw_bytes(tensor.data, tensor.datatype)


def parse_shape(value: object, name: str) -> tuple[int, ...]:
    if not isinstance(value, (list, tuple)) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in value
    ):
        raise invalid_arg(
            f"unable to parse 'shape' for input '{name}': expected a list of non-negative integers"
        )
    return tuple(value)


_NO_DATA = np.empty(0, dtype=np.uint8)


def shm_tensor(
    name: str, datatype: DataType, shape: tuple[int, ...], params: dict[str, Any]
) -> Tensor:
    """An input whose data is in a shared-memory region; the server maps it."""
    try:
        ref = ShmRef(
            str(params["shared_memory_region"]),
            int(params.get("shared_memory_offset", 0)),
            int(params["shared_memory_byte_size"]),
        )
    except (KeyError, TypeError, ValueError):
        raise invalid_arg(
            f"input '{name}' in shared memory must specify 'shared_memory_region' and "
            "'shared_memory_byte_size'"
        ) from None
    return Tensor(name, datatype, shape, _NO_DATA, shm=ref)
