"""Hostile and careless system shared-memory clients (issue 10, items 1 and 9).

A key is a POSIX shm name, as Triton's ``shm_open`` takes it: it never reaches a file outside
the shm directory (``../`` keys, ``a/b`` keys, symbolic links planted in /dev/shm), and only a
regular file there is mapped (no directory, no FIFO). A client that shrinks its object after
registering it gets an error when a request uses the region, and the server keeps serving
(touching the missing pages would kill it with SIGBUS).

Everything a test creates (host files under ``tmp_path``, entries in /dev/shm, client regions)
is removed in a ``finally``; every name carries the protocol and a uuid.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.utils.shared_memory as shm
from tests.support.clients import add_sub_inputs, assert_simple_works, client, make_input, module
from testkit.server_process import ServerProcess
from tritonclient.utils import InferenceServerException

SHM_DIR = Path("/dev/shm")
TENSOR_BYTES = 16 * 4  # one [1, 16] INT32 tensor of ``simple``
SHAPE = [1, 16]
SECRET = np.arange(100, 116, dtype=np.int32).reshape(SHAPE)  # a host file's known bytes
BAD_STATUS = {"http": "400", "grpc": "StatusCode.INVALID_ARGUMENT"}


@pytest.fixture(scope="module")
def shm_server(example_repo: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess([example_repo], "--allow-client-shm=true")
    yield proc
    proc.stop()


@pytest.fixture
def triton(shm_server: ServerProcess, protocol: str) -> Iterator[Any]:
    c = client(protocol, shm_server.url(protocol))
    yield c
    c.close()


@pytest.fixture
def unique(protocol: str) -> str:
    return f"tritium_test_{protocol}_{uuid.uuid4().hex[:12]}"


@pytest.fixture
def host_file(tmp_path: Path) -> Iterator[Path]:
    """A file outside /dev/shm with known bytes, which no client may read or write."""
    path = tmp_path / "host_secret.bin"
    path.write_bytes(SECRET.tobytes())
    yield path
    path.unlink(missing_ok=True)


@pytest.fixture
def planted(unique: str) -> Iterator[list[Path]]:
    """Entries a test creates in /dev/shm, removed afterwards (deepest first)."""
    paths: list[Path] = []
    yield paths
    for path in reversed(paths):
        if path.is_dir() and not path.is_symlink():
            path.rmdir()
        else:
            path.unlink(missing_ok=True)


def shm_input(protocol: str, name: str, region: str, byte_size: int = TENSOR_BYTES) -> Any:
    inp = module(protocol).InferInput(name, SHAPE, "INT32")
    inp.set_shared_memory(region, byte_size)
    return inp


def shm_output(protocol: str, name: str, region: str, byte_size: int = TENSOR_BYTES) -> Any:
    out = module(protocol).InferRequestedOutput(name)
    out.set_shared_memory(region, byte_size)
    return out


def expect_error(
    protocol: str, call: Callable[[], Any], *phrases: str, status: str | None = None
) -> None:
    with pytest.raises(InferenceServerException) as info:
        call()
    exc = info.value
    if status is not None:
        assert exc.status() == status, f"status {exc.status()!r}: {exc}"
    message = exc.message() or ""
    for phrase in phrases:
        assert phrase in message, f"{phrase!r} not in {message!r}"


def registered_names(c: Any, protocol: str) -> set[str]:
    status = c.get_system_shared_memory_status()
    if protocol == "http":
        return {r["name"] for r in status}
    return set(status.regions)


def refuse_key(c: Any, protocol: str, name: str, key: str, *phrases: str) -> None:
    """Registering ``key`` fails with INVALID_ARG; nothing is registered; had it been (the bug
    this guards against), the region is used as input and output and then dropped, so the
    assertions about the host file below still run."""
    try:
        expect_error(
            protocol,
            lambda: c.register_system_shared_memory(name, key, TENSOR_BYTES),
            *phrases,
            status=BAD_STATUS[protocol],
        )
    finally:
        if name in registered_names(c, protocol):
            inputs = [
                shm_input(protocol, "INPUT0", name),
                make_input(protocol, "INPUT1", np.ones(SHAPE, dtype=np.int32), "INT32"),
            ]
            try:
                c.infer("simple", inputs, outputs=[shm_output(protocol, "OUTPUT1", name)])
            finally:
                c.unregister_system_shared_memory(name)
    assert name not in registered_names(c, protocol)
    assert_simple_works(c, protocol)


def assert_untouched(path: Path) -> None:
    assert path.read_bytes() == SECRET.tobytes(), "a client wrote to a host file through shm"


# ------------------------------------------------------------------ keys that leave /dev/shm


@pytest.mark.parametrize("form", ["slash-dotdot", "dotdot", "deep"])
def test_dotdot_key_cannot_reach_a_host_file(
    triton: Any, protocol: str, unique: str, host_file: Path, form: str
) -> None:
    relative = os.path.relpath(host_file, SHM_DIR)  # ../tmp/.../host_secret.bin
    key = {
        "slash-dotdot": "/" + relative,
        "dotdot": relative,
        "deep": "/../../../../../../.." + str(host_file),  # like /../../etc/passwd
    }[form]
    assert (SHM_DIR / key.lstrip("/")).resolve() == host_file.resolve()
    refuse_key(triton, protocol, unique, key, "invalid shm key", unique)
    assert_untouched(host_file)


def test_key_with_a_subdirectory_is_refused(
    triton: Any, protocol: str, unique: str, planted: list[Path]
) -> None:
    """``a/b``: a regular file in a directory under /dev/shm is not a shm object either."""
    directory = SHM_DIR / unique
    directory.mkdir()
    planted.append(directory)
    inner = directory / "inner"
    inner.write_bytes(SECRET.tobytes())
    planted.append(inner)
    refuse_key(triton, protocol, unique, f"/{unique}/inner", "invalid shm key")
    assert inner.read_bytes() == SECRET.tobytes()


def test_symlink_in_shm_dir_to_a_host_file_is_refused(
    triton: Any, protocol: str, unique: str, host_file: Path, planted: list[Path]
) -> None:
    link = SHM_DIR / unique
    link.symlink_to(host_file)
    planted.append(link)
    refuse_key(triton, protocol, unique, f"/{unique}", "Unable to open shared memory region")
    assert_untouched(host_file)


@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_non_regular_object_is_refused(
    triton: Any, protocol: str, unique: str, planted: list[Path], kind: str
) -> None:
    path = SHM_DIR / unique
    if kind == "directory":
        path.mkdir()
    else:
        os.mkfifo(path)
    planted.append(path)
    refuse_key(triton, protocol, unique, f"/{unique}", "Unable to open shared memory region")


@pytest.mark.parametrize(
    "key",
    ["", "/", "//", ".", "..", "/.", "/..", "/a\x00b", "/" + "k" * 256],
    ids=["empty", "slash", "slashes", "dot", "dotdot", "slash-dot", "slash-dotdot", "nul", "long"],
)
def test_malformed_keys(triton: Any, protocol: str, unique: str, key: str) -> None:
    """Triton's text for a key that is no shm name (ValidateSharedMemoryKey)."""
    refuse_key(
        triton,
        protocol,
        unique,
        key,
        f"cannot register shared memory region '{unique}' - invalid shm key",
    )


