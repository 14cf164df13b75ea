"""docs/architecture.md stays true: every ``path.py:Name`` reference in it names a file of
the project that defines ``Name`` (a class, function or module-level name; ``Class.member``
for a member of a class), and its hop tables stay short (issue 38: at most 15 hops each).
A path is read as the end of a file's path under ``src/tritium/``, ``bench/``, ``tests/`` or
``tools/`` (``grpc/call.py``, or ``call.py`` where the section names its package): the
reference resolves when one of the files it may mean defines the name."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
SRC = ROOT / "src" / "tritium"
REFERENCE = re.compile(r"`([A-Za-z0-9_./-]+\.py):([A-Za-z_][A-Za-z0-9_.]*)`")
# A file named alone, or as the start of a reference.
FILE = re.compile(r"`([A-Za-z0-9_./-]+\.py)[`:]")


def _references() -> list[tuple[str, str]]:
    return sorted(set(REFERENCE.findall(DOC.read_text())))


FILES = [
    path
    for base in (SRC, ROOT / "bench", ROOT / "tests", ROOT / "tools")
    for path in base.rglob("*.py")
] + list(ROOT.glob("*.py"))


def _files(path: str) -> list[Path]:
    """The files a reference's path may mean."""
    return [f for f in FILES if f.as_posix().endswith("/" + path.lstrip("./"))]


def _names(body: list[ast.stmt]) -> dict[str, ast.AST]:
    """The names a module or class body defines, with their nodes."""
    found: dict[str, ast.AST] = {}
    for node in body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            found[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found[target.id] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            found[node.target.id] = node
        elif isinstance(node, ast.If):  # names under ``if TYPE_CHECKING`` or a platform test
            found.update(_names(node.body))
            found.update(_names(node.orelse))
    return found


def _members(node: ast.ClassDef) -> set[str]:
    """A class's methods and attributes, ``self.x = ...`` in its methods included."""
    members = set(_names(node.body))
    for item in ast.walk(node):
        if isinstance(item, ast.Attribute) and isinstance(item.ctx, ast.Store):
            if isinstance(item.value, ast.Name) and item.value.id == "self":
                members.add(item.attr)
    return members


def _resolves(path: Path, dotted: str) -> bool:
    first, _, rest = dotted.partition(".")
    node = _names(ast.parse(path.read_text()).body).get(first)
    if node is None:
        return False
    if not rest:
        return True
    return isinstance(node, ast.ClassDef) and rest.split(".")[0] in _members(node)


def test_the_map_names_code() -> None:
    assert len(_references()) >= 30, "the map should point at the code it describes"


@pytest.mark.parametrize(("path", "name"), _references())
def test_each_reference_resolves(path: str, name: str) -> None:
    found = _files(path)
    assert found, f"docs/architecture.md names {path}, which is not a file"
    assert any(_resolves(f, name) for f in found), (
        f"docs/architecture.md names {path}:{name}, not defined there"
    )


@pytest.mark.parametrize("path", sorted(set(FILE.findall(DOC.read_text()))))
def test_each_file_named_exists(path: str) -> None:
    assert _files(path), f"docs/architecture.md names {path}, which is not a file"


def _hop_tables() -> list[list[str]]:
    """The rows of each table whose header starts with ``| Hop``."""
    tables: list[list[str]] = []
    rows: list[str] | None = None
    for line in DOC.read_text().splitlines():
        if line.startswith("| Hop") or line.startswith("| hop"):
            rows = []
            tables.append(rows)
        elif rows is not None and line.startswith("|"):
            if not set(line) <= set("|-: "):
                rows.append(line)
        else:
            rows = None
    return tables


def test_hop_tables_are_short() -> None:
    tables = _hop_tables()
    assert len(tables) >= 2, "the map shows one HTTP infer and one gRPC stream message as tables"
    for rows in tables:
        assert 3 <= len(rows) <= 15
