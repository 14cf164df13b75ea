"""Tensor bytes shared by both front-ends: raw buffers ↔ numpy, BYTES length prefixes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Final, TypeVar

import numpy as np

from ..errors import invalid_arg
from ..tensor_codec import bytes_array, deserialize_bytes, raw_bytes, serialize_bytes
from ..types import DataType, ShmRef, Tensor

__all__ = [
    "OFFLOAD_BYTES",
    "decode_off_loop",
    "shm_tensor",
    "deserialize_bytes",
    "serialize_bytes",
    "tensor_bytes",
    "tensor_from_buffer",
    "parse_shape",
]


# Requests larger than this are decoded on a worker thread: their decode is cut into short steps
# (see tensor_codec.CHUNK), so the event loop takes the GIL back between steps and keeps
# answering every other client; smaller ones are decoded in place (a thread hop costs more).
OFFLOAD_BYTES = 1 << 20

_T = TypeVar("_T")


async def decode_off_loop(size: int, decode: Callable[..., _T], *args: Any) -> _T:
    """``decode(*args)``: in place for a small request, on a worker thread for a large one."""
    if size <= OFFLOAD_BYTES:
        return decode(*args)
    return await asyncio.to_thread(decode, *args)


def element_count(shape: tuple[int, ...]) -> int:
    """The number of elements of ``shape`` (``math.prod``, as a loop the compiled build runs
    without a call)."""
    count = 1
    for dim in shape:
        count *= dim
    return count


def tensor_from_buffer(
    name: str, datatype: DataType, shape: tuple[int, ...], buf: bytes | memoryview, model: str
) -> Tensor:
    """A tensor over ``buf`` (zero-copy for fixed-size types); sizes are checked."""
    count = element_count(shape)
    if datatype is DataType.BYTES:
        array = bytes_array(buf, name, count)
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
    """The wire bytes of an output tensor."""
    return raw_bytes(tensor.data, tensor.datatype)


# numpy refuses an array whose dimensions multiply past this, even with a zero among them.
MAX_SHAPE_PRODUCT: Final = 1 << 62
# How many entries one inference request may carry, whatever its size on the wire (an empty
# gRPC entry is 2 bytes, and each would become objects): the front-ends refuse a request past
# these before building its entries (gRPC: wire.py counts them on its first walk over the
# bytes). Inputs past the model's own count are then refused by the model (Triton's "expected
# N inputs but got M"). MAX_RANK is numpy's own bound before numpy 2 (NPY_MAXDIMS, 64 since):
# an array cannot have more dimensions.
MAX_TENSORS: Final = 1024  # inputs; requested outputs
MAX_PARAMETERS: Final = 128  # entries of one parameters map
MAX_RANK: Final = 32  # dimensions of one shape


def too_many(what: str, limit: int) -> Exception:
    """The INVALID_ARG of a request with more than ``limit`` of ``what``."""
    return invalid_arg(f"more than {limit} {what} in one request")


def rank_error(name: str) -> Exception:
    return invalid_arg(
        f"unable to parse 'shape' for input '{name}': more than {MAX_RANK} dimensions"
    )


def parse_shape(value: object, name: str) -> tuple[int, ...]:
    if isinstance(value, list) and len(value) > MAX_RANK:
        raise rank_error(name)
    if not isinstance(value, (list, tuple)) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in value
    ):
        raise invalid_arg(
            f"unable to parse 'shape' for input '{name}': expected a list of non-negative integers"
        )
    return check_shape(tuple(value), name)


def check_shape(shape: tuple[int, ...], name: str) -> tuple[int, ...]:
    """A shape no array can have (negative, or dimensions whose product overflows, a zero
    among them or not) is INVALID_ARG before anything is allocated, and so is one of more
    than ``MAX_RANK`` dimensions."""
    if len(shape) > MAX_RANK:
        raise rank_error(name)
    product = 1
    for dim in shape:
        if dim < 0:
            raise invalid_arg(f"unable to parse 'shape' for input '{name}': negative dimension")
        product *= dim or 1
        if product > MAX_SHAPE_PRODUCT:
            raise invalid_arg(
                f"unable to parse 'shape' for input '{name}': the dimensions {list(shape)} "
                "describe more elements than any tensor can hold"
            )
    return shape


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


def numeric_array(values: Any, datatype: DataType, name: str) -> np.ndarray:
    """``values`` (a list of numbers, or an array of them) as ``datatype``'s dtype.

    Numbers are checked at full width first, so an integer out of the type's range (INT8
    1000) and a fractional number for an integer type are refused with INVALID_ARG instead of
    wrapping, truncating or surfacing numpy's OverflowError."""
    target = datatype.dtype
    if len(values) == 0:
        return np.empty(0, dtype=target)
    small = _small_integers(values, datatype, name)
    if small is not None:
        return small
    if not isinstance(values, np.ndarray) and target.kind in "iu":
        try:  # int64 or uint64 when every value is an integer within 64 bits: checked below
            array = np.asarray(values)
        except (ValueError, OverflowError, TypeError):
            array = np.asarray(values, dtype=object)
        if array.dtype.kind in "iu":
            return numeric_array(array, datatype, name)
        if not all(type(v) is int for v in values):
            raise _bad_data(name, datatype, "expected integers")
        _check_range(min(values), max(values), datatype, name)
        return np.array(values, dtype=target)
    try:
        array = values if isinstance(values, np.ndarray) else np.asarray(values)
    except (ValueError, OverflowError, TypeError) as exc:
        raise _bad_data(name, datatype, str(exc)) from None
    kind = array.dtype.kind
    if datatype is DataType.BOOL:
        if kind != "b":
            raise _bad_data(name, datatype, "expected booleans")
        return array.astype(np.bool_, copy=False)
    if kind not in "iuf" or (target.kind in "iu" and kind == "f"):
        what = "integers" if target.kind in "iu" else "numbers"
        raise _bad_data(name, datatype, f"expected {what}")
    if target.kind in "iu" and array.size:
        _check_range(array.min(), array.max(), datatype, name)
    return array.astype(target, copy=False)


