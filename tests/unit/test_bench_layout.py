"""bench/ stays a small package (issue 11): no file over 500 lines, no import cycle among its
modules, every library module imports without a server or a model (scripts, the files with a
``__main__`` guard, are only parsed), and the scenario lists are consistent."""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
MAX_LINES = 500

if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))  # the package ``bench`` (appended: ROOT holds other folders)


def bench_files() -> list[Path]:
    return sorted(BENCH.rglob("*.py"))


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_script(tree: ast.Module) -> bool:
    """A top-level ``if __name__ == "__main__":``."""
    return any(
        isinstance(node, ast.If)
        and isinstance(node.test, ast.Compare)
        and isinstance(node.test.left, ast.Name)
        and node.test.left.id == "__name__"
        for node in tree.body
    )


def imported_names(path: Path, tree: ast.Module) -> set[str]:
    """Every module name ``path`` imports, in functions too; ``from bench import x`` also
    yields ``bench.x``. A script's folder is its sys.path[0], so a bare ``import run`` in
    bench/ means bench/run.py: such names are returned as ``bench.run`` as well."""
    package = module_name(path).rsplit(".", 1)[0] if path.name != "__init__.py" else ""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's package, up level - 1
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    if path.parent == BENCH:
        names |= {f"bench.{name}" for name in names}
    return names


def import_graph() -> dict[str, set[str]]:
    trees = {module_name(p): (p, ast.parse(p.read_text())) for p in bench_files()}
    return {
        name: {m for m in imported_names(path, tree) if m in trees and m != name}
        for name, (path, tree) in trees.items()
    }


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_no_bench_file_over_the_limit() -> None:
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in bench_files()}
    assert sizes, "no bench module found"
    assert {f: n for f, n in sizes.items() if n > MAX_LINES} == {}


def test_no_import_cycle_among_bench_modules() -> None:
    graph = import_graph()
    assert "bench.suites" in graph["bench.__main__"]  # the graph sees the imports it should
    assert "bench.common" in graph["bench.scenarios.ensembles"]
    assert find_cycle(graph) is None, f"import cycle: {' -> '.join(find_cycle(graph) or [])}"


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


LIBRARY = [module_name(p) for p in bench_files() if not is_script(ast.parse(p.read_text()))]


@pytest.mark.parametrize("name", LIBRARY)
def test_bench_module_imports(name: str) -> None:
    assert importlib.import_module(name).__doc__, f"{name} has no docstring"


def test_scenario_lists_are_consistent() -> None:
    from bench.catalog import CONTRACTS, DEFAULT_ISSUES, ISSUES
    from bench.drivers import PROTOCOLS

    assert list(ISSUES) == [
        "foundation",
        "streaming",
        "batching",
        "shm",
        "ensembles",
        "grpc",
        "sequence",
        "bls",
        "handoff",
    ]
    assert set(DEFAULT_ISSUES) <= set(ISSUES)
    for name, issue in ISSUES.items():
        scenarios = issue.scenarios()
        assert issue.name == name and scenarios
        assert {s.protocol for s in scenarios} <= set(PROTOCOLS)
        assert len({s.name for s in scenarios}) == len(scenarios), f"{name}: duplicate names"
    assert set(CONTRACTS) == {
        "mlp",
        "mlp_nobatch",
        "identity_fp32",
        "image_classifier",
        "image_classifier_bls",
    }


def test_every_suite_runs_a_main() -> None:
    """``python -m bench <suite>`` (bench/suites.py): unique names, each module has ``main``,
    and ``make bench`` runs exactly the DEFAULT suites, through the one entry point."""
    from bench.suites import BY_NAME, DEFAULT, SUITES

    assert len(BY_NAME) == len(SUITES)
    for suite in SUITES:
        assert callable(importlib.import_module(suite.module).main), suite.name
    makefile = (ROOT / "Makefile").read_text()
    target = makefile[makefile.index("\nbench:") :].split("\n\n", 1)[0]
    ran = [line.split()[3] for line in target.splitlines() if "-m bench " in line]
    assert ran == list(DEFAULT)


def test_the_entry_point_lists_the_suites(capsys: pytest.CaptureFixture[str]) -> None:
    from bench.__main__ import main
    from bench.suites import SUITES

    assert main(["--list"]) == 0
    listing = capsys.readouterr().out
    assert all(suite.name in listing for suite in SUITES)


def test_bench_and_the_tests_tooling_import_nothing_of_each_other() -> None:
    """The bench imports nothing from ``tests`` (bench/kit holds its copies), and the tests'
    tooling (tests/support) nothing from ``bench``."""

    def imports(path: Path) -> set[str]:
        return {name.split(".")[0] for name in imported_names(path, ast.parse(path.read_text()))}

    assert {str(p) for p in bench_files() if "tests" in imports(p)} == set()
    support = sorted((ROOT / "tests" / "support").glob("*.py"))
    assert support and {str(p) for p in support if "bench" in imports(p)} == set()
