"""repository/scratch.py: a process's scratch directory, and the sweep at start of those
whose process is gone (killed -9: nothing else removes them)."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tritium.repository.scratch import Scratch, sweep


@pytest.fixture
def tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _left(tmp: Path, name: str) -> Path:
    """A directory as a process killed while it held files leaves it."""
    path = tmp / name
    (path / "load-x" / "m" / "1").mkdir(parents=True)
    (path / "load-x" / "m" / "1" / "model.py").write_text("x")
    return path


def test_a_dead_processs_directory_is_swept_and_a_live_ones_kept(tmp: Path) -> None:
    dead = _left(tmp, f"tritium-overrides-{_dead_pid()}-abc")
    live = _left(tmp, f"tritium-overrides-{os.getpid()}-abc")
    other_kind = _left(tmp, f"tritium-uploads-{_dead_pid()}-abc")
    no_pid = _left(tmp, "tritium-overrides-k2j3h4")  # named before pids were: whose?
    assert sweep("overrides") == [dead]
    assert not dead.exists()
    assert live.exists() and other_kind.exists() and no_pid.exists()
    assert sweep("uploads") == [other_kind]


def test_a_directory_whose_lock_is_held_is_kept(tmp: Path) -> None:
    """The pid in the name may be another pid namespace's: the lock tells."""
    held = _left(tmp, f"tritium-overrides-{_dead_pid()}-abc")
    fd = os.open(held / ".lock", os.O_CREAT | os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        probe = "from tritium.repository.scratch import sweep; print(len(sweep('overrides')))"
        env = {**os.environ, "TMPDIR": str(tmp)}
        swept = subprocess.run(
            [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
        )
        assert swept.stdout.strip() == "0"
        assert held.exists()
    finally:
        os.close(fd)
    assert sweep("overrides") == [held]


def test_a_scratch_directory_is_its_processs_until_removed(tmp: Path) -> None:
    scratch = Scratch("overrides")
    assert scratch.path.parent == tmp
    assert scratch.path.name.startswith(f"tritium-overrides-{os.getpid()}-")
    assert sweep("overrides") == []
    scratch.remove()
    assert not scratch.path.exists()


def test_another_users_or_a_link_is_left(tmp: Path) -> None:
    target = _left(tmp, "elsewhere")
    link = tmp / f"tritium-overrides-{_dead_pid()}-abc"
    link.symlink_to(target)
    assert sweep("overrides") == []
    assert target.exists() and link.is_symlink()
