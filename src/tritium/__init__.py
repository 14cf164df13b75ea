"""tritium: a Python inference server, wire-compatible with NVIDIA Triton Inference Server.

Also which build runs: the compiled modules (mypyc, see setup.py) or pure Python. A compiled
build ships ``_native.json`` beside this file: the compiled modules and the SHA-256 of the
source each was compiled from. ``_guard()`` (run here, before any other tritium module is
imported) keeps the compiled modules only when every one of them still matches its ``.py``;
otherwise (a source edited after an editable install), or when ``TRITIUM_PURE_PYTHON`` is set
at run time, a finder placed first on ``sys.meta_path`` imports each of them from its
``.py``: all of them, never a mix, since compiled modules call each other natively. Standard
library only: the Python stub process imports this package too.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from . import _lazy_client

PURE_ENV = "TRITIUM_PURE_PYTHON"
_MANIFEST = Path(__file__).with_name("_native.json")
_PACKAGE_ROOT = Path(__file__).parent


class SourceFinder(importlib.abc.MetaPathFinder):
    """Imports the named modules from their ``.py``, whatever extension sits beside it."""

    def __init__(self, names: frozenset[str]) -> None:
        self.names = names

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.names:
            return None
        source = _source(fullname)
        return importlib.util.spec_from_file_location(fullname, source) if source else None


def _source(module: str) -> Path | None:
    path = _PACKAGE_ROOT.joinpath(*module.split(".")[1:]).with_suffix(".py")
    return path if path.is_file() else None


def _manifest() -> dict[str, str]:
    """Compiled module → SHA-256 of its source at build time; {} for a pure build."""
    try:
        data = json.loads(_MANIFEST.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    modules = data.get("modules") if isinstance(data, dict) else None
    return {str(k): str(v) for k, v in modules.items()} if isinstance(modules, dict) else {}


def _stale(modules: dict[str, str]) -> list[str]:
    """The compiled modules whose source is no longer what was compiled."""
    stale = []
    for module, digest in modules.items():
        source = _source(module)
        if source is None or hashlib.sha256(source.read_bytes()).hexdigest() != digest:
            stale.append(module)
    return stale


class _State:
    compiled: tuple[str, ...] = ()  # what runs compiled
    reason = "pure Python (this install has no compiled modules)"  # why none runs compiled


def _guard() -> None:
    """Decide, once per process, whether the compiled modules run (see the module doc)."""
    modules = _manifest()
    if not modules:
        return
    if os.environ.get(PURE_ENV, "") not in ("", "0"):
        _State.reason = f"pure Python ({PURE_ENV} is set; the compiled modules are not used)"
    elif stale := _stale(modules):
        _State.reason = (
            f"pure Python (compiled modules out of date with their sources, e.g. {stale[0]}:"
            " rebuild with `make venv`)"
        )
    else:
        _State.compiled = tuple(sorted(modules))
        return
    sys.meta_path.insert(0, SourceFinder(frozenset(modules)))


def compiled_modules() -> tuple[str, ...]:
    """The tritium modules that run as C extensions in this process (imported or not yet)."""
    return _State.compiled


def is_compiled(module: ModuleType) -> bool:
    """Whether a module was loaded from a C extension."""
    return isinstance(getattr(module, "__loader__", None), importlib.machinery.ExtensionFileLoader)


def describe_build() -> str:
    """One line: which build runs (the start-up log line and ``tritium --version``)."""
    if not _State.compiled:
        return _State.reason
    names = ", ".join(m.removeprefix("tritium.") for m in _State.compiled)
    return f"compiled with mypyc: {len(_State.compiled)} modules ({names})"


_guard()
_lazy_client.defer()  # Triton's protobuf messages without the gRPC client library

__version__ = "0.1.0"
# The Triton release whose protocols tritium speaks; reported by server metadata.
TRITON_VERSION = "2.73.0"

__all__ = ["PURE_ENV", "TRITON_VERSION", "__version__", "compiled_modules", "describe_build"]
