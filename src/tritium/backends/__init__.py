"""Backends by name (``backend:`` / ``platform:`` of config.pbtxt), imported on first use.

A server that serves only Python models never imports onnxruntime: each backend's module is
imported the first time a model asks for it. A backend whose runtime is missing makes the
models that need it UNAVAILABLE with the reason; the others serve. A model of a backend
tritium does not have fails with ``unknown_backend``'s reason.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from ..errors import unavailable

# name -> (module, class) of the backend, relative to this package.
_BACKENDS = {
    "onnxruntime": (".onnxruntime", "OnnxRuntimeBackend"),
    "pytorch": (".pytorch", "PyTorchBackend"),
    "openvino": (".openvino", "OpenVinoBackend"),
    "python": (".python.backend", "PythonBackend"),
    "ensemble": (".ensemble", "EnsembleBackend"),
    # functions bound in this process (tritium.pytriton)
    "pytriton": (".bound", "BoundBackend"),
}

# Served only for models a process bound itself (tritium.pytriton): not offered to a
# repository's models, so not named among the backends a model may ask for.
_IN_PROCESS_ONLY = frozenset({"pytriton"})

# The optional extras (pyproject.toml) that bring a backend's framework: a model of a backend
# whose framework is missing fails its load naming the extra to install.
_EXTRAS = {"pytorch": "pytorch", "openvino": "openvino"}


def unknown_backend(name: str, model: str, served: Iterable[str]) -> str:
    """The load failure of a model whose backend tritium does not have: the backends are built
    in (there are no backend libraries to find, and --backend-directory is not read)."""
    if not name:
        return (
            f"unable to determine the backend of model '{model}': set 'backend' or 'platform' "
            "in its configuration"
        )
    return (
        f"unable to find backend '{name}' for model '{model}': tritium's backends are built in "
        f"({', '.join(sorted(set(served) - _IN_PROCESS_ONLY))}); it loads no backend libraries"
    )


def missing_framework(name: str, exc: ImportError) -> str:
    """Why a backend whose framework cannot be imported serves nothing, and what to install."""
    reason = f"backend '{name}' is not available: {exc}"
    extra = _EXTRAS.get(name)
    if extra is None:
        return reason
    return f"{reason}; install it with: pip install 'tritium[{extra}]'"


async def find_backend(backends: Mapping[str, Any], name: str) -> Any | None:
    """``backends.get(name)``; a registry's modules are imported off the event loop first."""
    if isinstance(backends, BackendRegistry):
        await backends.import_off_loop(name)
    return backends.get(name)


class BackendRegistry(Mapping[str, Any]):
    """A read-only mapping name -> backend instance; ``args`` are given to the backend's
    constructor (the Python backend takes the stub restart policy)."""

    def __init__(self, args: Mapping[str, tuple[Any, ...]] | None = None) -> None:
        self._args = dict(args or {})
        self._loaded: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        backend = self._loaded.get(name)
        if backend is not None:
            return backend
        module_name, class_name = _BACKENDS[name]  # KeyError: not a backend we serve
        try:
            module = importlib.import_module(module_name, __name__)
        except ImportError as exc:
            raise unavailable(missing_framework(name, exc)) from None
        factory: Callable[..., Any] = getattr(module, class_name)
        backend = self._loaded[name] = factory(*self._args.get(name, ()))
        return backend

    async def import_off_loop(self, name: str) -> None:
        """Import backend ``name``'s module on a worker thread the first time (torch takes
        seconds to import: meanwhile the event loop serves and loads the other models). A
        missing framework is UNAVAILABLE with ``missing_framework``'s reason."""
        if name in self._loaded or name not in _BACKENDS:
            return
        try:
            import asyncio  # here: the Python stub imports this package, and needs none

            await asyncio.to_thread(importlib.import_module, _BACKENDS[name][0], __name__)
        except ImportError as exc:
            raise unavailable(missing_framework(name, exc)) from None

    def __iter__(self) -> Iterator[str]:
        return iter(_BACKENDS)

    def __len__(self) -> int:
        return len(_BACKENDS)
