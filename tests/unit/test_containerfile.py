"""The image (Containerfile, .containerignore) ships the compiled build: its build stage has
what setup.py needs to compile (a C compiler, Python's headers, setup.py and
mypyc_modules.txt in the context and in the COPY), its runtime stage carries no compiler, and
a RUN step fails the image when ``tritium --version`` does not say "compiled with mypyc".

Read statically (no registry is needed); the guard's shell command itself runs here against
the pure build (it must fail) and, where this interpreter's tritium is compiled (``make
test``), against the compiled one (it must pass). Two slow checks are opt-in:
``TRITIUM_SLOW_BUILD=1`` builds the wheel from the same files with pip, as the build stage
does, and ``TRITIUM_IMAGE_TEST=1`` builds the image with buildah (``make test-image``)."""

from __future__ import annotations

import fnmatch
import inspect
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import tritium

ROOT = Path(__file__).resolve().parents[2]
COMPILERS = {"gcc", "g++", "cc", "clang", "build-essential", "python3-dev", "libc6-dev"}
COMPILED = "compiled with mypyc"


@dataclass
class Stage:
    base: str
    name: str
    steps: list[tuple[str, str]] = field(default_factory=list)

    def args(self, keyword: str) -> list[str]:
        return [args for word, args in self.steps if word == keyword]


def _instructions(text: str) -> list[tuple[str, str]]:
    """(KEYWORD, arguments) of each instruction, continuation lines joined, comments out."""
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    out = []
    for line in joined.splitlines():
        if line.strip():
            word, _, args = line.strip().partition(" ")
            out.append((word.upper(), " ".join(args.split())))
    return out


def stages(text: str = "") -> list[Stage]:
    found: list[Stage] = []
    for word, args in _instructions(text or (ROOT / "Containerfile").read_text()):
        if word == "FROM":
            base, _, name = args.partition(" AS ")
            found.append(Stage(base, name))
        elif found:
            found[-1].steps.append((word, args))
    return found


def apt_packages(stage: Stage) -> set[str]:
    packages: set[str] = set()
    for run in stage.args("RUN"):
        for command in re.findall(r"apt-get install ([^&;|]*)", run):
            packages |= {word for word in command.split() if not word.startswith("-")}
    return packages


def copied_sources(stage: Stage) -> list[str]:
    """What the stage's COPY steps take from the build context (not --from another stage)."""
    sources: list[str] = []
    for copy in stage.args("COPY"):
        if "--from=" not in copy:
            sources += copy.split()[:-1]
    return sources


def in_context(path: str) -> bool:
    """Whether .containerignore lets ``path`` into the build context (last match wins)."""
    admitted = True
    for line in (ROOT / ".containerignore").read_text().splitlines():
        pattern = line.strip()
        if not pattern or pattern.startswith("#"):
            continue
        negated = pattern.startswith("!")
        pattern = pattern.lstrip("!").rstrip("/")
        if fnmatch.fnmatch(path, pattern) or path.startswith(pattern + "/"):
            admitted = negated
    return admitted


def test_the_build_stage_has_what_the_compiled_build_needs() -> None:
    build, runtime = stages()
    assert build.name == "build" and runtime.name == ""
    packages = apt_packages(build)
    assert {"python3-dev", "python3-venv"} <= packages
    assert packages & {"gcc", "build-essential", "clang"}, packages
    sources = copied_sources(build)
    for needed in ("pyproject.toml", "setup.py", "mypyc_modules.txt", "src"):
        assert needed in sources, f"the build stage does not COPY {needed}"
    assert any("pip install" in run and "/src" in run for run in build.args("RUN"))


def test_the_context_admits_every_copied_file() -> None:
    """A COPY of a file .containerignore leaves out fails the build (setup.py was)."""
    (build, _) = stages()
    for source in copied_sources(build):
        assert (ROOT / source).exists(), source
        assert in_context(source), f".containerignore leaves {source} out of the context"
    assert not in_context("src/tritium/_native.json")  # an editable install's manifest
    assert not in_context("src/tritium/request.cpython-311-x86_64-linux-gnu.so")
    assert not in_context(".venv")


def test_the_runtime_stage_carries_no_compiler() -> None:
    (_, runtime) = stages()
    assert not apt_packages(runtime) & COMPILERS, apt_packages(runtime)
    (copy,) = runtime.args("COPY")
    assert copy == "--from=build /opt/tritium /opt/tritium"  # the venv, nothing else


def _guard() -> str:
    (_, runtime) = stages()
    (guard,) = [run for run in runtime.args("RUN") if "tritium --version" in run]
    assert COMPILED in guard
    return guard


