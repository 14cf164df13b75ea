"""pyproject's build requirements hold every library mypyc's type check reaches from the
compiled modules. An isolated build (pip's default, the image's build stage) sees only those:
a missing one is a type error, and setup.py then builds pure Python without failing (the
image's guard caught ml_dtypes and redis missing). ``make venv`` builds in the full venv,
where nothing is missing, so only this check sees it."""

from __future__ import annotations

import ast
import re
import runpy
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
# Installed with mypy itself (its own requirements).
WITH_MYPY = {"mypy_extensions", "typing_extensions"}


def _module_file(name: str) -> Path | None:
    base = SRC.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _imported(name: str, path: Path) -> set[str]:
    """Absolute names of what ``path`` (module ``name``) imports, at any depth of its code."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            parts = package.split(".")
            base = ".".join(parts[: len(parts) - node.level + 1]) if node.level else ""
            module = ".".join(p for p in (base, node.module or "") if p)
            found.add(module)
            found |= {f"{module}.{alias.name}" for alias in node.names}
    return found


def _reached_libraries() -> set[str]:
    """Top-level names of the libraries the listed modules import, through tritium's own."""
    setup = runpy.run_path(str(ROOT / "setup.py"), run_name="setup")
    todo = [p.removesuffix(".py").replace("/", ".") for p in setup["listed_modules"]()]
    seen: set[str] = set()
    libraries: set[str] = set()
    while todo:
        name = todo.pop()
        parts = name.split(".")
        for depth in range(1, len(parts) + 1):  # a module imports its packages first
            module = ".".join(parts[:depth])
            path = _module_file(module)
            if module in seen or path is None:
                continue
            seen.add(module)
            for imported in _imported(module, path):
                top = imported.split(".")[0]
                if top == "tritium":
                    todo.append(imported)
                elif top not in sys.stdlib_module_names and top != "__future__":
                    libraries.add(top)
    return libraries


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_the_isolated_build_has_every_library_the_type_check_reaches() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    required = {
        _normal(re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0])
        for r in project["build-system"]["requires"]
    }
    ignored = {
        pattern.split(".")[0]
        for override in project["tool"]["mypy"].get("overrides", [])
        if override.get("ignore_missing_imports")
        for pattern in override["module"]
    }
    distributions = packages_distributions()
    missing = []
    for library in sorted(_reached_libraries() - ignored - WITH_MYPY):
        names = {_normal(d) for d in distributions.get(library, [library])}
        if not names & required and not {f"types-{n}" for n in names} & required:
            missing.append(f"{library} ({', '.join(sorted(names))})")
    assert not missing, f"add to [build-system] requires: {missing}"
