"""System shm keys are POSIX shm names (what glibc's ``shm_open`` accepts), never paths; the
manager opens them only as regular files inside the shm directory."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from tritium.errors import ErrorKind, ServerError
from tritium.extensions.shm import NAME_MAX, SharedMemoryManager, posix_shm_name


@pytest.mark.parametrize(
    ("key", "name"),
    [
        ("/region", "region"),
        ("region", "region"),
        ("//region", "region"),  # glibc drops every leading '/'
        ("/a.b-c_d", "a.b-c_d"),
        ("/..a", "..a"),
        ("/" + "k" * NAME_MAX, "k" * NAME_MAX),
        ("/" + "é" * 127, "é" * 127),  # 254 bytes
    ],
)
def test_valid_names(key: str, name: str | None) -> None:
    assert posix_shm_name(key) == name


@pytest.mark.parametrize(
    "key",
    [
        "",
        "/",
        "///",
        ".",
        "..",
        "/.",
        "/..",
        "../x",
        "/../../etc/passwd",
        "a/b",
        "/a/",
        "/a\x00b",
        "/" + "k" * (NAME_MAX + 1),
        "/" + "é" * 128,  # 256 bytes in UTF-8
        "/\udc80",  # a lone surrogate names no file
    ],
)
def test_invalid_names(key: str) -> None:
    assert posix_shm_name(key) is None


@pytest.fixture
def entry() -> Iterator[Path]:
    path = Path("/dev/shm", f"tritium_unit_{uuid.uuid4().hex[:12]}")
    yield path
    if path.is_dir() and not path.is_symlink():
        path.rmdir()
    else:
        path.unlink(missing_ok=True)


def _refused(manager: SharedMemoryManager, key: str) -> ServerError:
    with pytest.raises(ServerError) as info:
        manager.register("r", key, 0, 8)
    assert info.value.kind is ErrorKind.INVALID_ARG
    assert manager.status() == []
    return info.value


def test_symlink_directory_and_fifo_are_refused(entry: Path, tmp_path: Path) -> None:
    manager = SharedMemoryManager(True)
    target = tmp_path / "host"
    target.write_bytes(bytes(64))
    entry.symlink_to(target)
    assert "Unable to open shared memory region" in _refused(manager, "/" + entry.name).message
    entry.unlink()
    entry.mkdir()
    assert "Unable to open shared memory region" in _refused(manager, "/" + entry.name).message
    entry.rmdir()
    os.mkfifo(entry)
    assert "Unable to open shared memory region" in _refused(manager, "/" + entry.name).message


def test_regions_hold_one_descriptor_until_unregistered(entry: Path) -> None:
    entry.write_bytes(bytes(64))
    manager = SharedMemoryManager(True)
    manager.register("r", "/" + entry.name, 0, 64)
    region = manager._regions["r"]
    assert os.fstat(region.fd).st_size == 64
    manager.unregister("r")
    assert region.fd == -1 and region.map.closed


def test_disabled_manager_refuses_every_route() -> None:
    manager = SharedMemoryManager(False)
    for call in (lambda: manager.register("r", "/r", 0, 8), manager.unregister, manager.status):
        with pytest.raises(ServerError) as info:
            call()
        assert info.value.kind is ErrorKind.UNSUPPORTED
