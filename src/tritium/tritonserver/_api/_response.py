"""Triton's ``tritonserver._api._response`` names."""

from .._response import AsyncResponseIterator, InferenceResponse, ResponseIterator

__all__ = ["AsyncResponseIterator", "InferenceResponse", "ResponseIterator"]
