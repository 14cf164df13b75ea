"""DLPack for what numpy cannot carry: BF16 tensors (DLPack's ``kDLBfloat``, 16 bits).

numpy exports and imports only its own dtypes through DLPack, and bfloat16 is not one of them
(``ml_dtypes.bfloat16`` arrays are refused by ``ndarray.__dlpack__``; ``np.from_dlpack`` of a
``torch.bfloat16`` tensor raises). Triton's Python backend exchanges BF16 tensors with
frameworks through DLPack (``Tensor.to_dlpack`` / ``Tensor.from_dlpack``, the only way to see
them there), so the stub writes the capsule itself with ``ctypes``:

- ``export_bf16(array)``: a ``"dltensor"`` capsule over a C-contiguous 2-byte array's memory
  (a ``DLManagedTensor`` with dtype (kDLBfloat, 16, 1) on the CPU). The array and the shape are
  kept alive until the consumer calls the tensor's deleter, or until the capsule is freed
  unconsumed.
- ``import_bf16(capsule)``: a copy of a consumed BF16 capsule's elements as a uint16 array of
  its shape (any strides), the capsule marked used and its deleter called. ``None`` when the
  capsule holds another dtype (numpy's own import then applies).

Standard library and numpy only (the stub imports it).
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np
import numpy.typing as npt

K_DL_CPU = 1
K_DL_BFLOAT = 4
_NAME = b"dltensor"
_USED = b"used_dltensor"


class _Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _Tensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _Device),
        ("ndim", ctypes.c_int32),
        ("dtype", _DataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _Managed(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(_Managed))
_Managed._fields_ = [
    ("dl_tensor", _Tensor),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", _DELETER),
]
_CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)

_api = ctypes.pythonapi
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, _CAPSULE_DESTRUCTOR]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = [ctypes.c_void_p, ctypes.c_char_p]

# What each exported tensor keeps alive (its struct, array and shape), by the struct's
# address, until its deleter runs.
_LIVE: dict[int, tuple[Any, ...]] = {}


def _forget(managed: Any) -> None:
    _LIVE.pop(ctypes.addressof(managed.contents), None)


def _forget_unconsumed(capsule: int) -> None:
    """A capsule freed while still named "dltensor" was never consumed: delete its tensor."""
    if _api.PyCapsule_IsValid(capsule, _NAME):
        address = _api.PyCapsule_GetPointer(capsule, _NAME)
        _LIVE.pop(address, None)


# The C callbacks (kept as module attributes: ctypes calls them as long as they live).
_delete = _DELETER(_forget)
_free_unconsumed = _CAPSULE_DESTRUCTOR(_forget_unconsumed)


def export_bf16(array: npt.NDArray[Any]) -> Any:
    """A DLPack capsule of ``array`` (C-contiguous, 2-byte elements) as BF16 on the CPU."""
    array = np.ascontiguousarray(array)
    shape = (ctypes.c_int64 * max(array.ndim, 1))(*array.shape)
    managed = _Managed()
    tensor = managed.dl_tensor
    tensor.data = array.ctypes.data if array.size else None
    tensor.device = _Device(K_DL_CPU, 0)
    tensor.ndim = array.ndim
    tensor.dtype = _DataType(K_DL_BFLOAT, 16, 1)
    tensor.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
    tensor.strides = ctypes.POINTER(ctypes.c_int64)()  # NULL: compact, C order
    tensor.byte_offset = 0
    managed.manager_ctx = None
    managed.deleter = _delete
    address = ctypes.addressof(managed)
    _LIVE[address] = (managed, array, shape)
    return _api.PyCapsule_New(address, _NAME, _free_unconsumed)


def import_bf16(capsule: Any) -> npt.NDArray[np.uint16] | None:
    """A copy of a BF16 capsule's elements (uint16, its shape), the capsule consumed; None,
    untouched, for any other dtype."""
    handle = id(capsule)  # the C API's PyObject * (CPython: an object's id is its address)
    if not _api.PyCapsule_IsValid(handle, _NAME):
        return None
    managed = _Managed.from_address(_api.PyCapsule_GetPointer(handle, _NAME))
    tensor = managed.dl_tensor
    if (tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes) != (K_DL_BFLOAT, 16, 1):
        return None
    shape = tuple(tensor.shape[i] for i in range(tensor.ndim))
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if tensor.strides:
        strides = tuple(tensor.strides[i] * 2 for i in range(tensor.ndim))
    else:
        strides = tuple(np.empty(shape, dtype=np.uint16).strides)
    span = _span(shape, strides) if count else 0
    base = (tensor.data or 0) + tensor.byte_offset
    raw = (ctypes.c_uint8 * span).from_address(base) if span else bytearray(0)
    view = np.ndarray(shape, np.uint16, buffer=memoryview(raw), strides=strides)
    out = np.array(view, dtype=np.uint16, order="C")
    _api.PyCapsule_SetName(handle, _USED)
    if managed.deleter:
        managed.deleter(ctypes.pointer(managed))
    return out


def _span(shape: tuple[int, ...], strides: tuple[int, ...]) -> int:
    """Bytes from the first element to the end of the last one (non-negative strides)."""
    if any(s < 0 for s in strides):
        raise ValueError("DLPack tensor with negative strides")
    return sum((d - 1) * s for d, s in zip(shape, strides, strict=True)) + 2
