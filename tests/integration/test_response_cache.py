"""The response cache over the real server: identical requests are answered without running
the model (statistics and metrics show the hits), different ones run it."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator

import numpy as np
import pytest

from tests.support import clients
from tests.support.server_process import ServerProcess

_CONFIG = """\
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ -1 ] } ]
output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ -1 ] } ]
response_cache { enable: true }
"""
_MODEL = """\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy() * 2)])
            for r in requests]
"""


@pytest.fixture(scope="module")
def cache_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("cache") / "repo"
    for name in ("cached_http", "cached_grpc"):
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(_CONFIG)
        (repo / name / "1" / "model.py").write_text(_MODEL)
    proc = ServerProcess([repo], "--cache-config", "local,size=1048576")
    yield proc
    proc.stop()


def test_identical_requests_hit_the_cache(cache_server: ServerProcess, protocol: str) -> None:
    model = f"cached_{protocol}"
    client = clients.client(protocol, cache_server.url(protocol))
    x = np.array([1.0, 2.5, -3.0], dtype=np.float32)
    for _ in range(5):
        result = client.infer(model, [clients.make_input(protocol, "INPUT0", x, "FP32")])
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x * 2)
    y = x + 1
    result = client.infer(model, [clients.make_input(protocol, "INPUT0", y, "FP32")])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), y * 2)

    stats = clients.client("http", cache_server.http_url).get_inference_statistics(model)
    (entry,) = stats["model_stats"]
    infer = entry["inference_stats"]
    assert entry["execution_count"] == 2  # x once, y once
    assert entry["inference_count"] == 2  # cache hits are not inferences
    assert infer["success"]["count"] == 6
    assert infer["cache_hit"]["count"] == 4
    assert infer["cache_miss"]["count"] == 2

    url = f"http://127.0.0.1:{cache_server.ports['metrics']}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    assert f'nv_cache_num_hits_per_model{{model="{model}",version="1"}} 4' in text
    assert f'nv_cache_num_misses_per_model{{model="{model}",version="1"}} 2' in text