def test_huge_key_is_refused_with_a_bounded_message(
    triton: Any, protocol: str, unique: str
) -> None:
    """A 1 MB key: the message echoes only its start, so it still fits a gRPC status."""
    refuse_key(triton, protocol, unique, "/" + "k" * 1_000_000, "invalid shm key '/kkk", "...'")


def test_reserved_key_prefix(triton: Any, protocol: str, unique: str) -> None:
    key = f"/triton_python_backend_shm_region_{unique}"
    refuse_key(triton, protocol, unique, key, "the key contains the reserved prefix")


def test_longest_and_slash_prefixed_names_still_work(
    triton: Any, protocol: str, unique: str
) -> None:
    """A name of NAME_MAX bytes is a name (absent here: 'Unable to open'); glibc's shm_open
    drops every leading '/', so does the server: '//key' opens the client's '/key'."""
    longest = "/" + unique + "x" * (255 - len(unique))
    refuse_key(triton, protocol, unique, longest, "Unable to open shared memory region")
    handle = shm.create_shared_memory_region(unique, f"/{unique}", TENSOR_BYTES, create_only=True)
    try:
        a, b = add_sub_inputs(protocol)[1:]
        shm.set_shared_memory_region(handle, [b])
        triton.register_system_shared_memory(unique, f"//{unique}", TENSOR_BYTES)
        try:
            result = triton.infer(
                "simple",
                [make_input(protocol, "INPUT0", a, "INT32"), shm_input(protocol, "INPUT1", unique)],
            )
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
        finally:
            triton.unregister_system_shared_memory(unique)
    finally:
        shm.destroy_shared_memory_region(handle)


