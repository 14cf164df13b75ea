"""PyTriton's API served by tritium in the caller's process (``tritium.pytriton``): see
docs/pytriton.md. ``tritium.pytriton.compat.install()`` makes it importable as ``pytriton``
where the real package is not installed."""

from __future__ import annotations

from . import decorators, model_config, triton
from .triton import Triton, TritonConfig

__all__ = ["Triton", "TritonConfig", "decorators", "model_config", "triton"]
