"""Find the Python-model stub processes of a server through /proc (Linux), and wait on them.

A stub's command line is ``python .../triton_python_backend_stub.py
tritium.backends.python.stub <fd> <server pid> <instance name> <token>``, so a stub is
recognised by its module, its server and its instance.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

STUB_MODULE = "tritium.backends.python.stub"


def _parent_and_state(pid: int) -> tuple[int, str] | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "
    return int(fields[1]), fields[0]


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def stub_pids(server_pid: int, instance: str | None = None) -> dict[int, str]:
    """Live stubs started by ``server_pid`` (by their command line): {pid: instance name}."""
    found: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        args = _cmdline(pid)
        if STUB_MODULE not in args or len(args) < args.index(STUB_MODULE) + 4:
            continue
        at = args.index(STUB_MODULE)
        if args[at + 2] != str(server_pid) or not is_running(pid):
            continue
        if instance is None or args[at + 3] == instance:
            found[pid] = args[at + 3]
    return found


def is_running(pid: int) -> bool:
    """The process exists and is not a zombie."""
    info = _parent_and_state(pid)
    return info is not None and info[1] != "Z"


def wait_until(predicate: Callable[[], bool], timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return bool(predicate())
