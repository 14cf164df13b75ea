"""Three replicas behind a real load balancer (HAProxy with deploy/haproxy/haproxy.cfg),
sharing one Redis response cache, scraped by one Prometheus (``make test-cluster``):

- requests spread over the replicas; an entry one computed is a hit on the others;
- sequences: HTTP steps carrying X-Sequence-Id (gRPC: x-sequence-id metadata) reach the
  replica holding the sequence, a gRPC stream stays on one replica; without the header the
  steps spread and the sequence breaks (the check that the routing matters);
- ``kill -9`` of a replica under load: only requests it had in flight fail, it comes back
  and takes traffic again;
- a rolling restart (SIGTERM one replica at a time) under load loses no request.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support import clients
from tests.support.cluster import (
    HAPROXY,
    NGINX,
    Cluster,
    Nginx,
    Replica,
    start_cluster,
    start_nginx,
    wait_routed,
)
from tests.support.prometheus_process import binary
from tests.support.redis_server import REDIS_SERVER

pytestmark = [
    pytest.mark.skipif(
        HAPROXY is None or REDIS_SERVER is None or binary("prometheus") is None,
        reason="haproxy, redis-server and prometheus: `make test-cluster` installs them",
    ),
]
pytest.importorskip("redis")

_WORK = """\
import time
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        time.sleep(0.02)  # a request stays in flight a moment: a kill finds some
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy() * 2)])
            for r in requests]
"""
_WORK_CONFIG = """\
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ -1 ] } ]
output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ -1 ] } ]
"""
_ACCUMULATE = """\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for r in requests:
            total = (pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
                     + pb_utils.get_input_tensor_by_name(r, "STATE_IN").as_numpy())
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT0", total), pb_utils.Tensor("STATE_OUT", total)]))
        return responses
"""
_ACCUMULATE_CONFIG = """\
backend: "python"
max_batch_size: 4
sequence_batching {
  max_sequence_idle_microseconds: 30000000
  direct { }
  state [ { input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_INT32 dims: [ 1 ]
            initial_state { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true name: "zero" } } ]
}
input [ { name: "INPUT0", data_type: TYPE_INT32, dims: [ 1 ] } ]
output [ { name: "OUTPUT0", data_type: TYPE_INT32, dims: [ 1 ] } ]
"""
_MODELS = {
    "work": (_WORK_CONFIG, _WORK),
    "cached": (_WORK_CONFIG + "response_cache { enable: true }\n", _WORK),
    "accumulate": (_ACCUMULATE_CONFIG, _ACCUMULATE),
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    repo = tmp_path_factory.mktemp("cluster") / "repo"
    for name, (config, model) in _MODELS.items():
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(config)
        (repo / name / "1" / "model.py").write_text(model)
    running = start_cluster(repo)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def nginx(cluster: Cluster) -> Iterator[Nginx]:
    if NGINX is None:
        pytest.skip("nginx not installed: `make test-cluster` installs it")
    running = start_nginx(cluster)
    yield running
    running.stop()


@pytest.fixture(params=["haproxy", "nginx"])
def balancer(request: pytest.FixtureRequest, cluster: Cluster) -> dict[str, str]:
    """The balancer's name and addresses: {"name": ..., "http": ..., "grpc": ...}."""
    if request.param == "haproxy":
        return {"name": "haproxy", "http": cluster.lb_http, "grpc": cluster.lb_grpc}
    running: Nginx = request.getfixturevalue("nginx")
    return {"name": "nginx", "http": running.http, "grpc": running.grpc}


def _stats(replica: Replica, model: str) -> dict[str, int]:
    stats = httpclient.InferenceServerClient(replica.http).get_inference_statistics(model)
    (entry,) = stats["model_stats"]
    infer = entry["inference_stats"]
    return {
        "executions": int(entry["execution_count"]),
        "hits": int(infer["cache_hit"]["count"]),
        "successes": int(infer["success"]["count"]),
    }


def _work_input(protocol: str, x: np.ndarray) -> list[Any]:
    return [clients.make_input(protocol, "INPUT0", x, "FP32")]


