"""The bench's server process: testkit's ``ServerProcess`` (``python -m tritium serve`` of this
interpreter, so of the tree whose ``src`` it imports, as a child on 127.0.0.1 with every port
0, readiness by polling) with the server's own defaults: no ``--http-drain-idle-secs=0``, which
the tests add and another commit's tritium (an A/B's baseline) may not know."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from testkit import server_process


class ServerProcess(server_process.ServerProcess):
    """testkit's server process with the server's own shutdown defaults (``fast_stop`` off)."""

    def __init__(self, repositories: list[Path], *args: str, **options: Any) -> None:
        options.setdefault("fast_stop", False)
        super().__init__(repositories, *args, **options)


def tree_python(tree: Path) -> tuple[str, dict[str, str] | None]:
    """The interpreter that runs another source tree's tritium, and its environment: the
    tree's own ``.venv``, or (a worktree without one) this interpreter on the tree's ``src``."""
    venv = tree / ".venv" / "bin" / "python"
    if venv.is_file():
        return str(venv), None
    return sys.executable, {**os.environ, "PYTHONPATH": str(tree / "src")}
