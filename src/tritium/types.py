"""Value objects on the request path: datatypes, tensors, requests and responses."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

try:  # tritonclient maps BF16 to ml_dtypes.bfloat16; so do we when it is installed.
    from ml_dtypes import bfloat16 as _bfloat16
except ImportError:  # pragma: no cover - ml_dtypes arrives with tritonclient
    _bfloat16 = None


class DataType(enum.Enum):
    """Triton's datatypes: wire name, config name, numpy dtype, element size (0: variable)."""

    BOOL = ("BOOL", "TYPE_BOOL", np.dtype(np.bool_), 1)
    UINT8 = ("UINT8", "TYPE_UINT8", np.dtype(np.uint8), 1)
    UINT16 = ("UINT16", "TYPE_UINT16", np.dtype(np.uint16), 2)
    UINT32 = ("UINT32", "TYPE_UINT32", np.dtype(np.uint32), 4)
    UINT64 = ("UINT64", "TYPE_UINT64", np.dtype(np.uint64), 8)
    INT8 = ("INT8", "TYPE_INT8", np.dtype(np.int8), 1)
    INT16 = ("INT16", "TYPE_INT16", np.dtype(np.int16), 2)
    INT32 = ("INT32", "TYPE_INT32", np.dtype(np.int32), 4)
    INT64 = ("INT64", "TYPE_INT64", np.dtype(np.int64), 8)
    FP16 = ("FP16", "TYPE_FP16", np.dtype(np.float16), 2)
    FP32 = ("FP32", "TYPE_FP32", np.dtype(np.float32), 4)
    FP64 = ("FP64", "TYPE_FP64", np.dtype(np.float64), 8)
    BF16 = ("BF16", "TYPE_BF16", np.dtype(_bfloat16) if _bfloat16 else np.dtype(np.uint16), 2)
    BYTES = ("BYTES", "TYPE_STRING", np.dtype(np.object_), 0)

    def __init__(self, wire: str, config_name: str, dtype: np.dtype, size: int) -> None:
        self.wire = wire
        self.config_name = config_name
        self.dtype = dtype
        self.size = size

    @classmethod
    def from_wire(cls, name: object) -> DataType | None:
        """The datatype a client names; None for anything else (a JSON object included)."""
        return _BY_WIRE.get(name) if isinstance(name, str) else None

    @classmethod
    def from_config(cls, name: str) -> DataType | None:
        return _BY_CONFIG.get(name)

    @classmethod
    def from_numpy(cls, dtype: np.dtype) -> DataType | None:
        if dtype.kind in "OSU":
            return cls.BYTES
        return _BY_NUMPY.get(dtype)


_BY_WIRE = {t.wire: t for t in DataType}
_BY_CONFIG = {t.config_name: t for t in DataType}
_BY_NUMPY: dict[np.dtype, DataType] = {
    t.dtype: t for t in DataType if t is not DataType.BYTES and t is not DataType.BF16
}
if _bfloat16 is not None:
    _BY_NUMPY[DataType.BF16.dtype] = DataType.BF16


@dataclass(frozen=True, slots=True)
class ShmRef:
    """Where a tensor lives: ``byte_size`` bytes at ``offset`` in shared-memory ``region``."""

    region: str
    offset: int
    byte_size: int


@dataclass(slots=True)
class Tensor:
    """A named tensor. BYTES tensors hold a numpy object array of ``bytes``."""

    name: str
    datatype: DataType
    shape: tuple[int, ...]
    data: np.ndarray
    parameters: dict[str, Any] = field(default_factory=dict)
    shm: ShmRef | None = None  # the data lives in a client's shared-memory region


@dataclass(slots=True)
class RequestedOutput:
    name: str
    parameters: dict[str, Any] = field(default_factory=dict)


class RequestFlag(enum.IntFlag):
    """Triton's request flags (TRITONSERVER_REQUEST_FLAG_*): a sequence's first and last
    request."""

    NONE = 0
    SEQUENCE_START = 1
    SEQUENCE_END = 2


@dataclass(frozen=True, slots=True)
class RequestOptions:
    """What a request's reserved parameters say (priority, timeout, sequence id and flags),
    parsed once by the core with the same rules for every protocol (``parameters.py``)."""

    priority: int = 0
    timeout_us: int = 0  # the request's queue timeout (schedule-policy extension), 0: none
    correlation_id: int | str = 0
    flags: int = 0


_NO_PARAMETERS: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True, eq=False)
class ClientRequest:
    """One inference request as a client sent it, decoded by a front-end's codec: syntax
    only. ``parameters`` are the request's parameters as sent, reserved ones included; the
    core parses them (``InferenceServer.request``). Nothing changes it afterwards: what the
    server does with the request lives in ``request.InferenceRequest``."""

    model_name: str
    model_version: int = -1  # -1: the highest ready version
    id: str = ""
    inputs: tuple[Tensor, ...] = ()
    outputs: tuple[RequestedOutput, ...] = ()
    parameters: Mapping[str, Any] = field(default_factory=lambda: _NO_PARAMETERS)
    uses_shm: bool = False  # an input or requested output names a shared-memory region


@dataclass(slots=True)
class InferenceResponse:
    model_name: str
    model_version: str
    id: str = ""
    outputs: list[Tensor] = field(default_factory=list)
    parameters: dict[str, Any] = field(default_factory=dict)
    error: Exception | None = None
