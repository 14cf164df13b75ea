"""Triton's ``tritonserver._api._tensor`` names."""

from .._enums import DataType, MemoryType
from .._tensor import Tensor

__all__ = ["DataType", "MemoryType", "Tensor"]
