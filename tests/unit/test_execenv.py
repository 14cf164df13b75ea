"""Execution environments, the pure and filesystem parts: which archive members are refused,
the content-keyed cache (once per content, concurrent unpacking, a private directory), the
activation's variables, the parameter's substitution and the interpreter checks."""

from __future__ import annotations

import asyncio
import io
import marshal
import os
import shutil
import tarfile
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tritium.backends.python.backend import PythonBackend
from tritium.backends.python.envarchive import (
    ArchiveCache,
    ArchiveError,
    default_cache_dir,
    ensure_private_dir,
    extract,
    unsafe_member,
)
from tritium.backends.python.execenv import (
    NOT_AN_ENVIRONMENT,
    EnvironmentManager,
    PythonEnv,
    compatibility_problem,
    env_path_parameter,
)
from tritium.cli.main import build_parser, options_from_args
from tritium.config.model_config import ModelConfig
from tritium.errors import ErrorKind, ServerError
from tritium.options import ServerOptions


def _member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    return info


SAFE = [
    _member("bin/python3"),
    _member("lib", tarfile.DIRTYPE),
    _member("bin/python", tarfile.SYMTYPE, "python3.11"),
    _member("lib/a/b.so", tarfile.SYMTYPE, "../libb.so"),
    _member("bin/python3.11", tarfile.LNKTYPE, "bin/python3"),  # hard links: from the root
    _member("./etc/conf"),
]
UNSAFE = [
    (_member("/etc/passwd"), "has an absolute path"),
    (_member("../x"), "would be extracted outside"),
    (_member("a/../../x"), "would be extracted outside"),
    (_member(".."), "would be extracted outside"),
    (_member("lib/l", tarfile.SYMTYPE, "/etc"), "links to the absolute path '/etc'"),
    (_member("lib/l", tarfile.SYMTYPE, "../.."), "outside the environment"),
    (_member("l", tarfile.SYMTYPE, ".."), "outside the environment"),
    (_member("lib/h", tarfile.LNKTYPE, "../x"), "outside the environment"),
    (_member("dev/null", tarfile.CHRTYPE), "special file"),
    (_member("fifo", tarfile.FIFOTYPE), "special file"),
]


@pytest.mark.parametrize("member", SAFE, ids=[m.name for m in SAFE])
def test_members_inside_the_environment_are_accepted(member: tarfile.TarInfo) -> None:
    assert unsafe_member(member) is None


@pytest.mark.parametrize(("member", "why"), UNSAFE, ids=[m.name for m, _ in UNSAFE])
def test_members_leaving_the_environment_are_refused(member: tarfile.TarInfo, why: str) -> None:
    reason = unsafe_member(member)
    assert reason is not None and why in reason and f"'{member.name}'" in reason


