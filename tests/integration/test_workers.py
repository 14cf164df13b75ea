"""``tritium serve --workers N``: N processes on the same ports behave as one server.

Two servers for the module: ``two`` (2 workers: ``simple`` and the Python ``slow`` model)
and ``three`` (3 workers: ``simple``), both in explicit model-control mode. Each client call
here opens a fresh connection unless said otherwise, so the calls spread over the workers as
the kernel hands the connections out. The tests that kill a server come last in the file.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

from tests.support.clients import add_sub_inputs, assert_simple_works, client, make_input
from tests.support.identity_model import IDENTITY_FP32_CONFIG, IDENTITY_FP32_PY
from tests.support.models import SLOW_SECONDS, build_test_repository
from testkit.server_process import ServerProcess

PROTOCOLS = ["http", "grpc"]
_FRESH = 12  # calls on fresh connections per check


def _start(
    repos: list[Path],
    workers: int,
    *models: str,
    extra: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
) -> ServerProcess:
    loads = [arg for m in models for arg in ("--load-model", m)]
    return ServerProcess(
        repos,
        *extra,
        "--workers", str(workers),
        "--model-control-mode", "explicit",
        *loads,
        "--worker-heartbeat-secs", "3",
        "--allow-client-shm", "true",
        "--exit-timeout-secs", "20",
        start_timeout=120,
        env=env,
    )  # fmt: skip


@pytest.fixture(scope="module")
def slow_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    names = ["slow", "bls_double", "bls_pipeline"]
    return build_test_repository(tmp_path_factory.mktemp("workers") / "repo", names)


@pytest.fixture(scope="module")
def two(example_repo: Path, slow_repo: Path) -> Iterator[ServerProcess]:
    proc = _start(
        [example_repo, slow_repo],
        2,
        "simple",
        "slow",
        "bls_double",
        "bls_pipeline",
        "two_tower",
        # the server's default drain (test servers close idle connections at once): the SIGTERM
        # test's clients may still be between connecting and sending when the signal lands
        extra=("--http-drain-idle-secs=5",),
    )
    yield proc
    proc.stop()


_CACHED_CONFIG = """\
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ -1 ] } ]
output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ -1 ] } ]
response_cache { enable: true }
"""
_CACHED_MODEL = """\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy() * 2)])
            for r in requests]
"""


@pytest.fixture(scope="module")
def cache_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("workers_cache") / "repo"
    for name in ("cached_http", "cached_grpc"):
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(_CACHED_CONFIG)
        (repo / name / "1" / "model.py").write_text(_CACHED_MODEL)
    return repo


@pytest.fixture(scope="module")
def three_tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``three`` server's TMPDIR: empty once it is gone, however it ends."""
    return tmp_path_factory.mktemp("three_tmp")


@pytest.fixture(scope="module")
def three(example_repo: Path, cache_repo: Path, three_tmp: Path) -> Iterator[ServerProcess]:
    proc = _start(
        [example_repo, cache_repo], 3,
        "simple", "running_sum_onnx", "simple_sequence", "cached_http", "cached_grpc",
        extra=("--cache-config", "local,size=1048576"),
        env={"TMPDIR": str(three_tmp)},
    )  # fmt: skip
    yield proc
    proc.stop()


def _connect(protocol: str, server: ServerProcess) -> Any:
    """A client on a connection of its own (gRPC channels otherwise share one per target)."""
    if protocol == "grpc":
        args = [("grpc.use_local_subchannel_pool", 1)]
        return client(protocol, server.url(protocol), channel_args=args)
    return client(protocol, server.url(protocol))


