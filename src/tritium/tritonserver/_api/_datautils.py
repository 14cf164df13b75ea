"""Triton's ``tritonserver._api._datautils`` names that do not depend on its C bindings."""

from .._tensor import parse_device_or_memory_type

__all__ = ["parse_device_or_memory_type"]