def _archive(path: Path, members: list[tuple[tarfile.TarInfo, bytes]]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for info, data in members:
            info.size = len(data)
            info.mode = 0o755
            tar.addfile(info, io.BytesIO(data) if info.isfile() else None)
    return path


def _env_archive(path: Path, text: bytes = b"#!/bin/sh\n") -> Path:
    return _archive(path, [(_member("bin/python3"), text), (_member("bin/activate"), b"")])


def test_a_refused_member_writes_nothing(tmp_path: Path) -> None:
    archive = _archive(
        tmp_path / "a.tar.gz", [(_member("bin/python3"), b"x"), (_member("../evil"), b"x")]
    )
    (tmp_path / "out").mkdir()
    with pytest.raises(ArchiveError, match="'../evil' would be extracted outside"):
        extract(archive, tmp_path / "out")
    assert list((tmp_path / "out").iterdir()) == [] and not (tmp_path / "evil").exists()


def test_links_are_checked_on_disk_too(tmp_path: Path) -> None:
    # Lexically 't' -> 's/../x' stays inside, but 's' is a link to '.', so on disk 't'
    # leaves the tree: the data filter of tarfile catches what names alone cannot.
    archive = _archive(
        tmp_path / "a.tar.gz",
        [
            (_member("s", tarfile.SYMTYPE, "."), b""),
            (_member("t", tarfile.SYMTYPE, "s/../x"), b""),
            (_member("t/evil"), b"x"),
        ],
    )
    (tmp_path / "out").mkdir()
    with pytest.raises(ArchiveError, match="outside the destination"):
        extract(archive, tmp_path / "out")
    assert not (tmp_path / "x").exists()


def test_a_corrupt_archive_says_it_cannot_be_unpacked(tmp_path: Path) -> None:
    archive = tmp_path / "c.tar.gz"
    archive.write_bytes(b"not a tarball" * 100)
    with pytest.raises(ArchiveError, match="cannot unpack") as info:
        ArchiveCache(tmp_path / "cache").unpacked(archive)
    assert "\n" not in str(info.value)
    assert [p.name for p in (tmp_path / "cache").iterdir() if p.is_dir()] == []


def test_the_cache_is_keyed_by_content(tmp_path: Path) -> None:
    cache = ArchiveCache(tmp_path / "cache")
    first = _env_archive(tmp_path / "one.tar.gz")
    copy = tmp_path / "elsewhere" / "two.tar.gz"
    copy.parent.mkdir()
    shutil.copyfile(first, copy)
    other = _env_archive(tmp_path / "other.tar.gz", b"#!/bin/sh\n# another env\n")
    env = cache.unpacked(first)
    marker = env / "marker"
    marker.write_text("kept")  # re-unpacking would have lost it
    assert cache.unpacked(copy) == env and marker.exists()
    os.utime(first, (1, 1))  # touched, same bytes: still the same entry
    assert cache.unpacked(first) == env
    assert cache.unpacked(other) != env
    assert (env / "bin" / "python3").read_bytes() == b"#!/bin/sh\n"
    assert len([p for p in cache.root.iterdir() if p.is_dir()]) == 2


def test_concurrent_unpacks_of_one_archive_make_one_tree(tmp_path: Path) -> None:
    archive = _env_archive(tmp_path / "env.tar.gz")
    caches = [ArchiveCache(tmp_path / "cache") for _ in range(4)]  # as four servers would
    stale = tmp_path / "cache" / f".unpacking-{caches[0].digest(archive)}-dead"
    stale.mkdir(parents=True)  # a crash in the middle of an earlier unpack
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda c: c.unpacked(archive), caches))
    assert len(set(results)) == 1
    assert [p for p in (tmp_path / "cache").iterdir() if p.is_dir()] == [results[0]]


def test_the_cache_directory_is_private(tmp_path: Path) -> None:
    made = tmp_path / "new" / "cache"
    ensure_private_dir(made)
    assert made.stat().st_mode & 0o777 == 0o700
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(ArchiveError, match="not writable by group or others"):
        ensure_private_dir(shared)
    (tmp_path / "file").write_text("")
    with pytest.raises(ArchiveError, match="not a directory"):
        ensure_private_dir(tmp_path / "file")


def test_activation_is_tritons_without_the_servers_python_path() -> None:
    env = PythonEnv(Path("/envs/e"), Path("/envs/e/bin/python3"))
    base = {"PATH": "/usr/bin", "PYTHONPATH": "/srv/src", "PYTHONHOME": "/x", "HOME": "/root"}
    got = env.environ(base)
    assert got["PATH"] == "/envs/e/bin:/usr/bin"
    assert got["LD_LIBRARY_PATH"] == "/envs/e/lib"
    assert got["VIRTUAL_ENV"] == "/envs/e" and got["HOME"] == "/root"
    assert "PYTHONPATH" not in got and "PYTHONHOME" not in got
    assert env.command(["5", "1", "m_0"])[0] == "/envs/e/bin/python3"
    assert env.command(["5", "1", "m_0"])[1].endswith("envboot.py")
    assert env.command(["5", "1", "m_0"])[2:] == ["tritium.backends.python.stub", "5", "1", "m_0"]


def _parameters(value: str) -> object:
    config = ModelConfig()
    config.parameters["EXECUTION_ENV_PATH"].string_value = value
    return config.parameters


def test_the_model_directory_is_substituted() -> None:
    model = Path("/models/m")
    assert env_path_parameter(_parameters("$$TRITON_MODEL_DIRECTORY/e.tar.gz"), model) == Path(
        "/models/m/e.tar.gz"
    )
    assert env_path_parameter(_parameters("/envs/../envs/e"), model) == Path("/envs/e")
    assert env_path_parameter(_parameters("rel/e"), model) == Path.cwd() / "rel" / "e"
    assert env_path_parameter(_parameters("  "), model) is None
    assert env_path_parameter(ModelConfig().parameters, model) is None


GOOD = {"version": [3, 11, 7], "marshal": marshal.version, "numpy": "2.0.0"}