def test_requests_spread_over_the_replicas(
    cluster: Cluster, balancer: dict[str, str], protocol: str
) -> None:
    client = clients.client(protocol, balancer[protocol])
    before = [_stats(r, "work")["executions"] for r in cluster.replicas]
    x = np.array([1.5, -2.0], dtype=np.float32)
    for _ in range(12):
        result = client.infer("work", _work_input(protocol, x))
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x * 2)
    after = [_stats(r, "work")["executions"] for r in cluster.replicas]
    assert all(a > b for a, b in zip(after, before, strict=True)), (before, after)
    assert sum(after) - sum(before) == 12


def test_one_prometheus_sees_every_replica(cluster: Cluster) -> None:
    series = cluster.prometheus.wait_for(
        'count(nv_inference_request_success{model="work"} > 0) >= 3', timeout=30
    )
    assert series[0]["value"][1] == "3"


def test_an_entry_computed_on_one_replica_is_a_hit_on_another(cluster: Cluster) -> None:
    client = httpclient.InferenceServerClient(cluster.lb_http)
    x = np.array([3.25, 4.0, 5.5], dtype=np.float32)
    client.infer("cached", _work_input("http", x))  # computed on one replica, stored in Redis
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not _redis_entries(cluster):
        time.sleep(0.05)
    for _ in range(6):  # round robin: every replica gets some
        result = client.infer("cached", _work_input("http", x))
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x * 2)
    stats = [_stats(r, "cached") for r in cluster.replicas]
    assert sum(s["executions"] for s in stats) == 1, stats
    assert sum(s["hits"] for s in stats) == 6, stats
    assert sum(1 for s in stats if s["hits"]) == 3, stats  # the two others and the first


def _redis_entries(cluster: Cluster) -> int:
    import redis

    client = redis.Redis(host="127.0.0.1", port=cluster.redis.port, socket_timeout=5)
    try:
        return len(client.keys("tritium:cache:v1:*"))
    finally:
        client.close()


def _run_sequence(client: Any, protocol: str, sequence_id: int, routed: bool) -> list[int]:
    """Steps 1..4 of a sequence, unary calls; ``routed``: with the correlation ID in the
    header the balancer hashes on."""
    headers = {"X-Sequence-Id": str(sequence_id)} if routed else {}
    if protocol == "grpc":
        headers = {k.lower(): v for k, v in headers.items()}
    totals = []
    for step in range(1, 5):
        value = np.array([[step]], np.int32)  # a batch of one
        inputs = [clients.make_input(protocol, "INPUT0", value, "INT32")]
        result = client.infer(
            "accumulate",
            inputs,
            sequence_id=sequence_id,
            sequence_start=step == 1,
            sequence_end=step == 4,
            headers=headers,
        )
        totals.append(int(result.as_numpy("OUTPUT0").reshape(-1)[0]))
    return totals


def test_sequence_steps_routed_by_their_correlation_id(
    balancer: dict[str, str], protocol: str
) -> None:
    client = clients.client(protocol, balancer[protocol])
    base = (1000 if protocol == "http" else 2000) + (0 if balancer["name"] == "haproxy" else 500)
    for sequence_id in range(base, base + 6):  # spread by the hash over the replicas
        assert _run_sequence(client, protocol, sequence_id, routed=True) == [1, 3, 6, 10]
    # Without the header the steps go round robin: the second lands where no sequence began.
    with pytest.raises(InferenceServerException, match="START"):
        _run_sequence(client, protocol, base + 99, routed=False)


def test_a_grpc_stream_stays_on_one_replica(balancer: dict[str, str]) -> None:
    answers: queue.Queue[Any] = queue.Queue()
    client = grpcclient.InferenceServerClient(balancer["grpc"])
    client.start_stream(callback=lambda result, error: answers.put(error or result))
    base = 3000 if balancer["name"] == "haproxy" else 3500
    try:
        for step in range(1, 5):
            for sequence_id in (base + 1, base + 2, base + 3):
                inputs = [grpcclient.InferInput("INPUT0", [1, 1], "INT32")]
                value = np.array([[step * (sequence_id - base)]], np.int32)
                inputs[0].set_data_from_numpy(value)
                client.async_stream_infer(
                    "accumulate",
                    inputs,
                    sequence_id=sequence_id,
                    sequence_start=step == 1,
                    sequence_end=step == 4,
                )
        got = [answers.get(timeout=30) for _ in range(12)]
    finally:
        client.stop_stream()
    for answer in got:
        assert not isinstance(answer, Exception), answer
    finals = sorted(int(a.as_numpy("OUTPUT0").reshape(-1)[0]) for a in got[-3:])
    assert finals == [10, 20, 30]  # (1+2+3+4) × 1, 2, 3: every step met its sequence's state


