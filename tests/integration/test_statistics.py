"""The statistics extension and the metrics endpoint agree with the requests that were sent,
over HTTP and gRPC. A server of its own, so the counters start at zero."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support import clients
from tests.support.models import build_test_repository
from testkit.server_process import ServerProcess

BATCHES = {"http": [1, 1, 1, 1, 1, 4], "grpc": [1, 1, 1, 1, 1, 4]}
RAISES = 3


@pytest.fixture(scope="module")
def stats_server(
    example_repo: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    repo = build_test_repository(tmp_path_factory.mktemp("stats") / "repo", ["raises"])
    proc = ServerProcess([example_repo, repo])
    started = time.time()
    for protocol, batches in BATCHES.items():
        client = clients.client(protocol, proc.url(protocol))
        for batch in batches:
            inputs, a, b = clients.add_sub_inputs(protocol, batch=batch)
            result = client.infer("simple", inputs)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    client = httpclient.InferenceServerClient(proc.http_url)
    x = np.ones(3, dtype=np.float32)
    for _ in range(RAISES):
        with pytest.raises(InferenceServerException):
            client.infer("raises", [clients.make_input("http", "INPUT0", x, "FP32")])
    proc.started_at = started  # type: ignore[attr-defined]
    yield proc
    proc.stop()


def _stats(proc: ServerProcess, protocol: str, model: str = "", version: str = "") -> list:
    client = clients.client(protocol, proc.url(protocol))
    if protocol == "http":
        return client.get_inference_statistics(model, version)["model_stats"]
    return client.get_inference_statistics(model, version, as_json=True)["model_stats"]


def _n(value: Any) -> int:  # gRPC's JSON renders uint64 as strings
    return int(value)


def test_statistics_count_what_was_sent(stats_server: ServerProcess, protocol: str) -> None:
    (simple,) = _stats(stats_server, protocol, "simple")
    sent = [b for batches in BATCHES.values() for b in batches]
    assert simple["name"] == "simple" and simple["version"] == "1"
    assert _n(simple["inference_count"]) == sum(sent)
    assert _n(simple["execution_count"]) == len(sent)
    infer = simple["inference_stats"]
    assert _n(infer["success"]["count"]) == len(sent)
    assert _n(infer["queue"]["count"]) == len(sent)
    assert _n(infer["compute_infer"]["count"]) == len(sent)
    assert _n(infer["success"]["ns"]) >= _n(infer["compute_infer"]["ns"]) > 0
    assert _n(infer["fail"].get("count", 0)) == 0
    batches = {_n(b["batch_size"]): _n(b["compute_infer"]["count"]) for b in simple["batch_stats"]}
    assert batches == {1: sent.count(1), 4: sent.count(4)}
    last = _n(simple["last_inference"]) / 1000
    assert stats_server.started_at - 5 <= last <= time.time() + 5  # type: ignore[attr-defined]


def test_failures_are_counted(stats_server: ServerProcess, protocol: str) -> None:
    (raises,) = _stats(stats_server, protocol, "raises", "1")
    assert _n(raises["inference_stats"]["fail"]["count"]) == RAISES
    assert _n(raises["inference_stats"]["success"].get("count", 0)) == 0


def test_all_models_and_one_model_agree(stats_server: ServerProcess, protocol: str) -> None:
    everything = {m["name"]: m for m in _stats(stats_server, protocol)}
    assert {"simple", "add_sub_python", "raises"} <= set(everything)
    (simple,) = _stats(stats_server, protocol, "simple")
    assert everything["simple"]["inference_count"] == simple["inference_count"]


def test_unknown_model_statistics(stats_server: ServerProcess, protocol: str) -> None:
    client = clients.client(protocol, stats_server.url(protocol))
    with pytest.raises(InferenceServerException) as info:
        client.get_inference_statistics("nope")
    assert "requested model 'nope' is not available" in str(info.value)
    expected = "400" if protocol == "http" else "StatusCode.INVALID_ARGUMENT"
    assert info.value.status() == expected


def _metrics(proc: ServerProcess) -> dict[str, float]:
    url = f"http://127.0.0.1:{proc.ports['metrics']}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            values[key] = float(value)
    return values


def test_metrics_agree_with_statistics(stats_server: ServerProcess) -> None:
    values = _metrics(stats_server)
    (simple,) = _stats(stats_server, "http", "simple")
    labels = 'model="simple",version="1"'
    assert values[f"nv_inference_request_success{{{labels}}}"] == len(sum(BATCHES.values(), []))
    assert values[f"nv_inference_count{{{labels}}}"] == simple["inference_count"]
    assert values[f"nv_inference_exec_count{{{labels}}}"] == simple["execution_count"]
    duration_us = simple["inference_stats"]["success"]["ns"] // 1000
    assert values[f"nv_inference_request_duration_us{{{labels}}}"] == duration_us
    assert values[f"nv_inference_pending_request_count{{{labels}}}"] == 0
    histogram = "nv_inference_request_duration_histogram_us"
    assert (
        values[f'{histogram}_bucket{{{labels},le="+Inf"}}']
        == values[f"nv_inference_request_success{{{labels}}}"]
    )
    failed = 'model="raises",reason="BACKEND",version="1"'  # sorted by name, as Triton's
    assert values[f"nv_inference_request_failure{{{failed}}}"] == RAISES
    assert values["nv_cpu_memory_total_bytes"] > 0
    assert 0.0 <= values["nv_cpu_utilization"] <= 1.0


def test_metrics_endpoint_paths(stats_server: ServerProcess) -> None:
    base = f"http://127.0.0.1:{stats_server.ports['metrics']}"
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(f"{base}/nope", timeout=10)
    assert info.value.code == 404
    info.value.close()
    grpc = grpcclient.InferenceServerClient(stats_server.grpc_url)
    assert "statistics" in grpc.get_server_metadata().extensions