@pytest.mark.parametrize(
    ("facts", "problem"),
    [
        (GOOD, None),
        ({**GOOD, "version": [3, 13, 0]}, None),
        ({**GOOD, "version": [3, 8, 10]}, "Python is 3.8; tritium's Python stub needs 3.11"),
        ({**GOOD, "version": [2, 7, 18]}, "Python is 2.7"),
        ({**GOOD, "marshal": 99}, "marshal format 99"),
        (
            {"version": [3, 11, 7], "marshal": marshal.version, "numpy_error": "E: no numpy"},
            "numpy cannot be imported in the environment (E: no numpy)",
        ),
    ],
)
def test_interpreter_compatibility(facts: dict[str, object], problem: str | None) -> None:
    got = compatibility_problem(facts)
    assert got == problem if problem is None else (got is not None and problem in got)


def _fake_env(root: Path, script: str) -> Path:
    (root / "bin").mkdir(parents=True)
    python = root / "bin" / "python3"
    python.write_text(script)
    python.chmod(0o755)
    return root


@pytest.mark.parametrize(
    ("script", "why"),
    [
        ("#!/bin/sh\necho oops >&2\nexit 3\n", "failed (exit code 3): oops"),
        ("#!/bin/sh\necho hello\n", "is not Python"),
        ("#!/nonexistent/interpreter\n", "does not start"),
    ],
)
def test_an_interpreter_that_cannot_run_the_stub_fails_the_load(
    tmp_path: Path, script: str, why: str
) -> None:
    env = _fake_env(tmp_path / "env", script)
    manager = EnvironmentManager(tmp_path / "cache")
    with pytest.raises(ServerError) as info:
        asyncio.run(manager.prepare("m", env))
    assert info.value.kind is ErrorKind.UNAVAILABLE
    assert info.value.message.startswith(f"model 'm': EXECUTION_ENV_PATH '{env}': ")
    assert why in info.value.message


def test_paths_that_are_no_environment_share_one_reason(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Missing, not a file or directory, below a file, a file that is no archive, a
    directory without an interpreter: the reason does not tell them apart (a client's load
    request may name any server path); the log does."""
    (tmp_path / "plain.txt").write_text("not an archive")
    (tmp_path / "empty").mkdir()
    manager = EnvironmentManager(tmp_path / "cache")
    paths = {
        tmp_path / "missing.tar.gz": "no such file or directory",
        Path("/dev/null"): "no such file or directory",
        tmp_path / "plain.txt" / "below": "no such file or directory",
        tmp_path / "plain.txt": "cannot unpack",
        tmp_path / "empty": "has no bin/python3",
    }
    reasons = set()
    for path, logged in paths.items():
        caplog.clear()
        with pytest.raises(ServerError) as info:
            asyncio.run(manager.prepare("m", path))
        assert info.value.kind is ErrorKind.INVALID_ARG
        assert info.value.message == f"model 'm': EXECUTION_ENV_PATH '{path}': {NOT_AN_ENVIRONMENT}"
        reasons.add(info.value.message.replace(str(path), "<path>"))
        assert logged in caplog.text, (path, caplog.text)
    assert len(reasons) == 1


def test_a_cache_directory_problem_keeps_its_own_reason(tmp_path: Path) -> None:
    """The cache is the operator's (--python-env-cache-dir), not the model's path."""
    archive = tmp_path / "env.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        data = b"#!/bin/sh\n"
        info = tarfile.TarInfo("bin/python3")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    (tmp_path / "cache").write_text("a file, not a directory")
    manager = EnvironmentManager(tmp_path / "cache")
    with pytest.raises(ServerError, match="the environment cache .* is not a directory"):
        asyncio.run(manager.prepare("m", archive))


def test_the_cache_flag_reaches_the_backend(tmp_path: Path) -> None:
    def options(*flags: str) -> ServerOptions:
        args = build_parser().parse_args(["serve", "--model-repository", "r", *flags])
        return options_from_args(args)

    assert options().backends.python_env_cache_dir == ""
    assert (
        default_cache_dir() == Path(tempfile.gettempdir()) / f"tritium-python-envs-{os.geteuid()}"
    )
    chosen = options("--python-env-cache-dir", str(tmp_path / "envs")).backends.python_env_cache_dir
    backend = PythonBackend(None, chosen)
    assert backend._envs.cache.root == tmp_path / "envs"
    assert PythonBackend()._envs.cache.root == default_cache_dir()
