"""The layering of ../shared/DESIGN.md, checked on the import statements of src/tritium:
the core imports no transport framework, and the front-ends reach the core only through the
server facade (and the value modules)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "tritium"
TRANSPORTS = {"grpc", "grpc_health", "httptools", "uvloop", "starlette", "uvicorn", "aiohttp"}
# What a front-end may import from tritium itself. ``tensor_codec`` is the BYTES/raw tensor
# wire format shared with the Python backend's stub protocol: syntax, not core logic.
# ``access`` and ``audit`` are the pure access policy and the audit log every front-end
# applies at its dispatch point.
FRONTEND_ALLOWED = {
    "types",
    "errors",
    "server",
    "options",
    "metrics",
    "tensor_codec",
    "access",
    "audit",
}


def _imports(path: Path) -> list[tuple[int, str]]:
    """(level, dotted name) of every import in a module; level > 0 for relative ones."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(0, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            found.append((node.level, node.module or ""))
    return found


def _tritium_module(path: Path, level: int, name: str) -> str:
    """The top-level tritium module a relative import refers to ('' if outside tritium)."""
    if level == 0:
        return name.split(".")[1] if name.startswith("tritium.") else ""
    package = path.relative_to(SRC).parent.parts
    base = package[: len(package) - (level - 1)]
    parts = [*base, *name.split(".")] if name else list(base)
    return parts[0] if parts else ""


CORE = [
    p
    for p in SRC.rglob("*.py")
    if "frontends" not in p.parts and p.name not in ("runtime.py", "cli.py", "__main__.py")
]
FRONTENDS = list((SRC / "frontends").rglob("*.py"))


@pytest.mark.parametrize("path", CORE, ids=lambda p: str(p.relative_to(SRC)))
def test_core_imports_no_transport(path: Path) -> None:
    for level, name in _imports(path):
        if level == 0:
            assert name.split(".")[0] not in TRANSPORTS, f"{path.name} imports {name}"


@pytest.mark.parametrize("path", FRONTENDS, ids=lambda p: str(p.relative_to(SRC)))
def test_frontends_use_only_the_facade(path: Path) -> None:
    for level, name in _imports(path):
        module = _tritium_module(path, level, name)
        if module and module != "frontends":
            assert module in FRONTEND_ALLOWED, f"{path.relative_to(SRC)} imports tritium.{module}"


def test_serving_imports_no_ml_runtime() -> None:
    """Backends are imported when a model needs them: importing the server (and everything a
    server with only Python models runs) imports no onnxruntime."""
    import subprocess
    import sys

    code = (
        "import sys, tritium.runtime, tritium.server; "
        "print(sorted(m for m in ('onnxruntime', 'torch') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"
