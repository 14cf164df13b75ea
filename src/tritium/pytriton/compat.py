"""An opt-in import of ``tritium.pytriton`` under PyTriton's module names, so a script written
for PyTriton (``from pytriton.triton import Triton``) runs unchanged on tritium.

``install()`` never shadows the real package: where ``pytriton`` can be imported it changes
nothing and returns False. PyTriton's clients (``pytriton.client``) are not part of it: they
come with the real package (or drive the server with tritonclient).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys

_MODULES = (
    "",
    ".triton",
    ".decorators",
    ".exceptions",
    ".model_config",
    ".model_config.triton_model_config",
    ".proxy",
    ".proxy.types",
)


def install() -> bool:
    """Make ``import pytriton`` (and its submodules above) import tritium's; True when done,
    False when a real ``pytriton`` is importable (it is left alone)."""
    present = sys.modules.get("pytriton")
    if present is not None:
        return getattr(present, "__name__", "") == "tritium.pytriton"
    if importlib.util.find_spec("pytriton") is not None:
        return False
    for suffix in _MODULES:
        sys.modules["pytriton" + suffix] = importlib.import_module("tritium.pytriton" + suffix)
    return True


install_pytriton = install
