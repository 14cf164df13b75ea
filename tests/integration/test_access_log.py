"""The per-request access log (``--access-log-file``), end to end with the official clients:
HTTP and gRPC infers (unary, and ModelStreamInfer) and HTTP generate, successes and errors,
each give one JSON line with the expected fields; the identity of an authenticated client
(the token's name, the restricted-API header's name) and never a secret or a tensor value;
rotation at ``--access-log-max-bytes`` into ``--access-log-backup-count`` files."""

from __future__ import annotations

import json
import queue
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tests.support.clients import client, make_input
from tests.support.models import build_test_repository
from testkit.server_process import ServerProcess, server_command
from tests.support.stub_procs import wait_until
from tritonclient.utils import InferenceServerException

PROTOCOLS = ("http", "grpc")
TIMEOUT_S = 30.0
MARKER = 98765.4375  # a tensor value that must never reach the log
TOKEN = "tok-SECRET-0a1b2c3d"
KEY = "KEY-SECRET-4e5f6a7b"
BOUND = 2000  # bytes per access-log file on the guarded server
CODES = {  # (protocol, status) -> the transport's code
    ("http", "SUCCESS"): 200,
    ("http", "INTERNAL"): 500,
    ("http", "NOT_FOUND"): 404,
    ("grpc", "SUCCESS"): 0,
    ("grpc", "INTERNAL"): 13,
    ("grpc", "NOT_FOUND"): 5,
}


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("access_log") / "repo"
    return build_test_repository(root, ["identity_fp32", "raises", "text_echo", "text_stream"])


@pytest.fixture(scope="module")
def plain(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Path]]:
    path = tmp_path_factory.mktemp("plain") / "access.jsonl"
    proc = ServerProcess([repo], f"--access-log-file={path}")
    yield proc, path
    proc.stop()


@pytest.fixture(scope="module")
def guarded(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Path]]:
    root = tmp_path_factory.mktemp("guarded")
    tokens = root / "tokens"
    tokens.write_text(f"{TOKEN} * reader\n")
    path = root / "logs" / "access.jsonl"
    path.parent.mkdir()
    proc = ServerProcess(
        [repo],
        f"--access-log-file={path}",
        f"--access-log-max-bytes={BOUND}",
        "--access-log-backup-count=2",
        f"--auth-token-file={tokens}",
        f"--http-restricted-api=inference:infer-key={KEY}",
        f"--grpc-restricted-protocol=inference:infer-key={KEY}",
    )
    yield proc, path
    proc.stop()


def _all_lines(path: Path) -> list[dict[str, Any]]:
    """Every line of the log and its rotated files, oldest first."""
    files = sorted(path.parent.glob(path.name + ".*"), reverse=True) + [path]
    return [json.loads(line) for f in files if f.exists() for line in f.read_text().splitlines()]