def _children(pid: int) -> set[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return set()
    return {int(p) for p in text.split()}


def _workers(server: ServerProcess) -> set[int]:
    return _children(server.proc.pid)


def _wait_workers(server: ServerProcess, count: int, without: set[int] = frozenset()) -> set[int]:
    """The worker pids once there are ``count`` of them, none of ``without``, all serving
    (the supervisor's ``tritium_workers{state="serving"}``)."""
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        pids = _workers(server)
        if len(pids) == count and not pids & without and _serving(server) == count:
            return pids
        time.sleep(0.1)
    log = server.log_text()[-3000:]
    raise AssertionError(f"workers {_workers(server)}, wanted {count} without {without}\n{log}")


def _metrics_text(server: ServerProcess) -> str:
    import urllib.request

    url = f"http://127.0.0.1:{server.ports['metrics']}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        return str(response.read().decode())


def _serving(server: ServerProcess) -> int:
    for line in _metrics_text(server).splitlines():
        if line.startswith('tritium_workers{state="serving"} '):
            return int(line.split()[-1])
    raise AssertionError("no tritium_workers metric")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _stats(server: ServerProcess, protocol: str, model: str) -> dict[str, Any]:
    c = _connect(protocol, server)
    try:
        if protocol == "http":
            doc = c.get_inference_statistics(model)
        else:
            doc = c.get_inference_statistics(model, as_json=True)
    finally:
        c.close()
    entry: dict[str, Any] = doc["model_stats"][0]
    return entry


def _count(entry: dict[str, Any]) -> int:
    return int(entry.get("inference_count", 0))


def _fresh_simple(server: ServerProcess, protocol: str, times: int = _FRESH) -> None:
    for _ in range(times):
        c = _connect(protocol, server)
        try:
            assert_simple_works(c, protocol)
        finally:
            c.close()


def _metric(server: ServerProcess, family: str, model: str) -> float:
    text = _metrics_text(server)
    prefix = f'{family}{{model="{model}",version="1"}} '
    lines = [line for line in text.splitlines() if line.startswith(prefix)]
    assert len(lines) == 1, text
    return float(lines[0].split()[-1])


# -- serving ---------------------------------------------------------------------------------
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_every_worker_serves_the_same_ports(
    two: ServerProcess, three: ServerProcess, protocol: str
) -> None:
    assert len(_workers(two)) == 2
    assert len(_workers(three)) == 3
    for server in (two, three):
        _fresh_simple(server, protocol)


# -- statistics and metrics: totals over the workers --------------------------------------------
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_statistics_and_metrics_are_totals(three: ServerProcess, protocol: str) -> None:
    before = _count(_stats(three, protocol, "simple"))
    metric_before = _metric(three, "nv_inference_count", "simple")
    _fresh_simple(three, protocol)
    after = _stats(three, protocol, "simple")
    assert _count(after) == before + _FRESH
    assert int(after["inference_stats"]["success"]["count"]) == before + _FRESH
    assert _metric(three, "nv_inference_count", "simple") == metric_before + _FRESH
    assert _metric(three, "nv_inference_request_success", "simple") >= metric_before + _FRESH
    assert _metric(three, "tritium_model_ready", "simple") == 1  # ready everywhere, not 3


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_response_cache_hits_whichever_worker_computed_it(
    three: ServerProcess, protocol: str
) -> None:
    """Each key's entry lives in one worker (the key's owner): identical requests on new
    connections, whichever worker they reach, are answered from it."""
    model = f"cached_{protocol}"
    x = np.array([1.0, 2.5, -3.0], dtype=np.float32)
    for n in range(5):
        c = _connect(PROTOCOLS[n % 2], three)
        try:
            result = c.infer(model, [make_input(PROTOCOLS[n % 2], "INPUT0", x, "FP32")])
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x * 2)
        finally:
            c.close()
    entry = _stats(three, protocol, model)
    infer = entry["inference_stats"]
    assert int(entry["execution_count"]) == 1  # computed once, by one worker
    assert int(infer["success"]["count"]) == 5
    assert int(infer["cache_hit"]["count"]) == 4
    assert int(infer["cache_miss"]["count"]) == 1


# -- model control: the whole server's -----------------------------------------------------------
def _identity(protocol: str) -> list[Any]:
    return [make_input(protocol, "INPUT0", np.arange(4, dtype=np.float32), "FP32")]