# Integer datatypes' ranges, and the list length up to which plain Python checks them faster
# than numpy's reductions.
_INT_BOUNDS: Final[dict[DataType, tuple[int, int]]] = {
    t: (int(np.iinfo(t.dtype).min), int(np.iinfo(t.dtype).max))
    for t in DataType
    if t.dtype.kind in "iu" and t is not DataType.BF16
}
_SMALL: Final = 256


def _small_integers(values: Any, datatype: DataType, name: str) -> np.ndarray | None:
    """The common small request (a short list of ints for an integer type), checked in plain
    Python; None for anything else. One loop checks the types and finds the extremes (compiled,
    a few nanoseconds per value; ``all``, ``min`` and ``max`` were three passes)."""
    bounds = _INT_BOUNDS.get(datatype)
    if bounds is None or type(values) is not list or len(values) > _SMALL:
        return None
    items: list[Any] = values
    low = high = 0
    for value in items:
        if type(value) is not int:
            return None
        number: int = value
        if number < low:
            low = number
        elif number > high:
            high = number
    if low < bounds[0] or high > bounds[1]:
        _check_range(low, high, datatype, name)
    return np.array(items, dtype=datatype.dtype)


def _check_range(low: Any, high: Any, datatype: DataType, name: str) -> None:
    info = np.iinfo(datatype.dtype)
    if low < info.min or high > info.max:
        bad = low if low < info.min else high
        raise _bad_data(name, datatype, f"value {bad} is out of range [{info.min}, {info.max}]")


def _bad_data(name: str, datatype: DataType, why: str) -> Exception:
    return invalid_arg(f"unable to parse 'data' for input '{name}' as {datatype.wire}: {why}")