class Load:
    """``threads`` clients sending ``work`` requests through the balancer until ``stop``;
    each request carries X-Request-Num, so the balancer's log says where it went."""

    def __init__(self, cluster: Cluster, threads: int = 4) -> None:
        self.cluster = cluster
        self.threads = threads
        self.done = threading.Event()
        self.ok: list[float] = []  # when each answer came
        # number → (when it was sent, when it failed, the error)
        self.failed: dict[int, tuple[float, float, str]] = {}
        self._numbers = iter(range(10**9))
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]
        for thread in self._threads:
            thread.start()

    def _run(self) -> None:
        client = httpclient.InferenceServerClient(self.cluster.lb_http, network_timeout=30)
        x = np.array([2.0], dtype=np.float32)
        while not self.done.is_set():
            with self._lock:
                number = next(self._numbers)
            sent = time.monotonic()
            try:
                result = client.infer(
                    "work", _work_input("http", x), headers={"X-Request-Num": str(number)}
                )
                np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x * 2)
                with self._lock:
                    self.ok.append(time.monotonic())
            except Exception as exc:  # a failed request, counted
                with self._lock:
                    self.failed[number] = (sent, time.monotonic(), str(exc))
                client = httpclient.InferenceServerClient(self.cluster.lb_http, network_timeout=30)

    def answered_since(self, moment: float) -> int:
        with self._lock:
            return sum(1 for at in self.ok if at > moment)

    def stop(self) -> None:
        self.done.set()
        for thread in self._threads:
            thread.join(60)


def _wait_served(cluster: Cluster, replica: Replica, load: Load) -> None:
    """Under load, the (restarted) replica answers requests again."""
    wait_routed(cluster, [replica.name])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if _stats(replica, "work")["executions"] > 0:
            return
        time.sleep(0.1)
    raise AssertionError(f"{replica.name} took no traffic after it came back")


def test_kill_9_fails_only_the_requests_in_flight_there(cluster: Cluster) -> None:
    victim = cluster.replicas[1]
    load = Load(cluster)
    try:
        time.sleep(1.0)
        kill_started = time.monotonic()
        victim.kill()  # returns once the process is gone
        killed_at = time.monotonic()
        time.sleep(1.0)
        assert load.answered_since(killed_at) > 0  # the others answer
        victim.start()  # the same ports
        _wait_served(cluster, victim, load)
    finally:
        load.stop()
    # Each failure was a request already sent when the replica died and still unanswered when
    # the kill began (in flight there: a request sent later is refused by the dead port and
    # retried elsewhere); the balancer either logged it on the victim or, for a request on a
    # kept-alive connection that died under it, closed the client's connection without a line.
    lines = {line.request_num: line for line in cluster.log_lines() if line.request_num}
    print(f"kill -9 under load: {len(load.failed)} failed, {len(load.ok)} answered")
    for number, (sent, failed, error) in load.failed.items():
        assert sent < killed_at and failed > kill_started, (number, error)
        line = lines.get(str(number))
        assert line is None or (line.server == victim.name and line.status >= 500), line
    after = [line for line in lines.values() if line.server == victim.name]
    assert after and load.ok


def test_a_rolling_restart_loses_no_request(cluster: Cluster) -> None:
    load = Load(cluster)
    try:
        for replica in cluster.replicas:
            time.sleep(0.5)
            assert replica.stop() == 0  # SIGTERM: drains, exits cleanly
            replica.start()
            _wait_served(cluster, replica, load)
    finally:
        load.stop()
    print(f"rolling restart under load: {len(load.ok)} answered, {len(load.failed)} failed")
    assert load.failed == {}
    served = {line.server for line in cluster.log_lines() if line.request_num}
    assert served == {"r1", "r2", "r3"}
