"""The compiled build (setup.py, mypyc_modules.txt) and tritium/__init__.py, which decides at
import whether the compiled modules run: never stale, never a mix, pure on request."""

from __future__ import annotations

import hashlib
import importlib.machinery
import json
import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

import tritium

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
# `make test` on CI sets it where a C compiler is: the suite then runs on the compiled build,
# and a build that fell back to pure Python fails here instead of passing unnoticed.
EXPECT_COMPILED = os.environ.get("TRITIUM_EXPECT_COMPILED", "") not in ("", "0")


def _listed() -> list[str]:
    setup = runpy.run_path(str(ROOT / "setup.py"), run_name="setup")  # no setup() call
    listed: list[str] = setup["listed_modules"]()
    return listed


def _python(code: str, env: dict[str, str] | None = None) -> str:
    """``code``'s output in a new interpreter; ``env``: the environment, without the pure
    switch unless it names it (None: this process's environment)."""
    environ = dict(os.environ)
    if env is not None:
        environ = {k: v for k, v in environ.items() if k != tritium.PURE_ENV} | env
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=environ, check=True
    )
    return done.stdout.strip()


def test_the_module_list_names_existing_modules_once() -> None:
    listed = _listed()
    assert listed and len(listed) == len(set(listed))
    for path in listed:
        assert (SRC / path).is_file(), path


def test_a_source_edited_after_the_build_is_stale() -> None:
    source = SRC / "tritium" / "request.py"
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    assert tritium._stale({"tritium.request": digest}) == []
    assert tritium._stale({"tritium.request": "0" * 64}) == ["tritium.request"]
    assert tritium._stale({"tritium.no_such_module": digest}) == ["tritium.no_such_module"]


def test_the_source_finder_imports_the_py_file() -> None:
    finder = tritium.SourceFinder(frozenset({"tritium.request"}))
    spec = finder.find_spec("tritium.request", None)
    assert spec is not None and spec.origin == str(SRC / "tritium" / "request.py")
    assert isinstance(spec.loader, importlib.machinery.SourceFileLoader)
    assert finder.find_spec("tritium.server_other", None) is None


def test_the_pure_switch_imports_every_module_from_source() -> None:
    code = (
        "import json, tritium.server, tritium.frontends.http.protocol, tritium as n; "
        "import sys; mods = [m for m in sys.modules.values() if m.__name__.startswith('tritium')]; "
        "print(json.dumps([n.describe_build(), [m.__name__ for m in mods if n.is_compiled(m)]]))"
    )
    line, compiled = json.loads(_python(code, {tritium.PURE_ENV: "1"}))
    assert compiled == []
    assert line.startswith("pure Python")


def test_version_names_the_build() -> None:
    out = _python("from tritium.cli.main import main; main(['--version'])")
    assert out.startswith("tritium ") and tritium.describe_build() in " ".join(out.split())


@pytest.mark.skipif(not EXPECT_COMPILED, reason="TRITIUM_EXPECT_COMPILED is not set")
def test_the_compiled_build_runs_every_listed_module() -> None:
    code = (
        "import importlib, json, tritium as n; "
        "print(json.dumps({m: n.is_compiled(importlib.import_module(m)) "
        "for m in n.compiled_modules()}))"
    )
    loaded = json.loads(_python(code, {}))
    expected = {p.removesuffix(".py").replace("/", ".") for p in _listed()}
    assert set(loaded) == expected
    assert all(loaded.values()), [m for m, compiled in loaded.items() if not compiled]


@pytest.mark.skipif(not EXPECT_COMPILED, reason="TRITIUM_EXPECT_COMPILED is not set")
def test_the_connections_are_native_classes_behind_regular_shells() -> None:
    # A native class (its attributes are fields, its calls direct) lists its fields in
    # __mypyc_attrs__; the shells asyncio's transports call are regular classes. The gRPC
    # connection owns its reader, writer and bounds, native classes too.
    code = (
        "import json\n"
        "from tritium.transport.grpc import bounds, connection, inbound, outbound\n"
        "from tritium.frontends.http import protocol\n"
        "classes = [bounds.Bounds, outbound.Writer, inbound.Reader, connection.GrpcConnection,\n"
        "           protocol.HttpConnection, connection.GrpcProtocol, protocol.HttpProtocol]\n"
        "print(json.dumps({c.__name__: hasattr(c, '__mypyc_attrs__') for c in classes}))\n"
    )
    assert json.loads(_python(code, {})) == {
        "Bounds": True,
        "Writer": True,
        "Reader": True,
        "GrpcConnection": True,
        "HttpConnection": True,
        "GrpcProtocol": False,
        "HttpProtocol": False,
    }