def _load_identity(server: ServerProcess, protocol: str, name: str) -> None:
    import json

    c = _connect(protocol, server)
    try:
        files = {"file:1/model.py": IDENTITY_FP32_PY}
        c.load_model(name, config=json.dumps(IDENTITY_FP32_CONFIG), files=files)
    finally:
        c.close()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_load_and_unload_apply_to_every_worker(three: ServerProcess, protocol: str) -> None:
    name = f"delivered_{protocol}"
    _load_identity(three, protocol, name)
    for _ in range(_FRESH):  # every connection, whichever worker it lands on, serves it
        c = _connect(protocol, three)
        try:
            assert c.is_model_ready(name)
            result = c.infer(name, _identity(protocol))
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.arange(4))
        finally:
            c.close()
    c = _connect(protocol, three)
    c.unload_model(name)
    c.close()
    for _ in range(_FRESH):
        c = _connect(protocol, three)
        try:
            assert not c.is_model_ready(name)
            with pytest.raises(InferenceServerException):
                c.infer(name, _identity(protocol))
        finally:
            c.close()


class _Load:
    """Threads sending ``simple`` requests until stopped; each on a fresh connection unless
    ``reuse``. Counts what succeeded and what failed."""

    def __init__(self, server: ServerProcess, protocol: str, threads: int = 4) -> None:
        self.ok = 0
        self.failed: list[str] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._server = server
        self._protocol = protocol
        self._threads = [threading.Thread(target=self._run) for _ in range(threads)]
        for thread in self._threads:
            thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                c = _connect(self._protocol, self._server)
                try:
                    inputs, a, b = add_sub_inputs(self._protocol)
                    result = c.infer("simple", inputs)
                    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
                finally:
                    c.close()
                with self._lock:
                    self.ok += 1
            except Exception as exc:  # noqa: BLE001 - counted and shown
                with self._lock:
                    self.failed.append(f"{type(exc).__name__}: {exc}")

    def wait_ok(self, count: int) -> None:
        deadline = time.monotonic() + 60
        while self.ok < count and time.monotonic() < deadline:
            time.sleep(0.05)
        assert self.ok >= count, self.failed

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_load_unload_under_load_fails_nothing(two: ServerProcess, protocol: str) -> None:
    load = _Load(two, protocol)
    try:
        load.wait_ok(5)
        for round_ in range(2):
            _load_identity(two, protocol, f"under_load_{round_}")
            c = _connect(protocol, two)
            c.unload_model(f"under_load_{round_}")
            c.close()
        seen = load.ok
        load.wait_ok(seen + 5)
    finally:
        load.stop()
    assert load.failed == []


def _copy_model(source: Path, target: Path) -> None:
    import shutil

    shutil.copytree(source, target)
    config = target / "config.pbtxt"
    text = config.read_text().replace(f'name: "{source.name}"', f'name: "{target.name}"')
    config.write_text(text)


def _ready_everywhere(server: ServerProcess, name: str, ready: bool) -> bool:
    for protocol in PROTOCOLS * 3:
        c = _connect(protocol, server)
        try:
            if c.is_model_ready(name) != ready:
                return False
        finally:
            c.close()
    return True