def _run_guard(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The runtime stage's guard, with a ``tritium`` on PATH that is this interpreter's."""
    shim = tmp_path / "tritium"
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} -m tritium "$@"\n')
    shim.chmod(0o755)
    environ = {k: v for k, v in os.environ.items() if k != tritium.PURE_ENV}
    environ |= env | {"PATH": f"{tmp_path}:{os.environ['PATH']}"}
    return subprocess.run(
        ["/bin/sh", "-c", _guard()], capture_output=True, text=True, env=environ, timeout=120
    )


def test_the_guard_fails_the_image_on_the_pure_build(tmp_path: Path) -> None:
    assert COMPILED in inspect.getsource(tritium.describe_build)  # the line it looks for
    done = _run_guard(tmp_path, {tritium.PURE_ENV: "1"})
    assert done.returncode != 0
    assert "pure" in done.stdout.lower(), done.stdout  # the version line says why
    assert "not the compiled build" in done.stderr


def test_the_guard_passes_the_compiled_build(tmp_path: Path) -> None:
    if not tritium.compiled_modules():
        pytest.skip(f"this interpreter runs the pure build ({tritium.describe_build()})")
    done = _run_guard(tmp_path, {})
    assert done.returncode == 0, done.stdout + done.stderr
    assert COMPILED in done.stdout


# -- opt-in: the real builds -----------------------------------------------------------------
def _context(tmp_path: Path) -> Path:
    """The build stage's /src: what its COPY steps take, as the context admits it."""
    (build, _) = stages()
    target = tmp_path / "src-tree"
    target.mkdir()
    for source in copied_sources(build):
        path = ROOT / source
        if path.is_dir():
            ignore = shutil.ignore_patterns("__pycache__", "*.so", "_native.json")
            shutil.copytree(path, target / source, ignore=ignore)
        else:
            shutil.copy2(path, target / source)
    return target


@pytest.mark.timeout(1800)
def test_pip_builds_the_compiled_build_from_the_image_s_files(tmp_path: Path) -> None:
    if os.environ.get("TRITIUM_SLOW_BUILD", "") in ("", "0"):
        pytest.skip("slow (minutes: mypyc compiles every listed module): TRITIUM_SLOW_BUILD=1")
    if (
        shutil.which("cc") is None
        or not Path(sysconfig.get_paths()["include"], "Python.h").exists()
    ):
        pytest.skip("needs a C compiler and Python's headers, as the image's build stage")
    source = _context(tmp_path)
    wheels, site = tmp_path / "wheels", tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    subprocess.run([*pip, "wheel", "--no-deps", "-w", str(wheels), str(source)], check=True)
    (wheel,) = wheels.glob("tritium-*.whl")
    subprocess.run([*pip, "install", "--no-deps", "--target", str(site), str(wheel)], check=True)
    environ = {k: v for k, v in os.environ.items() if k != tritium.PURE_ENV}
    environ["PYTHONPATH"] = str(site)
    version = subprocess.run(
        [sys.executable, "-m", "tritium", "--version"],
        capture_output=True,
        text=True,
        env=environ,
        check=True,
        cwd=tmp_path,
    ).stdout
    print(version)
    assert COMPILED in version


def _buildah(*args: str, timeout: float = 120) -> str:
    done = subprocess.run(
        ["buildah", *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return done.stdout


@pytest.mark.timeout(3600)
def test_buildah_builds_the_compiled_image(tmp_path: Path) -> None:
    """``make test-image``: the image builds (its guard passed), says it is compiled, runs as
    uid 10001 and has no compiler. TRITIUM_IMAGE_BASE names a local base where no registry
    is reachable (e.g. one made with debootstrap; docs/deployment.md)."""
    if os.environ.get("TRITIUM_IMAGE_TEST", "") in ("", "0"):
        pytest.skip("slow (a container build): make test-image, or TRITIUM_IMAGE_TEST=1")
    if shutil.which("buildah") is None:
        pytest.skip("buildah not installed (Debian's buildah)")
    tag = "localhost/tritium:cpu-test"
    base = os.environ.get("TRITIUM_IMAGE_BASE", "docker.io/library/debian:bookworm-slim")
    build = ["bud", "--isolation", "chroot", "--format", "docker", "--build-arg", f"BASE={base}"]
    cert = os.environ.get("PIP_CERT", "")
    if cert:  # a network that intercepts TLS: the bundle, mounted for the build only
        build += ["--volume", f"{cert}:/run/ca.crt:ro", "--build-arg", "PIP_CERT=/run/ca.crt"]
    _buildah(*build, "-t", tag, "-f", str(ROOT / "Containerfile"), str(ROOT), timeout=3000)
    container = _buildah("from", "--quiet", tag).strip()
    try:
        run = ("run", "--isolation", "chroot", container, "--")
        version = _buildah(*run, "tritium", "--version")
        print(version)
        assert COMPILED in version
        assert _buildah(*run, "id", "-u").strip() == "10001"
        probe = "for c in gcc cc x86_64-linux-gnu-gcc; do command -v $c; done; true"
        assert _buildah(*run, "sh", "-c", probe).strip() == ""
    finally:
        _buildah("rm", container)
