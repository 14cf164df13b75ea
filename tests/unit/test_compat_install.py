"""tritium.compat.install(): Triton's module names (``tritonserver``, ``tritonfrontend``)
import tritium's packages only when no real package provides them; a real one is never
shadowed. Each case runs in a fresh interpreter (the import system's state is global)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(code: str, extra_path: Path | None = None) -> str:
    paths = [str(ROOT / "src")] + ([str(extra_path)] if extra_path else [])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_nothing_happens_without_install() -> None:
    out = _run(
        "import importlib.util, tritium.compat\nprint(importlib.util.find_spec('tritonserver'))"
    )
    assert out == "None"


def test_install_serves_triton_names() -> None:
    out = _run(
        "import tritium.compat\n"
        "print(tritium.compat.install())\n"
        "import tritonserver, tritonfrontend\n"
        "import tritium.tritonserver as ours\n"
        "print(tritonserver is ours, tritonserver.Server.__module__, tritonfrontend.KServeHttp)\n"
        "print(ours.__spec__.name)\n"
        "tritium.compat.uninstall()\n"
    )
    lines = out.splitlines()
    assert lines[0] == "['tritonfrontend', 'tritonserver']"
    assert lines[1].startswith("True tritium.tritonserver._server")
    assert lines[2] == "tritium.tritonserver"  # tritium's own spec kept


def test_submodules_are_tritiums_own() -> None:
    out = _run(
        "import tritium.compat\n"
        "tritium.compat.install()\n"
        "import tritonserver._api._response\n"
        "from tritonserver._api._server import Server\n"
        "import tritium.tritonserver as ours\n"
        "print(tritonserver._api._response.InferenceResponse is ours.InferenceResponse,"
        " Server is ours.Server)\n"
    )
    assert out == "True True"


def test_a_real_package_is_never_shadowed(tmp_path: Path) -> None:
    real = tmp_path / "tritonserver"
    real.mkdir()
    (real / "__init__.py").write_text("REAL = True\n")
    out = _run(
        "import tritium.compat\n"
        "print(tritium.compat.install())\n"
        "import tritonserver\n"
        "print(getattr(tritonserver, 'REAL', False))\n",
        tmp_path,
    )
    assert out.splitlines() == ["['tritonfrontend']", "True"]


def test_private_api_package_is_an_attribute_after_import() -> None:
    # Triton's __init__ imports from tritonserver._api.*, so `import tritonserver` alone binds
    # `tritonserver._api._response` (Triton's OpenAI front-end annotates with it at import).
    out = _run(
        "import tritium.compat\n"
        "tritium.compat.install()\n"
        "import tritonserver\n"
        "print(tritonserver._api._response.InferenceResponse is tritonserver.InferenceResponse,"
        " tritonserver._api._server.Server is tritonserver.Server)\n"
    )
    assert out == "True True"
