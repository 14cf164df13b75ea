"""Private directories under ``$TMPDIR`` that a process removes when it stops (the models
loaded from a load request's ``file:`` overrides; with ``--workers``, the supervisor's copy
of those uploads): ``tritium-<kind>-<pid>-<random>``, with a ``.lock`` file the owner holds
locked (``flock``) while it lives. A process killed (-9) cannot remove its own, so every
server sweeps, when it starts, the directories of its kind whose owner is gone: the pid in
the name is not running here, and the lock (released by the kernel when its holder dies,
whatever pid namespace it was in) can be taken. A directory of another user, or a name
without a pid, is left alone.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import stat
import tempfile
from pathlib import Path

log = logging.getLogger("tritium")

_LOCK = ".lock"


class Scratch:
    """One process's directory of ``kind``, locked until ``remove``."""

    def __init__(self, kind: str) -> None:
        self.path = Path(tempfile.mkdtemp(prefix=f"tritium-{kind}-{os.getpid()}-"))
        self._lock = os.open(self.path / _LOCK, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
        fcntl.flock(self._lock, fcntl.LOCK_EX)

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
        if self._lock >= 0:
            os.close(self._lock)
            self._lock = -1


def sweep(kind: str) -> list[Path]:
    """Remove the directories of ``kind`` in ``$TMPDIR`` left by processes that are gone;
    the ones removed."""
    prefix = f"tritium-{kind}-"
    removed: list[Path] = []
    try:
        entries = list(os.scandir(tempfile.gettempdir()))
    except OSError:
        return removed
    for entry in entries:
        if not entry.name.startswith(prefix):
            continue
        pid = entry.name[len(prefix) :].partition("-")[0]
        if not pid.isdigit() or _running(int(pid)) or not _ours(entry):
            continue
        if _remove_unlocked(Path(entry.path)):
            removed.append(Path(entry.path))
    if removed:
        log.info("removed %d %s directories left by stopped servers", len(removed), kind)
    return removed


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _ours(entry: os.DirEntry[str]) -> bool:
    try:
        info = entry.stat(follow_symlinks=False)
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid()


def _remove_unlocked(path: Path) -> bool:
    """Remove ``path`` unless its owner still holds its lock."""
    try:
        fd = os.open(path / _LOCK, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
    except FileNotFoundError:  # died before it made its lock, or a directory of old
        fd = -1
    except OSError:
        return False
    try:
        if fd >= 0:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:  # held: its owner lives (in another pid namespace)
                return False
        shutil.rmtree(path, ignore_errors=True)
        return True
    finally:
        if fd >= 0:
            os.close(fd)
