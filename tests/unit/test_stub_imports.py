"""What a Python stub imports before its model does (issue 43, memory at rest): asyncio, and
ssl with it, only with a model's first coroutine (``stub_loop``); the stub zygote imports it
once for all the stubs it forks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import tritium

SRC = str(Path(tritium.__file__).resolve().parents[1])  # the tree under test
_PROBE = """\
import sys, importlib
importlib.import_module(sys.argv[1])
print(",".join(m for m in ("asyncio", "ssl", "concurrent.futures") if m in sys.modules))
"""


def _imported(module: str) -> str:
    env = {**os.environ, "PYTHONPATH": SRC}
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, module], env=env, capture_output=True, text=True, check=True
    )
    return out.stdout.strip()


def test_a_spawned_stub_imports_no_asyncio_nor_ssl() -> None:
    assert _imported("tritium.backends.python.stub") == ""


def test_the_zygote_imports_asyncio_once_for_its_stubs() -> None:
    assert "asyncio" in _imported("tritium.backends.python.stub_zygote").split(",")
