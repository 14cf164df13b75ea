"""The short fuzz run inside the test suite: a few thousand generated inputs per target,
deterministic, so a failure here reproduces. ``make fuzz`` runs the long, coverage-guided
version; deselect these with ``-m 'not fuzz'``."""

from __future__ import annotations

import os
import sys
import zlib
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fuzz_harness import FuzzFailure, bounded, guarded, hypothesis_runner  # noqa: E402
from fuzz_harness import random_inputs  # noqa: E402
from fuzz_targets import TARGETS  # noqa: E402

pytestmark = pytest.mark.fuzz

INPUTS = int(os.environ.get("FUZZ_SHORT_INPUTS", "5000"))  # per byte target
EXAMPLES = int(os.environ.get("FUZZ_SHORT_EXAMPLES", "1000"))  # per structured target
RAW = [name for name, target in TARGETS.items() if target.raw]
STRUCTURED = [name for name, target in TARGETS.items() if not target.raw]


@pytest.mark.parametrize("name", RAW)
def test_seeds_are_handled(name: str) -> None:
    """The seeds themselves (valid requests and configs) pass every check."""
    target = TARGETS[name]
    for seed in target.seeds:
        with bounded():
            target.check(seed)


@pytest.mark.parametrize("name", RAW)
def test_fuzz_bytes(name: str) -> None:
    """Random bytes and mutated seeds; a failure names the input that caused it."""
    one = guarded(TARGETS[name].check)
    for data in random_inputs(TARGETS[name], INPUTS, zlib.crc32(name.encode())):
        try:
            one(data)
        except BaseException as exc:
            raise FuzzFailure(f"{name} failed on input {data!r}") from exc


@pytest.mark.parametrize("name", STRUCTURED)
def test_fuzz_structured(name: str) -> None:
    """Structured values from hypothesis strategies (shrunk to a minimal one on failure)."""
    hypothesis_runner(TARGETS[name], EXAMPLES, derandomize=True)()
