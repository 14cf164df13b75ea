"""Triton's enumerations of the in-process API, with the C API's values
(``TRITONSERVER_DataType``, ``TRITONSERVER_MemoryType``, ... as Triton's ``tritonserver``
package exposes them), and their tritium equivalents."""

from __future__ import annotations

import enum
from typing import Final

from ..datatypes import DataType as _Wire


class DataType(enum.IntEnum):
    """``TRITONSERVER_DataType``."""

    INVALID = 0
    BOOL = 1
    UINT8 = 2
    UINT16 = 3
    UINT32 = 4
    UINT64 = 5
    INT8 = 6
    INT16 = 7
    INT32 = 8
    INT64 = 9
    FP16 = 10
    FP32 = 11
    FP64 = 12
    BYTES = 13
    BF16 = 14


class MemoryType(enum.IntEnum):
    """``TRITONSERVER_MemoryType``: tritium's tensors are always in CPU memory."""

    CPU = 0
    CPU_PINNED = 1
    GPU = 2


class DLDeviceType(enum.IntEnum):
    """DLPack's device types (the ones Triton names)."""

    kDLCPU = 1
    kDLCUDA = 2
    kDLCUDAHost = 3
    kDLOpenCL = 4
    kDLVulkan = 7
    kDLMetal = 8
    kDLVPI = 9
    kDLROCM = 10
    kDLROCMHost = 11
    kDLExtDev = 12
    kDLCUDAManaged = 13
    kDLOneAPI = 14
    kDLWebGPU = 15
    kDLHexagon = 16


class ModelControlMode(enum.IntEnum):
    NONE = 0
    POLL = 1
    EXPLICIT = 2


class RateLimitMode(enum.IntEnum):
    OFF = 0
    EXEC_COUNT = 1


class LogFormat(enum.IntEnum):
    DEFAULT = 0
    ISO8601 = 1


class LogLevel(enum.IntEnum):
    INFO = 0
    WARN = 1
    ERROR = 2
    VERBOSE = 3


class MetricFormat(enum.IntEnum):
    PROMETHEUS = 0


class MetricKind(enum.IntEnum):
    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 2


class InstanceGroupKind(enum.IntEnum):
    AUTO = 0
    CPU = 1
    GPU = 2
    MODEL = 3


class ModelBatchFlag(enum.IntFlag):
    UNKNOWN = 1
    FIRST_DIM = 2


class ModelTxnPropertyFlag(enum.IntFlag):
    ONE_TO_ONE = 1
    DECOUPLED = 2


# Triton's data types <-> tritium's (types.py's DataType, which carries the numpy dtype).
TO_WIRE: Final[dict[DataType, _Wire]] = {DataType[member.name]: member for member in _Wire}
FROM_WIRE: Final[dict[_Wire, DataType]] = {wire: ours for ours, wire in TO_WIRE.items()}
CONTROL_MODES: Final[dict[ModelControlMode, str]] = {
    ModelControlMode.NONE: "none",
    ModelControlMode.POLL: "poll",
    ModelControlMode.EXPLICIT: "explicit",
}
