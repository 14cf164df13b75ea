"""Triton's ``tritonserver._api._memorybuffer`` names."""

from .._enums import MemoryType
from .._tensor import DeviceOrMemoryType, MemoryBuffer

__all__ = ["DeviceOrMemoryType", "MemoryBuffer", "MemoryType"]