# ------------------------------------------------------------------ objects truncated by clients


@pytest.fixture
def truncatable(triton: Any, unique: str) -> Iterator[tuple[str, int]]:
    """A registered region over an object of 2 tensors; yields (region name, object fd)."""
    handle = shm.create_shared_memory_region(
        unique, f"/{unique}", 2 * TENSOR_BYTES, create_only=True
    )
    fd = os.open(SHM_DIR / unique, os.O_RDWR)
    try:
        a, b = add_sub_inputs("http")[1:]
        shm.set_shared_memory_region(handle, [a, b])
        triton.register_system_shared_memory(unique, f"/{unique}", 2 * TENSOR_BYTES)
        yield unique, fd
    finally:
        try:
            triton.unregister_system_shared_memory(unique)
        finally:
            os.close(fd)
            shm.destroy_shared_memory_region(handle)


@pytest.mark.parametrize("size", [0, TENSOR_BYTES + 8], ids=["empty", "half"])
@pytest.mark.parametrize("use", ["input", "output"])
def test_truncated_region_is_an_error_not_a_crash(
    triton: Any,
    protocol: str,
    shm_server: ServerProcess,
    truncatable: tuple[str, int],
    use: str,
    size: int,
) -> None:
    name, fd = truncatable
    second = shm_input(protocol, "INPUT1", name)
    second.set_shared_memory(name, TENSOR_BYTES, offset=TENSOR_BYTES)
    if use == "input":
        inputs, outputs = [shm_input(protocol, "INPUT0", name), second], None
    else:
        inputs = add_sub_inputs(protocol)[0]
        outputs = [shm_output(protocol, "OUTPUT0", name), shm_output(protocol, "OUTPUT1", name)]
        outputs[1].set_shared_memory(name, TENSOR_BYTES, offset=TENSOR_BYTES)
    triton.infer("simple", inputs, outputs=outputs)  # fine while the object is whole

    os.ftruncate(fd, size)
    expect_error(
        protocol,
        lambda: triton.infer("simple", inputs, outputs=outputs),
        f"shared memory region '{name}' is no longer usable",
        "truncated",
        status=BAD_STATUS[protocol],
    )
    assert shm_server.proc.poll() is None, shm_server.log_text()
    assert_simple_works(triton, protocol)

    # The client grows its object back: the same registration serves requests again.
    os.ftruncate(fd, 2 * TENSOR_BYTES)
    a, b = add_sub_inputs(protocol)[1:]
    os.pwrite(fd, a.tobytes() + b.tobytes(), 0)
    result = triton.infer("simple", inputs, outputs=outputs)
    if use == "input":
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    else:
        got = np.frombuffer(os.pread(fd, 2 * TENSOR_BYTES, 0), dtype=np.int32).reshape(2, 16)
        np.testing.assert_array_equal(got, np.concatenate([a + b, a - b]))
