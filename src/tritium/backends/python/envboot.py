"""Start the stub under an execution environment's interpreter (EXECUTION_ENV_PATH).

Run as a script, ``<env>/bin/python3 .../envboot.py tritium.backends.python.stub <fd> <server
pid> <instance name>`` (the module named as in ``python -m``, so ``ps`` and tools that look for
stubs see it), by an interpreter that does not have tritium installed. It makes exactly one
thing of the server's visible: the ``tritium`` package this file belongs to, registered by
location (not by putting the server's site-packages on ``sys.path``, which would leak every
server package into the model); then it runs the stub module as ``python -m`` would.
Everything else the model imports, numpy included, comes from the environment. Standard
library only here.
"""

import importlib.machinery
import importlib.util
import runpy
import sys
from pathlib import Path

STUB_MODULE = "tritium.backends.python.stub"
# The compiled build's shared runtime (setup.py's mypyc group ``tritium_native``): an extension
# module beside the package that every compiled module of tritium imports.
NATIVE_RUNTIME = "tritium__native__mypyc"


def _register_native_runtime(package: Path) -> None:
    """Register the compiled build's runtime by location too, when there is one (the pure
    build has none; ``tritium/__init__.py`` then loads every module from its source)."""
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = package.parent / f"{NATIVE_RUNTIME}{suffix}"
        if not path.is_file():
            continue
        loader = importlib.machinery.ExtensionFileLoader(NATIVE_RUNTIME, str(path))
        spec = importlib.util.spec_from_file_location(NATIVE_RUNTIME, path, loader=loader)
        if spec is None:
            raise ImportError(f"cannot load {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[NATIVE_RUNTIME] = module
        loader.exec_module(module)
        return


def _register_tritium() -> None:
    package = Path(__file__).resolve().parents[2]  # .../tritium
    _register_native_runtime(package)
    spec = importlib.util.spec_from_file_location(
        "tritium", package / "__init__.py", submodule_search_locations=[str(package)]
    )
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the tritium package from {package}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["tritium"] = module
    spec.loader.exec_module(module)


if __name__ == "__main__":
    # A script's own directory is sys.path[0]: drop it, or ipc, stub, pb_utils... would be
    # importable as top-level modules of the model.
    if sys.path and Path(sys.path[0] or ".").resolve() == Path(__file__).resolve().parent:
        del sys.path[0]
    if len(sys.argv) < 2 or sys.argv[1] != STUB_MODULE:
        sys.exit(f"usage: {sys.argv[0]} {STUB_MODULE} <fd> <server pid> <instance name>")
    del sys.argv[1]
    _register_tritium()
    runpy.run_module(STUB_MODULE, run_name="__main__", alter_sys=True)
