"""Triton's datatypes (``DataType``), apart from ``types.py`` so that types.py compiles with
mypyc (mypyc does not support an ``Enum`` with its own ``__init__``): this module stays
interpreted in the compiled build; ``tritium.types`` re-exports ``DataType``."""

from __future__ import annotations

import enum

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

    # A member is the one object of its kind (a pickled one comes back as it): hashed by
    # identity in C, not by Enum's own ``__hash__`` (Python code on every lookup keyed by it).
    __hash__ = object.__hash__

    def __init__(self, wire: str, config_name: str, dtype: np.dtype, size: int) -> None:
        self.wire = wire
        self.config_name = config_name
        self.dtype = dtype
        self.size = size

    @classmethod
    def from_wire(cls, name: object) -> DataType | None:
        """The datatype a client names; None for anything else (a JSON object included)."""
        return BY_WIRE.get(name) if isinstance(name, str) else None

    @classmethod
    def from_config(cls, name: str) -> DataType | None:
        return _BY_CONFIG.get(name)

    @classmethod
    def from_numpy(cls, dtype: np.dtype) -> DataType | None:
        if dtype.kind in "OSU":
            return cls.BYTES
        return _BY_NUMPY.get(dtype)


# By wire name: the hot paths look a client's name up here directly (``from_wire`` is a call
# into this interpreted module).
BY_WIRE: dict[str, DataType] = {t.wire: t for t in DataType}
_BY_CONFIG = {t.config_name: t for t in DataType}
_BY_NUMPY: dict[np.dtype, DataType] = {
    t.dtype: t for t in DataType if t is not DataType.BYTES and t is not DataType.BF16
}
if _bfloat16 is not None:
    _BY_NUMPY[DataType.BF16.dtype] = DataType.BF16