def test_poll_mode_is_polled_once_for_every_worker(example_repo: Path, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    _copy_model(example_repo / "simple", repo / "simple")
    server = ServerProcess(
        [repo], "--workers", "2", "--model-control-mode", "poll",
        "--repository-poll-secs", "1", start_timeout=120,
    )  # fmt: skip
    try:
        _copy_model(example_repo / "simple", repo / "simple_polled")
        deadline = time.monotonic() + 60
        while not _ready_everywhere(server, "simple_polled", True):
            assert time.monotonic() < deadline, server.log_text()[-2000:]
            time.sleep(0.2)
        import shutil

        shutil.rmtree(repo / "simple_polled")
        while not _ready_everywhere(server, "simple_polled", False):
            assert time.monotonic() < deadline, server.log_text()[-2000:]
            time.sleep(0.2)
        c = _connect("http", server)
        with pytest.raises(InferenceServerException, match="polling is enabled"):
            c.load_model("simple")
        c.close()
    finally:
        server.stop()


def test_reuseport_sockets_serve_and_survive_a_kill(example_repo: Path) -> None:
    """--worker-sockets reuseport: each worker listens on its own socket of the port's
    SO_REUSEPORT group; one killed, the others take the new connections, and it returns."""
    server = ServerProcess(
        [example_repo], "--workers", "2", "--worker-sockets", "reuseport",
        "--model-control-mode", "explicit", "--load-model", "simple", start_timeout=120,
    )  # fmt: skip
    try:
        for protocol in PROTOCOLS:
            _fresh_simple(server, protocol, 6)
        pids = _wait_workers(server, 2)
        os.kill(min(pids), signal.SIGKILL)
        deadline = time.monotonic() + 30
        # once reaped (every thread gone: its files closed), its socket has left the group
        while Path(f"/proc/{min(pids)}").exists():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        for protocol in PROTOCOLS:  # the other worker, and the new one once it serves
            _fresh_simple(server, protocol, 6)
        _wait_workers(server, 2, without={min(pids)})
        for protocol in PROTOCOLS:
            _fresh_simple(server, protocol, 6)
    finally:
        server.stop()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_bls_and_ensembles_in_every_worker(two: ServerProcess, protocol: str) -> None:
    features = np.linspace(-1, 1, 16, dtype=np.float32).reshape(1, 16)
    scores = []
    for _ in range(8):
        c = _connect(protocol, two)
        try:
            a, b = np.arange(16, dtype=np.int32), np.full(16, 3, dtype=np.int32)
            inputs = [
                make_input(protocol, "INPUT0", a, "INT32"),
                make_input(protocol, "INPUT1", b, "INT32"),
            ]
            result = c.infer("bls_pipeline", inputs)  # BLS: simple, then bls_double
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), 2 * (a + b))
            np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
            towers = [
                make_input(protocol, "USER_FEATURES", features, "FP32"),
                make_input(protocol, "ITEM_FEATURES", features[:, ::-1].copy(), "FP32"),
            ]
            scores.append(c.infer("two_tower", towers).as_numpy("SCORE"))
        finally:
            c.close()
    for score in scores[1:]:  # every worker's ensemble answers the same
        np.testing.assert_array_equal(score, scores[0])


def test_readiness_is_the_servers(two: ServerProcess) -> None:
    for protocol in PROTOCOLS:
        for _ in range(4):
            c = _connect(protocol, two)
            assert c.is_server_ready()
            c.close()


# -- settings changed through one worker apply to all ---------------------------------------
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_log_settings_apply_to_every_worker(three: ServerProcess, protocol: str) -> None:
    c = _connect(protocol, three)
    verbose = 1 if protocol == "http" else 2
    c.update_log_settings({"log_verbose_level": verbose, "log_info": False})
    c.close()
    for other in PROTOCOLS * 4:
        c = _connect(other, three)
        try:
            settings = c.get_log_settings(**({} if other == "http" else {"as_json": True}))
        finally:
            c.close()
        settings = settings.get("settings", settings)
        shown = {
            k: (v.get("uint32_param", v.get("bool_param")) if isinstance(v, dict) else v)
            for k, v in settings.items()
        }
        assert shown["log_verbose_level"] == verbose
        assert shown["log_info"] is False
    c = _connect(protocol, three)
    c.update_log_settings({"log_verbose_level": 0, "log_info": True})
    c.close()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_trace_settings_apply_to_every_worker(three: ServerProcess, protocol: str) -> None:
    rate = "7" if protocol == "http" else "9"
    c = _connect(protocol, three)
    c.update_trace_settings(model_name="simple", settings={"trace_rate": rate})
    c.close()
    for other in PROTOCOLS * 4:
        c = _connect(other, three)
        try:
            shown = c.get_trace_settings(
                model_name="simple", **({} if other == "http" else {"as_json": True})
            )
        finally:
            c.close()
        value = shown["trace_rate"] if other == "http" else shown["settings"]["trace_rate"]
        assert value in (rate, {"value": [rate]})


