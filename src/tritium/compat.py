"""Opt-in imports under Triton's package names: after ``tritium.compat.install()``,
``import tritonserver`` and ``import tritonfrontend`` give ``tritium.tritonserver`` and
``tritium.tritonfrontend``, so a script written for Triton's in-process API runs unchanged.

It never shadows the real packages: a name (and its submodules) is served only when no
installed package provides it (``importlib.util.find_spec`` finds none at ``install()``).
Nothing happens on import of this module; ``uninstall()`` removes the finder (modules
already imported stay imported)."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Final

# Triton's name -> tritium's module.
ALIASES: Final[dict[str, str]] = {
    "tritonserver": "tritium.tritonserver",
    "tritonfrontend": "tritium.tritonfrontend",
}


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target: str) -> None:
        self._target = target
        self._spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(self._target)
        self._spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        """The module is tritium's, already executed: only its own spec is put back (the
        import system set the alias's on it)."""
        module.__spec__ = self._spec


class AliasFinder(importlib.abc.MetaPathFinder):
    """Finds the Triton names that no installed package provides (``served``), and their
    submodules as tritium's (``tritonserver._api._response`` is
    ``tritium.tritonserver._api._response``, the same module object: no second copy of a
    class)."""

    def __init__(self, served: dict[str, str]) -> None:
        self.served = served

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        top, dot, rest = fullname.partition(".")
        alias = self.served.get(top)
        if alias is None:
            return None
        name = alias + dot + rest  # tritonserver._api._server -> tritium.tritonserver._api...
        if dot and importlib.util.find_spec(name) is None:
            return None
        return importlib.util.spec_from_loader(fullname, _AliasLoader(name))


def _installed() -> AliasFinder | None:
    for finder in sys.meta_path:
        if isinstance(finder, AliasFinder):
            return finder
    return None


def install() -> list[str]:
    """Serve Triton's names that no installed package provides; the names served (a real
    ``tritonserver`` keeps its name: it is never shadowed). Calling it again changes
    nothing."""
    finder = _installed()
    if finder is not None:
        return sorted(finder.served)
    served = {
        name: target
        for name, target in ALIASES.items()
        if name in sys.modules
        and sys.modules[name].__name__ == target
        or name not in sys.modules
        and importlib.util.find_spec(name) is None
    }
    # First, so that a submodule (``tritonserver._api``) is tritium's module rather than a
    # second copy the path finder would load under the alias's name; it answers only for
    # the names no installed package provided when install() ran.
    sys.meta_path.insert(0, AliasFinder(served))
    return sorted(served)


def uninstall() -> None:
    """Remove the finder (names already imported stay in ``sys.modules``)."""
    finder = _installed()
    if finder is not None:
        sys.meta_path.remove(finder)
