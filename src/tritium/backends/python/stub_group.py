"""The keeper of a stub's process group: a model's own children die with its stub, and with
the server even when the server is killed.

``PR_SET_PDEATHSIG`` kills a stub when the server dies, but it is per process: a child the
model forked (multiprocessing) or spawned would outlive both. The server starts each stub in
a process group of its own and kills the group when the stub exits
(``process.StubProcess``), which it cannot do once it was SIGKILLed itself. So each stub starts
one small watcher in its group (``start``, a bare interpreter, standard library only): it waits
on pidfds of the server and of the stub, and when either exits it kills the group, itself
included. Only a model child that leaves the group (``setsid``) escapes it.
"""

from __future__ import annotations

import os
import subprocess
import sys

_WATCH = """\
import os, select, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
try:
    select.select([int(fd) for fd in sys.argv[1:]], [], [])
finally:
    os.killpg(0, signal.SIGKILL)
"""
_keeper: subprocess.Popen[bytes] | None = None  # held so that it is never collected


def start(server_pid: int) -> bool:
    """Start the group's watcher; False where it cannot watch (no pidfd, the server already
    gone) or must not (this process does not lead a group of its own, e.g. a stub started by
    hand: killing the group would kill whoever started it)."""
    global _keeper
    if not hasattr(os, "pidfd_open") or os.getpgid(0) != os.getpid():
        return False
    fds: list[int] = []
    try:
        fds = [os.pidfd_open(server_pid), os.pidfd_open(os.getpid())]
        _keeper = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _WATCH, *map(str, fds)],
            pass_fds=fds,
            stdin=subprocess.DEVNULL,
        )
    except OSError:
        return False
    finally:
        for fd in fds:
            os.close(fd)
    return True