_SHM_BYTES = 64  # one INT32 [1, 16] tensor


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_system_shared_memory_is_every_workers(three: ServerProcess, protocol: str) -> None:
    name, key = f"w_{protocol}", f"/tritium_workers_{protocol}_{os.getpid()}"
    handle = shm.create_shared_memory_region(name, key, 2 * _SHM_BYTES, create_only=True)
    try:
        a = np.arange(16, dtype=np.int32).reshape(1, 16)
        b = np.full((1, 16), 3, dtype=np.int32)
        shm.set_shared_memory_region(handle, [a])
        shm.set_shared_memory_region(handle, [b], offset=_SHM_BYTES)
        c = _connect(protocol, three)
        c.register_system_shared_memory(name, key, 2 * _SHM_BYTES)
        c.close()
        for other in PROTOCOLS * 4:  # every connection: the region is there and usable
            c = _connect(other, three)
            try:
                status = c.get_system_shared_memory_status(name)
                assert name in str(status)
                inputs = [
                    make_input(other, "INPUT0", a, "INT32"),
                    make_input(other, "INPUT1", b, "INT32"),
                ]
                inputs[0].set_shared_memory(name, _SHM_BYTES)
                inputs[1].set_shared_memory(name, _SHM_BYTES, offset=_SHM_BYTES)
                result = c.infer("simple", inputs)
                np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
            finally:
                c.close()
        c = _connect(protocol, three)
        c.unregister_system_shared_memory(name)
        c.close()
        for other in PROTOCOLS * 4:
            c = _connect(other, three)
            try:
                with pytest.raises(InferenceServerException):
                    c.get_system_shared_memory_status(name)
            finally:
                c.close()
    finally:
        shm.destroy_shared_memory_region(handle)


# -- sequences: one state per correlation ID, whichever worker a step reaches ------------------
def _sum_step(protocol: str, server: ServerProcess, row: np.ndarray, **sequence: Any) -> Any:
    c = _connect(protocol, server)  # a new connection for every step
    try:
        inp = make_input(protocol, "INPUT", row.reshape(1, 4).astype(np.float32), "FP32")
        return c.infer("running_sum_onnx", [inp], **sequence).as_numpy("OUTPUT")[0]
    finally:
        c.close()


@pytest.mark.parametrize("first", PROTOCOLS)
def test_sequence_steps_on_new_connections_share_one_state(
    three: ServerProcess, first: str
) -> None:
    """Six sequences (integer and string IDs, so they have different owners), each step on a
    new connection, the protocols alternating: every step sees its sequence's running sum."""
    ids: list[int | str] = [7001, 7002, 7003, f"seq-{first}-a", f"seq-{first}-b", 7004]
    rng = np.random.default_rng(5)
    steps = {seq: rng.integers(-50, 50, size=(5, 4)).astype(np.float32) for seq in ids}
    other = "grpc" if first == "http" else "http"
    for i in range(5):
        for n, seq in enumerate(ids):
            protocol = first if (i + n) % 2 == 0 else other
            flags = {"sequence_start": i == 0, "sequence_end": i == 4}
            got = _sum_step(protocol, three, steps[seq][i], sequence_id=seq, **flags)
            np.testing.assert_array_equal(got, steps[seq][: i + 1].sum(axis=0))


def test_sequence_on_a_grpc_stream_and_unary_calls(three: ServerProcess) -> None:
    """Sequences whose steps go on one gRPC stream (one connection, one worker) and, for one
    step in two, on unary calls of fresh connections."""
    import queue

    import tritonclient.grpc as grpcclient

    answers: queue.Queue[Any] = queue.Queue()
    c = _connect("grpc", three)
    c.start_stream(callback=lambda result, error: answers.put(error or result))
    try:
        for seq in (7101, 7102, 7103):
            row = np.arange(4, dtype=np.float32) + seq
            total = np.zeros(4, np.float32)
            for i in range(4):
                total += row
                flags = {"sequence_start": i == 0, "sequence_end": i == 3}
                if i % 2:
                    got = _sum_step("http", three, row, sequence_id=seq, **flags)
                else:
                    inp = grpcclient.InferInput("INPUT", [1, 4], "FP32")
                    inp.set_data_from_numpy(row.reshape(1, 4))
                    c.async_stream_infer("running_sum_onnx", [inp], sequence_id=seq, **flags)
                    answer = answers.get(timeout=60)
                    assert not isinstance(answer, Exception), answer
                    got = answer.as_numpy("OUTPUT")[0]
                np.testing.assert_array_equal(got, total)
    finally:
        c.stop_stream()
        c.close()


