"""What keeps its whole-server meaning across ``--workers N``: ``--max-inflight-per-client``
counts a client once, whichever workers its connections land on; the access log is one file
the workers rotate together; the Triton trace file is one array once the server stops.

One server per worker count (2 and 3, module-scoped) with a bound of 2, the Python ``gate``
model (holds its requests until a file exists) and ``identity_fp32``. Every probe opens a
fresh connection (gRPC: a subchannel of its own), so the probes spread over the workers.
A second client host (127.0.0.2) reaches the server through ``tests/support/relay.py``.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

from tests.integration.test_access_control import _gate_model, _in_background, _running
from tests.support.clients import add_sub_inputs, client, make_input
from tests.support.models import build_test_repository
from tests.support.relay import Relay
from testkit.server_process import ServerProcess

PROTOCOLS = ["http", "grpc"]
BOUND = 2
TIMEOUT_S = 60.0
REFUSED = "too many inference requests in flight from client '127.0.0.1' (at most 2"


@pytest.fixture(scope="module", params=[2, 3], ids=["w2", "w3"])
def bounded(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ServerProcess, Path, int]]:
    workers = int(request.param)
    base = tmp_path_factory.mktemp(f"bounded{workers}")
    repo = build_test_repository(base / "repo", ["identity_fp32"])
    gate = base / "gate-open"
    _gate_model(repo, gate)
    proc = ServerProcess(
        [repo], "--workers", str(workers), f"--max-inflight-per-client={BOUND}",
        "--worker-heartbeat-secs", "5", start_timeout=120,
    )  # fmt: skip
    yield proc, gate, workers
    gate.touch()  # never leave a stub waiting
    proc.stop()


def _fresh(protocol: str, url: str) -> Any:
    if protocol == "grpc":
        return client(protocol, url, channel_args=[("grpc.use_local_subchannel_pool", 1)])
    return client(protocol, url)


def _infer(protocol: str, url: str, model: str = "identity_fp32") -> None:
    data = np.arange(4, dtype=np.float32)
    with _fresh(protocol, url) as c:
        result = c.infer(model, [make_input(protocol, "INPUT0", data, "FP32")])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)


def _refused(protocol: str, url: str) -> bool:
    try:
        _infer(protocol, url)
    except InferenceServerException as exc:
        assert exc.status() == ("429" if protocol == "http" else "StatusCode.RESOURCE_EXHAUSTED")
        assert REFUSED in exc.message(), exc.message()
        return True
    return False


def _wait_for(check: Any, what: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not check():
        assert time.monotonic() < deadline, f"not within {TIMEOUT_S}s: {what}"
        time.sleep(0.05)


def _hold(proc: ServerProcess, gate: Path) -> list[tuple[Any, list[Any]]]:
    """The bound's worth of requests held in the gate model, one per protocol."""
    gate.unlink(missing_ok=True)
    held = [_in_background(lambda p=p: _infer(p, proc.url(p), "gate")) for p in PROTOCOLS]
    _wait_for(lambda: _running(gate) == BOUND, "both held requests executing")
    return held


def test_one_clients_bound_holds_over_every_worker(
    bounded: tuple[ServerProcess, Path, int],
) -> None:
    proc, gate, workers = bounded
    held = _hold(proc, gate)
    for protocol in PROTOCOLS:  # 3 connections per worker: they reach the others too
        refused = [_refused(protocol, proc.url(protocol)) for _ in range(3 * workers)]
        assert all(refused), refused
    for protocol in PROTOCOLS:  # another client host is served meanwhile
        with Relay(("127.0.0.1", proc.ports[protocol])) as relay:
            for _ in range(workers):
                _infer(protocol, relay.url)
    gate.touch()
    for thread, outcome in held:
        thread.join(TIMEOUT_S)
        assert outcome == [None], outcome
    for protocol in PROTOCOLS:  # the slots came back, whichever worker held them
        for _ in range(2 * workers):
            _infer(protocol, proc.url(protocol))


def _workers(proc: ServerProcess) -> set[int]:
    pid = proc.proc.pid
    return {int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()}


def test_a_killed_workers_slots_come_back(bounded: tuple[ServerProcess, Path, int]) -> None:
    proc, gate, workers = bounded
    held = _hold(proc, gate)
    assert _refused("http", proc.url("http"))
    before = _workers(proc)
    for pid in before:  # every worker: whichever held the slots
        os.kill(pid, signal.SIGKILL)
    for thread, outcome in held:
        thread.join(TIMEOUT_S)
        assert outcome and isinstance(outcome[0], Exception), outcome  # reset with its worker
    gate.touch()
    _wait_for(
        lambda: len(_workers(proc) - before) == workers and proc_ready(proc),
        "every worker started again",
    )
    for protocol in PROTOCOLS:
        _wait_for(lambda p=protocol: _served(p, proc.url(p)), f"{protocol} served again")


