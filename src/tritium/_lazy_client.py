"""``tritonclient.grpc`` without the gRPC library: the server reads Triton's protobuf messages
(``service_pb2``, ``model_config_pb2``) from that package, but the package's ``__init__`` also
imports ``grpc`` (the C-core client, ~17 MiB resident) for its client, which a server with its
own gRPC transport never uses.

``defer()`` (run by ``tritium/__init__``, standard library only) puts the package in
``sys.modules`` as itself — same spec, path and file — with its ``__init__`` not run yet: a
``*_pb2`` submodule is imported as a plain submodule (it needs only protobuf), and the first
other attribute asked of the package (``InferenceServerClient``, ``InferInput``, ``__all__`` for
``import *``) runs the real ``__init__`` in it, after which it is the package as it always is.
So the protobuf classes are the very ones a client in the same process gets (an in-process
server, the tests), and the gRPC library loads only where a client is used. A process that
imported ``tritonclient.grpc`` before tritium keeps it as it is.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from types import ModuleType
from typing import Any

PACKAGE = "tritonclient.grpc"


class _Deferred(ModuleType):
    """The package whose ``__init__`` runs on the first attribute it lacks (``_pb2``
    submodules apart)."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name != "__all__":
            raise AttributeError(name)
        if name.endswith("_pb2") and importlib.util.find_spec(f"{PACKAGE}.{name}") is not None:
            return importlib.import_module(f"{PACKAGE}.{name}")  # sets the attribute too
        spec = self.__spec__
        if self.__dict__.get("_tritium_initialised") or spec is None or spec.loader is None:
            raise AttributeError(f"module {PACKAGE!r} has no attribute {name!r}")
        self.__dict__["_tritium_initialised"] = True
        spec.loader.exec_module(self)  # the real __init__, in this module
        return getattr(self, name)


def defer() -> None:
    """Register ``tritonclient.grpc`` with its ``__init__`` deferred (see the module doc);
    nothing when it is imported already or not installed."""
    if PACKAGE in sys.modules:
        return
    try:
        spec = importlib.util.find_spec(PACKAGE)
    except (ImportError, ValueError):
        return
    if spec is None or spec.loader is None or spec.submodule_search_locations is None:
        return
    module = _Deferred(PACKAGE)
    module.__spec__ = spec
    module.__loader__ = spec.loader
    module.__file__ = spec.origin
    module.__path__ = list(spec.submodule_search_locations)
    module.__package__ = PACKAGE
    sys.modules[PACKAGE] = module
    parent = sys.modules.get("tritonclient")
    if parent is not None:
        parent.grpc = module  # type: ignore[attr-defined]