def _line(path: Path, request_id: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = []

    def seen() -> bool:
        found[:] = [e for e in _all_lines(path) if e["request_id"] == request_id]
        return bool(found)

    assert wait_until(seen, TIMEOUT_S), (request_id, _all_lines(path)[-5:])
    assert len(found) == 1, found
    return found[0]


def _inputs(protocol: str) -> list[Any]:
    return [make_input(protocol, "INPUT0", np.array([MARKER, 1.0], dtype=np.float32), "FP32")]


def _infer(proc: ServerProcess, protocol: str, model: str, rid: str, headers: Any = None) -> bool:
    c = client(protocol, proc.url(protocol))
    try:
        c.infer(model, _inputs(protocol), request_id=rid, headers=headers)
        return True
    except InferenceServerException:
        return False
    finally:
        c.close()


def _check(entry: dict[str, Any], protocol: str, model: str, status: str) -> None:
    assert entry["protocol"] == protocol and entry["stream"] is False
    assert entry["peer"].startswith("127.0.0.1:")
    assert entry["model"] == model
    assert entry["status"] == status and entry["code"] == CODES[protocol, status]
    assert entry["bytes_in"] > 0 and entry["duration_us"] >= 0
    assert entry["identity"] is None and entry["api_key"] is None


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_successful_infer_has_its_line(plain: tuple[Any, Path], protocol: str) -> None:
    proc, path = plain
    assert _infer(proc, protocol, "identity_fp32", f"{protocol}-ok")
    entry = _line(path, f"{protocol}-ok")
    _check(entry, protocol, "identity_fp32", "SUCCESS")
    assert entry["version"] == "1" and entry["bytes_out"] > 0
    assert isinstance(entry["queue_us"], int) and entry["queue_us"] >= 0
    assert isinstance(entry["compute_us"], int) and entry["compute_us"] > 0
    assert entry["time"].endswith("Z")


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize(("model", "status"), [("raises", "INTERNAL"), ("nope", "NOT_FOUND")])
def test_a_failed_infer_has_its_line_with_the_error(
    plain: tuple[Any, Path], protocol: str, model: str, status: str
) -> None:
    proc, path = plain
    rid = f"{protocol}-{model}"
    assert not _infer(proc, protocol, model, rid)
    entry = _line(path, rid)
    _check(entry, protocol, model, status)
    if model == "nope":  # never reached a model: no times
        assert entry["version"] == "" and entry["queue_us"] is None
        assert entry["compute_us"] is None
    else:
        assert entry["version"] == "1" and isinstance(entry["queue_us"], int)


def test_stream_requests_each_have_a_line(plain: tuple[Any, Path]) -> None:
    proc, path = plain
    results: queue.Queue[tuple[Any, Any]] = queue.Queue()
    c = grpcclient.InferenceServerClient(proc.grpc_url)
    c.start_stream(callback=lambda result, error: results.put((result, error)))
    c.async_stream_infer("identity_fp32", _inputs("grpc"), request_id="stream-ok")
    c.async_stream_infer("raises", _inputs("grpc"), request_id="stream-bad")
    answers = [results.get(timeout=TIMEOUT_S) for _ in range(2)]
    c.stop_stream()
    c.close()
    assert answers[0][1] is None and answers[1][1] is not None
    ok, bad = _line(path, "stream-ok"), _line(path, "stream-bad")
    for entry in (ok, bad):
        assert entry["protocol"] == "grpc" and entry["stream"] is True
        assert entry["bytes_out"] > 0  # the in-stream error is a message too
    assert (ok["model"], ok["status"], ok["code"]) == ("identity_fp32", "SUCCESS", 0)
    assert (bad["model"], bad["status"], bad["code"]) == ("raises", "INTERNAL", 13)


def test_http_generate_has_its_line(plain: tuple[Any, Path]) -> None:
    proc, path = plain
    body = json.dumps({"id": "generate-1", "text_input": "abc"}).encode()
    url = f"http://{proc.http_url}/v2/models/text_echo/generate"
    with urllib.request.urlopen(urllib.request.Request(url, data=body), timeout=TIMEOUT_S) as r:
        answer = json.loads(r.read())
    assert answer["text_output"] == "cba"
    entry = _line(path, "generate-1")
    assert (entry["protocol"], entry["stream"], entry["model"]) == ("http", False, "text_echo")
    assert (entry["status"], entry["code"], entry["version"]) == ("SUCCESS", 200, "1")


def test_http_generate_stream_has_one_line_when_the_stream_ends(plain: tuple[Any, Path]) -> None:
    proc, path = plain
    body = json.dumps({"id": "generate-2", "text_input": "one two three"}).encode()
    url = f"http://{proc.http_url}/v2/models/text_stream/generate_stream"
    with urllib.request.urlopen(urllib.request.Request(url, data=body), timeout=TIMEOUT_S) as r:
        events = [line for line in r.read().split(b"\n") if line.startswith(b"data: ")]
    assert len(events) == 3
    entry = _line(path, "generate-2")
    assert (entry["protocol"], entry["stream"], entry["model"]) == ("http", True, "text_stream")
    assert (entry["status"], entry["code"]) == ("SUCCESS", 200)
    assert entry["bytes_out"] == sum(len(e) + 2 for e in events)  # each "data: ...\n\n"


def test_no_tensor_value_reaches_the_log(plain: tuple[Any, Path]) -> None:
    proc, path = plain
    assert _infer(proc, "http", "identity_fp32", "marker-http")
    assert _infer(proc, "grpc", "identity_fp32", "marker-grpc")
    _line(path, "marker-grpc")
    # No field holds the value, whole or either part of it (the timestamp and the counts are
    # numbers of their own, whose digits may hold a part by chance: compared whole).
    whole, part = str(MARKER), str(MARKER).split(".")
    for line in path.read_text().splitlines():
        for key, value in json.loads(line).items():
            shown = str(value)
            assert whole not in shown, (key, value)
            if key != "time" and not isinstance(value, int):
                assert not any(p in shown for p in part), (key, value)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_identity_is_named_and_no_secret_is(guarded: tuple[Any, Path], protocol: str) -> None:
    proc, path = guarded
    key = "infer-key" if protocol == "http" else "triton-grpc-protocol-infer-key"
    headers = {"authorization": f"Bearer {TOKEN}", key: KEY}
    assert _infer(proc, protocol, "identity_fp32", f"who-{protocol}", headers)
    entry = _line(path, f"who-{protocol}")
    assert (entry["identity"], entry["api_key"]) == ("reader", key)
    assert entry["status"] == "SUCCESS"
    every = "".join(f.read_text() for f in path.parent.iterdir())
    assert TOKEN not in every and KEY not in every


def test_rotation_at_the_bound(guarded: tuple[Any, Path]) -> None:
    proc, path = guarded
    key = "infer-key"
    headers = {"authorization": f"Bearer {TOKEN}", key: KEY}
    c = client("http", proc.http_url)
    for index in range(25):
        c.infer("identity_fp32", _inputs("http"), request_id=f"rot-{index}", headers=headers)
    c.close()
    _line(path, "rot-24")
    names = sorted(f.name for f in path.parent.iterdir())
    assert names == ["access.jsonl", "access.jsonl.1", "access.jsonl.2"], names
    assert all(f.stat().st_size <= BOUND for f in path.parent.iterdir())
    ids = [e["request_id"] for e in _all_lines(path) if e["request_id"].startswith("rot-")]
    assert ids == [f"rot-{i}" for i in range(25)][-len(ids) :]  # the newest kept, in order


def test_an_unopenable_access_log_stops_the_server(repo: Path, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-dir" / "access.jsonl"
    done = subprocess.run(
        server_command([repo], f"--access-log-file={missing}"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert f"--access-log-file: cannot open '{missing}'" in done.stderr
