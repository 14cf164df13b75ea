"""Callables bound with ``pool="process"`` in tests/integration/test_pytriton_examples.py: a
spawned process imports them by name, so they live in a module of their own."""

from __future__ import annotations

import os
from typing import Any

import numpy as np


def exits_on_negative(requests: list[Any]) -> list[dict[str, np.ndarray]]:
    """Doubles ``x``; a negative ``x`` ends the process running it (as a crash would)."""
    if float(requests[0]["x"].reshape(-1)[0]) < 0:
        os._exit(3)
    return [{"y": r["x"] * 2} for r in requests]
