"""The compiled build: mypyc turns the modules of mypyc_modules.txt into C extensions.

pyproject.toml holds the project; this file only adds the extensions. When `pip install`
(a wheel or the editable install of `make venv`) finds mypyc and a working C compiler, the
listed modules are compiled (one shared library, ``tritium__native``, plus one small
extension per module, each beside its ``.py``); otherwise the build is pure Python, with a
warning and no error:

- ``TRITIUM_PURE_PYTHON=1`` (any value but empty/0) forces the pure build;
- ``TRITIUM_MYPYC_MODULES="tritium/types.py tritium/request.py"`` compiles only those
  (a subset of the list: the benchmark of what each module gains, bench/mypyc_cpu.py);
- no mypyc, no compiler, a mypyc error or a compiler error: pure build.

The build also writes ``tritium/_native.json`` (the compiled modules and the SHA-256 of each
source); at import, ``tritium/__init__.py`` checks it, so a compiled module whose ``.py`` was
edited afterwards (an editable install) never runs stale: the whole package then imports
from source. An in-place (editable) build first removes the extensions of an earlier one.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
SRC = ROOT / "src"
MODULE_LIST = ROOT / "mypyc_modules.txt"
MANIFEST = "tritium/_native.json"
GROUP = "tritium__native"
PURE_ENV = "TRITIUM_PURE_PYTHON"
SUBSET_ENV = "TRITIUM_MYPYC_MODULES"


def listed_modules() -> list[str]:
    """The paths of mypyc_modules.txt (relative to src/), comments and blanks dropped."""
    lines = (line.split("#", 1)[0].strip() for line in MODULE_LIST.read_text().splitlines())
    return [line for line in lines if line]


def _warn(message: str) -> None:
    print(f"tritium build: {message}", file=sys.stderr)


def _chosen() -> list[str]:
    listed = listed_modules()
    subset = os.environ.get(SUBSET_ENV)
    if subset is None:
        return listed
    chosen = subset.split()
    unknown = sorted(set(chosen) - set(listed))
    if unknown:
        raise SystemExit(f"tritium build: {SUBSET_ENV} names unlisted modules: {unknown}")
    return chosen


def _pure_forced() -> bool:
    return os.environ.get(PURE_ENV, "") not in ("", "0")


def _remove_inplace_artifacts() -> None:
    """The extensions and manifest an earlier in-place build left beside the sources."""
    for path in [*SRC.glob("tritium/**/*.so"), *SRC.glob(f"{GROUP}*.so"), SRC / MANIFEST]:
        path.unlink(missing_ok=True)


def native_extensions() -> list:
    """mypyc's extensions of the chosen modules; [] for the pure build (and why, on stderr)."""
    if _pure_forced():
        _warn(f"{PURE_ENV} is set: pure-Python build")
        return []
    chosen = _chosen()
    if not chosen:
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        _warn("mypyc is not installed: pure-Python build")
        return []
    paths = [f"src/{path}" for path in chosen]
    try:
        return mypycify(
            paths, opt_level="3", group_name=GROUP, target_dir="build/mypyc", multi_file=True
        )
    except (Exception, SystemExit) as exc:  # a type error mypyc refuses, mostly
        _warn(f"mypyc failed ({exc}): pure-Python build")
        return []


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class NativeBuild(build_ext):
    """build_ext that falls back to the pure build when the compiler fails, and writes the
    manifest of what it compiled."""

    def finalize_options(self) -> None:
        # Here, not when setup.py is imported: only a build runs mypyc (not a metadata query).
        self.distribution.ext_modules = native_extensions()
        if self.parallel is None:  # one C file per module (multi_file): compile them at once
            self.parallel = os.cpu_count() or 1
        super().finalize_options()

    def run(self) -> None:
        if self.inplace or getattr(self, "editable_mode", False):
            _remove_inplace_artifacts()
        if not self.extensions:
            return
        try:
            if not self.compiler_works():
                raise RuntimeError("no working C compiler")
            super().run()
        except Exception as exc:  # CompileError, LinkError, a missing compiler
            _warn(f"compiling failed ({exc}): pure-Python build")
            self._drop_outputs()
            return
        self._write_manifest()

    def compiler_works(self) -> bool:
        from setuptools._distutils.ccompiler import new_compiler
        from setuptools._distutils.sysconfig import customize_compiler

        compiler = new_compiler(verbose=0)
        customize_compiler(compiler)
        executable = getattr(compiler, "compiler_so", None) or ["cc"]
        return shutil.which(executable[0]) is not None

    def _targets(self) -> list[Path]:
        """Where the build's files go: beside the sources (in place) and/or in build_lib."""
        places = [Path(self.build_lib)]
        if self.inplace or getattr(self, "editable_mode", False):
            places.append(SRC)
        return places

    def _drop_outputs(self) -> None:
        for base in self._targets():
            for ext in self.extensions:
                (base / self.get_ext_filename(ext.name)).unlink(missing_ok=True)
        self.extensions = []
        _remove_inplace_artifacts() if self.inplace else None

    def _write_manifest(self) -> None:
        modules = {
            ext.name: _digest(SRC / Path(*ext.name.split(".")).with_suffix(".py"))
            for ext in self.extensions
            if ext.name.startswith("tritium.")
        }
        text = json.dumps({"group": GROUP, "modules": modules}, indent=1, sort_keys=True)
        for base in self._targets():
            (base / MANIFEST).parent.mkdir(parents=True, exist_ok=True)
            (base / MANIFEST).write_text(text + "\n")

    def get_outputs(self) -> list[str]:
        outputs = list(super().get_outputs())
        if self.extensions:
            outputs.append(str(Path(self.build_lib) / MANIFEST))
        return outputs


if __name__ == "__main__":
    if "editable_wheel" in sys.argv and _pure_forced():
        # A pure editable build runs no build_ext: remove an earlier build's extensions here.
        _remove_inplace_artifacts()
    # A placeholder: it makes setuptools run build_ext (and tag the wheel for the platform);
    # NativeBuild.run replaces it with mypyc's extensions, or with none.
    placeholder = Extension(GROUP, sources=[])
    setup(ext_modules=[placeholder], cmdclass={"build_ext": NativeBuild})
