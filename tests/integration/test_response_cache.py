"""The response cache over the real server: identical requests are answered without running
the model (statistics and metrics show the hits), different ones run it."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.support import clients
from testkit.server_process import ServerProcess

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


_SCALED = """\
import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
            * json.loads(r.parameters()).get("scale", 2))]) for r in requests]
"""


@pytest.fixture(scope="module")
def cache_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("cache") / "repo"
    for name in ("cached_http", "cached_grpc"):
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(_CONFIG)
        (repo / name / "1" / "model.py").write_text(_MODEL)
    (repo / "scaled" / "1").mkdir(parents=True)
    (repo / "scaled" / "config.pbtxt").write_text(_CONFIG)
    (repo / "scaled" / "1" / "model.py").write_text(_SCALED)
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


def _stats(server: ServerProcess, model: str) -> tuple[int, int, int]:
    """(hits, misses, executions) of ``model``."""
    stats = clients.client("http", server.http_url).get_inference_statistics(model)
    (entry,) = stats["model_stats"]
    infer = entry["inference_stats"]
    return infer["cache_hit"]["count"], infer["cache_miss"]["count"], entry["execution_count"]


def _scaled(server: ServerProcess, protocol: str, x: np.ndarray, scale: int) -> np.ndarray:
    client = clients.client(protocol, server.url(protocol))
    inputs = [clients.make_input(protocol, "INPUT0", x, "FP32")]
    result = client.infer("scaled", inputs, parameters={"scale": scale})
    return np.asarray(result.as_numpy("OUTPUT0"))


def test_request_parameters_are_part_of_the_key(cache_server: ServerProcess) -> None:
    """A Python model reads the request's parameters: {"scale": 100}'s answer is not served to
    {"scale": 1} with the same inputs; the same parameters (through either door) hit."""
    x = np.array([1.0, -2.0], dtype=np.float32)
    np.testing.assert_array_equal(_scaled(cache_server, "http", x, 100), x * 100)
    np.testing.assert_array_equal(_scaled(cache_server, "grpc", x, 1), x)
    np.testing.assert_array_equal(_scaled(cache_server, "grpc", x, 100), x * 100)
    np.testing.assert_array_equal(_scaled(cache_server, "http", x, 1), x)
    assert _stats(cache_server, "scaled") == (2, 2, 2)


_RELOADED = """\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy() * FACTOR)])
            for r in requests]
"""


def test_a_reload_with_new_code_does_not_serve_old_answers(tmp_path: Path) -> None:
    """A model reloaded at the same version with new code is a new generation: what its old
    code answered is not served from the cache; the new code's answers are cached again."""
    repo = tmp_path / "repo"
    (repo / "reloaded" / "1").mkdir(parents=True)
    (repo / "reloaded" / "config.pbtxt").write_text(_CONFIG)
    code = repo / "reloaded" / "1" / "model.py"
    code.write_text(_RELOADED.replace("FACTOR", "2"))
    server = ServerProcess(
        [repo], "--model-control-mode=explicit", "--load-model=reloaded",
        "--cache-config", "local,size=1048576",
    )  # fmt: skip
    try:
        client = clients.client("http", server.http_url)
        x = np.array([7.0, 8.0], dtype=np.float32)
        inputs = [clients.make_input("http", "INPUT0", x, "FP32")]
        for _ in range(2):
            np.testing.assert_array_equal(
                client.infer("reloaded", inputs).as_numpy("OUTPUT0"), x * 2
            )
        code.write_text(_RELOADED.replace("FACTOR", "3"))
        client.load_model("reloaded")  # the same version 1, new code
        for _ in range(2):
            np.testing.assert_array_equal(
                client.infer("reloaded", inputs).as_numpy("OUTPUT0"), x * 3
            )
        assert _stats(server, "reloaded") == (1, 1, 1)  # the new version's own statistics
    finally:
        server.stop()
