"""EXECUTION_ENV_PATH end to end (HTTP and gRPC): a model runs under its execution
environment's interpreter and sees that environment's packages, not the server's.

Environments are built here without network (tests/support/python_envs.py): ``venv_a`` (a venv
directory, ``tritium_envprobe`` 2.0) is used in place; ``venv_b`` (``tritium_envprobe`` 3.0)
is packed as a conda-pack-like ``.tar.gz``, named through ``$$TRITON_MODEL_DIRECTORY`` by one
model and by absolute path (a copy, same content) by another: it is unpacked once, into one
content-keyed directory of the cache. Bad environments fail their model's load while the
others serve: a path that cannot be an environment (missing, unreadable, a file that is no
archive, a refused archive, a directory without an interpreter) with one reason that does not
tell what is at the path (a client's load request may name any server path), the server's
log saying what was found; an interpreter that cannot run the stub with its own reason.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tests.support.clients import client, make_input
from tests.support.python_envs import (
    PROBE_MODEL,
    make_venv,
    member,
    numpy_only_dir,
    pack,
    write_probe_model,
)
from testkit.server_process import ServerProcess
from tests.support.stub_procs import stub_pids, wait_until
from tritium.backends.python.execenv import NOT_AN_ENVIRONMENT
from tritonclient.utils import InferenceServerException

ARCHIVE = "env.tar.gz"
# model -> (what its reason must say, what the server's log says) for the environments that
# cannot serve
BAD = {
    "bad_missing_py": (NOT_AN_ENVIRONMENT, "no such file or directory"),
    "bad_corrupt_py": (NOT_AN_ENVIRONMENT, "cannot unpack"),
    "bad_escape_py": (
        NOT_AN_ENVIRONMENT,
        "member '../escaped.txt' would be extracted outside the environment",
    ),
    "bad_link_py": (
        NOT_AN_ENVIRONMENT,
        "member 'lib/out' links to '../../..', outside the environment",
    ),
    "bad_numpy_py": ("numpy cannot be imported in the environment", ""),
}


@pytest.fixture(scope="module")
def layout(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("execenv")
    shim = numpy_only_dir(root)
    venv_a = make_venv(root / "venv_a", "2.0", shim)
    venv_b = make_venv(root / "venv_b", "3.0", shim, copies=True)
    no_numpy = make_venv(root / "venv_no_numpy", "9.9", None)
    repo = root / "repo"
    write_probe_model(repo, "plain_py", None)
    write_probe_model(repo, "env_dir_py", str(venv_a))
    tar_model = write_probe_model(repo, "env_tar_py", f"$$TRITON_MODEL_DIRECTORY/{ARCHIVE}")
    pack(venv_b, tar_model / ARCHIVE)
    shared = root / "shared" / "copy.tar.gz"
    shared.parent.mkdir()
    shutil.copyfile(tar_model / ARCHIVE, shared)  # another path (and mtime), same content
    write_probe_model(repo, "env_tar_twin_py", str(shared))
    write_probe_model(repo, "bad_missing_py", "$$TRITON_MODEL_DIRECTORY/missing.tar.gz")
    corrupt = write_probe_model(repo, "bad_corrupt_py", "$$TRITON_MODEL_DIRECTORY/c.tar.gz")
    (corrupt / "c.tar.gz").write_bytes(b"\x1f\x8b\x08\x00 this is not a tarball" * 10)
    escape = write_probe_model(repo, "bad_escape_py", f"$$TRITON_MODEL_DIRECTORY/{ARCHIVE}")
    pack(venv_b, escape / ARCHIVE, [member("../escaped.txt")])
    link = write_probe_model(repo, "bad_link_py", f"$$TRITON_MODEL_DIRECTORY/{ARCHIVE}")
    pack(venv_b, link / ARCHIVE, [member("lib/out", tarfile.SYMTYPE, "../../..")])
    write_probe_model(repo, "bad_numpy_py", str(no_numpy))
    return {"root": root, "repo": repo, "venv_a": venv_a, "cache": root / "cache"}


@pytest.fixture(scope="module")
def server(layout: dict[str, Path]) -> Iterator[ServerProcess]:
    proc = ServerProcess(
        [layout["repo"]],
        "--model-control-mode=explicit",
        "--load-model=*",
        "--exit-on-error=false",
        "--python-env-cache-dir",
        str(layout["cache"]),
    )
    yield proc
    proc.stop()


def _facts(server: ServerProcess, protocol: str, model: str) -> dict[str, Any]:
    c = client(protocol, server.url(protocol))
    try:
        data = np.array([1], dtype=np.int32)
        result = c.infer(model, [make_input(protocol, "INPUT0", data, "INT32")])
    finally:
        c.close()
    return json.loads(result.as_numpy("OUTPUT0")[0])


def _unpacked(layout: dict[str, Path]) -> Path:
    digest = hashlib.sha256((layout["repo"] / "env_tar_py" / ARCHIVE).read_bytes()).hexdigest()
    return layout["cache"] / digest


def test_a_venv_directory_is_used_in_place(
    server: ServerProcess, layout: dict[str, Path], protocol: str
) -> None:
    facts = _facts(server, protocol, "env_dir_py")
    venv = layout["venv_a"]
    assert facts["probe"] == "2.0"
    assert facts["executable"] == str(venv / "bin" / "python3")
    assert facts["prefix"] == str(venv)
    assert facts["virtual_env"] == str(venv) and facts["path0"] == str(venv / "bin")
    assert facts["server_package_visible"] is False  # the server's tritonclient stays out


def test_an_archive_runs_unpacked_from_the_cache(
    server: ServerProcess, layout: dict[str, Path], protocol: str
) -> None:
    unpacked = _unpacked(layout)
    for model in ("env_tar_py", "env_tar_twin_py"):  # one content: one unpacked environment
        facts = _facts(server, protocol, model)
        assert facts["probe"] == "3.0"
        assert facts["executable"] == str(unpacked / "bin" / "python3")
        assert facts["prefix"] == str(unpacked)
        assert facts["server_package_visible"] is False


def test_a_model_without_an_environment_runs_on_the_servers_python(
    server: ServerProcess, protocol: str
) -> None:
    facts = _facts(server, protocol, "plain_py")
    assert facts["probe"] is None
    assert facts["server_package_visible"] is True


def test_the_archive_is_unpacked_once_per_content(
    server: ServerProcess, layout: dict[str, Path], protocol: str
) -> None:
    cache, unpacked = layout["cache"], _unpacked(layout)
    assert oct(cache.stat().st_mode & 0o777) == oct(0o700)
    assert [p for p in cache.iterdir() if p.is_dir()] == [unpacked]  # nothing half-unpacked
    python = unpacked / "bin" / "python3"
    before = python.stat().st_ino
    archive = layout["repo"] / "env_tar_py" / ARCHIVE
    os.utime(archive, (1_000_000_000, 1_000_000_000))  # touched, same content
    c = client(protocol, server.url(protocol))
    try:
        c.load_model("env_tar_py")  # a reload: a new version of the model, new stubs
        assert c.is_model_ready("env_tar_py")
    finally:
        c.close()
    assert python.stat().st_ino == before  # reused, not unpacked again
    assert [p for p in cache.iterdir() if p.is_dir()] == [unpacked]
    assert _facts(server, protocol, "env_tar_py")["probe"] == "3.0"


def _index(server: ServerProcess, protocol: str) -> dict[str, dict[str, Any]]:
    c = client(protocol, server.url(protocol))
    try:
        rows = (
            c.get_model_repository_index()
            if protocol == "http"
            else c.get_model_repository_index(as_json=True).get("models", [])
        )
    finally:
        c.close()
    return {row["name"]: row for row in rows}


@pytest.mark.parametrize(("model", "reasons"), BAD.items(), ids=list(BAD))
def test_a_bad_environment_fails_the_load_with_its_reason(
    server: ServerProcess,
    layout: dict[str, Path],
    protocol: str,
    model: str,
    reasons: tuple[str, str],
) -> None:
    reason, logged = reasons
    row = _index(server, protocol)[model]
    assert row["state"] == "UNAVAILABLE", row
    assert "EXECUTION_ENV_PATH" in row["reason"] and reason in row["reason"], row
    if logged:  # the reason hides what is at the path; the server's log says it
        assert logged not in row["reason"], row
        assert logged in server.log_text()
    c = client(protocol, server.url(protocol))
    try:
        with pytest.raises(InferenceServerException, match="EXECUTION_ENV_PATH"):
            c.load_model(model)  # loading again says why again
        assert c.is_model_ready(model) is False
    finally:
        c.close()
    assert not list(layout["root"].rglob("escaped.txt"))  # nothing written outside
    assert _facts(server, protocol, "env_dir_py")["probe"] == "2.0"  # the others serve


def test_a_restarted_stub_runs_in_the_environment_again(
    server: ServerProcess, layout: dict[str, Path], protocol: str
) -> None:
    instance = "env_dir_py_0_0"
    pids = stub_pids(server.proc.pid, instance)  # found by its command line, as any stub
    assert len(pids) == 1, pids
    old = next(iter(pids))
    os.kill(old, signal.SIGKILL)
    assert wait_until(lambda: list(stub_pids(server.proc.pid, instance)) not in ([], [old]))
    assert wait_until(lambda: _ready(server, protocol, "env_dir_py"))
    facts = _facts(server, protocol, "env_dir_py")
    assert facts["probe"] == "2.0"
    assert facts["executable"] == str(layout["venv_a"] / "bin" / "python3")


def _ready(server: ServerProcess, protocol: str, model: str) -> bool:
    c = client(protocol, server.url(protocol))
    try:
        return bool(c.is_model_ready(model))
    finally:
        c.close()


def _load_with_env(server: ServerProcess, protocol: str, name: str, env: str) -> str:
    """A client's load request whose config names ``env``: the reason it fails with."""
    config = {
        "backend": "python",
        "max_batch_size": 0,
        "input": [{"name": "INPUT0", "data_type": "TYPE_INT32", "dims": [1]}],
        "output": [{"name": "OUTPUT0", "data_type": "TYPE_STRING", "dims": [1]}],
        "parameters": {"EXECUTION_ENV_PATH": {"string_value": env}},
    }
    c = client(protocol, server.url(protocol))
    try:
        with pytest.raises(InferenceServerException) as info:
            c.load_model(
                name, config=json.dumps(config), files={"file:1/model.py": PROBE_MODEL.encode()}
            )
        return str(info.value.message())
    finally:
        c.close()


def test_a_load_request_cannot_learn_whether_a_server_path_exists(
    server: ServerProcess, layout: dict[str, Path], protocol: str
) -> None:
    """A client names server paths as its model's environment: a missing one, an existing
    file that is no archive, an existing directory that is no environment, a device. The
    answers are the same but for the path the client sent itself: since issue 44 each is
    refused before it is looked at (a client's EXECUTION_ENV_PATH must be
    ``$$TRITON_MODEL_DIRECTORY/<path>``, test_load_overrides.py)."""
    missing = layout["root"] / "no" / "such" / "env"
    probes = [str(missing), "/etc/passwd", "/etc", "/dev/null", "/etc/passwd/below"]
    answers = set()
    for n, path in enumerate(probes):
        reason = _load_with_env(server, protocol, f"probe_{protocol}_{n}", path)
        assert "must start with '$$TRITON_MODEL_DIRECTORY/'" in reason, reason
        answers.add(reason.replace(path, "<path>").replace(f"probe_{protocol}_{n}", "<model>"))
    assert len(answers) == 1, answers