def test_python_sequence_model_across_workers(three: ServerProcess) -> None:
    """simple_sequence (a Python model): OUTPUT = INPUT + START, on new connections."""
    for seq in (7201, 7202, 7203):
        for i, value in enumerate((5, 6, 7)):
            protocol = PROTOCOLS[i % 2]
            c = _connect(protocol, three)
            try:
                inp = make_input(protocol, "INPUT", np.array([[value]], dtype=np.int32), "INT32")
                result = c.infer(
                    "simple_sequence",
                    [inp],
                    sequence_id=seq,
                    sequence_start=i == 0,
                    sequence_end=i == 2,
                )
                assert int(result.as_numpy("OUTPUT")[0][0]) == value + (1 if i == 0 else 0)
            finally:
                c.close()


# -- faults ------------------------------------------------------------------------------------
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_kill_9_of_one_worker_fails_only_its_requests(two: ServerProcess, protocol: str) -> None:
    pids = _wait_workers(two, 2)
    load = _Load(two, protocol, threads=4)
    try:
        load.wait_ok(10)
        victim = min(pids)
        os.kill(victim, signal.SIGKILL)
        after = load.ok
        load.wait_ok(after + 20)  # the other worker keeps serving meanwhile
        _wait_workers(two, 2, without={victim})  # started again
        load.wait_ok(load.ok + 10)
    finally:
        load.stop()
    # at most the requests in flight on the killed worker's connections: one per thread
    assert len(load.failed) <= 4, load.failed
    _fresh_simple(two, protocol)


def test_hung_worker_is_killed_and_restarted(two: ServerProcess) -> None:
    pids = _wait_workers(two, 2)
    victim = max(pids)
    os.kill(victim, signal.SIGSTOP)  # its event loop stops: no heartbeat
    try:
        _wait_workers(two, 2, without={victim})
    finally:
        if _alive(victim):
            os.kill(victim, signal.SIGCONT)
    assert "sent no heartbeat" in two.log_text()
    for protocol in PROTOCOLS:
        _fresh_simple(two, protocol, 4)


def test_restarted_worker_replays_model_control_and_settings(two: ServerProcess) -> None:
    _load_identity(two, "http", "kept")
    key = f"/tritium_workers_replay_{os.getpid()}"
    handle = shm.create_shared_memory_region("kept_region", key, 64, create_only=True)
    try:
        c = _connect("grpc", two)
        c.register_system_shared_memory("kept_region", key, 64)
        c.update_log_settings({"log_verbose_level": 1})
        c.close()
        pids = _wait_workers(two, 2)
        for pid in pids:  # every worker started again: each must have what was changed
            os.kill(pid, signal.SIGKILL)
            pids = _wait_workers(two, 2, without={pid})
        for protocol in PROTOCOLS:
            for _ in range(6):
                c = _connect(protocol, two)
                try:
                    c.infer("kept", _identity(protocol))
                    assert "kept_region" in str(c.get_system_shared_memory_status())
                    shown = c.get_log_settings(**({} if protocol == "http" else {"as_json": True}))
                    assert "1" in str(shown.get("settings", shown)["log_verbose_level"])
                finally:
                    c.close()
        c = _connect("http", two)
        c.unregister_system_shared_memory("kept_region")
        c.update_log_settings({"log_verbose_level": 0})
        c.close()
    finally:
        shm.destroy_shared_memory_region(handle)


