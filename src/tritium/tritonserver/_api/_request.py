"""Triton's ``tritonserver._api._request`` names."""

from .._request import InferenceRequest

__all__ = ["InferenceRequest"]
