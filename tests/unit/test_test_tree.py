"""The test tree itself: pytest imports test files by their basename (the test folders are no
packages), so two files of one name in two folders stop the whole run at collection."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent


def test_test_file_basenames_are_unique() -> None:
    names = Counter(p.name for p in TESTS.rglob("test_*.py") if "node_modules" not in p.parts)
    assert [name for name, count in names.items() if count > 1] == []