def _drain_refusal(text: str) -> bool:
    # "connection closed": a connection still in the listening socket's backlog when the
    # drain closed the listener (Triton's order: HTTP stops accepting at the signal) is reset
    # by the kernel before the server ever read from it
    lowered = text.lower()
    refusals = (
        "not ready",
        "shutting down",
        "connection refused",
        "failed to connect",
        "connection closed",
    )
    return any(k in lowered for k in refusals)


def test_sigterm_drains_every_worker(two: ServerProcess) -> None:
    pids = _wait_workers(two, 2)
    stubs = set().union(*(_children(p) for p in pids))
    results: list[Any] = []

    def slow(protocol: str) -> None:
        c = _connect(protocol, two)
        try:
            data = np.ones(3, dtype=np.float32)
            results.append(c.infer("slow", [make_input(protocol, "INPUT0", data, "FP32")]))
        except Exception as exc:  # noqa: BLE001 - shown by the assertion
            results.append(exc)
        finally:
            c.close()

    threads = [threading.Thread(target=slow, args=(p,)) for p in PROTOCOLS * 3]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 30  # some requests are in flight, others wait their turn
    while (pending := _metric(two, "nv_inference_pending_request_count", "slow")) < 2:
        assert time.monotonic() < deadline
        time.sleep(SLOW_SECONDS / 10)
    two.proc.send_signal(signal.SIGTERM)
    for thread in threads:
        thread.join()
    assert two.proc.wait(60) == 0
    # Every request the server held at the signal is answered; one that had not reached it
    # yet (a thread still connecting) may only be refused as a draining server refuses.
    texts = [str(r) for r in results]
    refused = [t for r, t in zip(results, texts, strict=True) if isinstance(r, Exception)]
    assert len(results) - len(refused) >= pending, texts
    assert all(_drain_refusal(t) for t in refused), texts
    assert not [p for p in pids | stubs if _alive(p)]


def _forward_sockets(server: ServerProcess) -> list[str]:
    """The workers' abstract sockets for forwarded requests (/proc/net/unix lists them)."""
    prefix = f"@tritium-{server.proc.pid}-"
    lines = Path("/proc/net/unix").read_text().splitlines()[1:]
    return sorted({p for line in lines for p in line.split()[7:8] if p.startswith(prefix)})


def test_forward_sockets_refuse_outsiders(three: ServerProcess) -> None:
    _wait_workers(three, 3)
    names = _forward_sockets(three)
    assert len(names) == 3, names
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(30)
        sock.connect("\0" + names[0][1:])  # this test is not one of the server's workers
        try:
            sock.sendall(b"\0\0\0\x01.")
            answer = sock.recv(16)
        except (BrokenPipeError, ConnectionResetError):  # closed before the frame went
            answer = b""
        assert answer == b""  # closed unread
    assert "a connection from outside this server closed" in three.log_text()
    for ident in (991, 992, 993):  # the workers still forward to each other
        total = _sum_step(
            "grpc", three, np.ones(4), sequence_id=ident, sequence_start=True, sequence_end=True
        )
        assert np.allclose(total, 1.0)


def test_killing_the_supervisor_leaves_nothing(three: ServerProcess, three_tmp: Path) -> None:
    pids = _wait_workers(three, 3)
    everything = pids | set().union(*(_children(p) for p in pids))
    three.proc.kill()
    three.proc.wait()
    deadline = time.monotonic() + 30
    while [p for p in everything if _alive(p)] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in everything if _alive(p)]
    # nor any file: the workers' sockets are abstract (ONNX Runtime keeps its telemetry
    # session id in $TMPDIR/.ses by design, in every process that loads it; the models
    # loaded with file overrides earlier in this module keep their files in each worker's
    # overrides directory and the supervisor's uploads, which a kill -9 leaves, as it does
    # for one process: the next start sweeps them)
    kept = ("tritium-overrides-", "tritium-uploads-")
    left = [p for p in three_tmp.iterdir() if p.name != ".ses" and not p.name.startswith(kept)]
    assert not left