def proc_ready(proc: ServerProcess) -> bool:
    try:
        with _fresh("http", proc.url("http")) as c:
            return bool(c.is_server_ready())
    except Exception:  # noqa: BLE001 - not yet
        return False


def _served(protocol: str, url: str) -> bool:
    try:
        return not _refused(protocol, url)
    except (InferenceServerException, ConnectionError, OSError):  # a worker still starting
        return False


def _logged(path: Path) -> list[tuple[Path, list[dict[str, Any]]]]:
    """The access log and its backups that exist: each file's lines."""
    files = [path, *sorted(path.parent.glob(path.name + ".*"))]
    return [(f, [json.loads(line) for line in f.read_text().splitlines()]) for f in files]


_LIMITED_GROUP = (
    "instance_group [ { count: 2, kind: KIND_CPU, "
    'rate_limiter { resources [ { name: "R", count: 1 } ] } } ]\n'
)


@pytest.fixture(scope="module")
def whole(
    example_repo: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ServerProcess, Path, Path]]:
    """2 workers: the gate model rate-limited (two instances per worker, each needing one R;
    R:2 for the server), ``simple``, an access log rotated at 2 KiB and a Triton trace
    file. Its last test stops it."""
    base = tmp_path_factory.mktemp("whole")
    repo, gate = base / "repo", base / "gate-open"
    repo.mkdir()
    _gate_model(repo, gate)
    config = repo / "gate" / "config.pbtxt"
    config.write_text(
        config.read_text().replace(
            "instance_group [ { count: 2, kind: KIND_CPU } ]\n", _LIMITED_GROUP
        )
    )
    log, trace = base / "access.jsonl", base / "trace.json"
    proc = ServerProcess(
        [repo, example_repo], "--workers", "2", "--model-control-mode", "explicit",
        "--load-model", "simple", "--load-model", "gate",
        "--rate-limit", "execution_count", "--rate-limit-resource", "R:2",
        f"--access-log-file={log}", "--access-log-max-bytes=2048",
        "--access-log-backup-count=100", "--trace-config", f"triton,file={trace}",
        "--trace-config", "level=TIMESTAMPS", "--trace-config", "rate=1", start_timeout=120,
    )  # fmt: skip
    yield proc, gate, base
    gate.touch()
    proc.stop()


def test_rate_limiter_resources_are_the_servers(whole: tuple[ServerProcess, Path, Path]) -> None:
    """Two executions at once over both workers (one worker alone could run both of its
    own two instances)."""
    proc, gate, _ = whole
    gate.unlink(missing_ok=True)
    held = [
        _in_background(lambda p=p: _infer(p, proc.url(p), "gate")) for p in PROTOCOLS * 4
    ]  # fresh connections: both workers get some
    _wait_for(lambda: _running(gate) == 2, "two executions")
    time.sleep(1.0)  # the others stay waiting for R, whichever worker they reached
    assert _running(gate) == 2
    gate.touch()
    for thread, outcome in held:
        thread.join(TIMEOUT_S)
        assert outcome == [None], outcome  # R passed from worker to worker


def test_access_log_and_trace_file_are_the_servers(
    whole: tuple[ServerProcess, Path, Path],
) -> None:
    proc, _, base = whole
    sent = [f"req-{n}" for n in range(24)]
    try:
        for n, ident in enumerate(sent):
            protocol = PROTOCOLS[n % 2]
            with _fresh(protocol, proc.url(protocol)) as c:  # spread over the workers
                inputs, _, _ = add_sub_inputs(protocol)
                c.infer("simple", inputs, request_id=ident)
    finally:
        proc.stop()  # the workers write what waits; the supervisor joins the trace parts
    files = _logged(base / "access.jsonl")
    assert len(files) > 2  # rotated, and no file past the bound (lines whole)
    assert all(f.stat().st_size <= 2048 for f, _ in files), [f.stat().st_size for f, _ in files]
    logged = [e["request_id"] for _, lines in files for e in lines if e["model"] == "simple"]
    assert sorted(logged) == sorted(sent)  # each request once
    entries = json.loads((base / "trace.json").read_text())  # one array, every worker's
    headers = [e for e in entries if e.get("model_name") == "simple"]
    assert sorted(e["request_id"] for e in headers) == sorted(sent)
    assert len({e["id"] for e in headers}) == len(sent)  # the ids are unique in the server
    assert not list(base.glob("trace.json.w*"))  # the parts were joined and removed
