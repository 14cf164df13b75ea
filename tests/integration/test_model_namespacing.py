"""--model-namespacing (issue 15 item 5) on the real server, over HTTP and gRPC: two
repositories each hold a model ``x`` (identity in one, doubling in the other) and an ensemble
over ``x``; each ensemble uses its own repository's ``x``, a bare ``x`` is ambiguous (Triton's
``FindModelIdentifier`` error), a name in one repository serves as usual."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

from tests.support.clients import client, make_input
from testkit.server_process import ServerProcess

_MODEL = """\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        inputs = [pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy() for r in requests]
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", i * {factor})])
                for i in inputs]
"""

_IO = (
    'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
    'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
)

_ENSEMBLE = """\
name: "{name}"
platform: "ensemble"
max_batch_size: 0
{io}ensemble_scheduling {{ step [ {{
  model_name: "x" model_version: -1
  input_map {{ key: "INPUT0" value: "INPUT0" }}
  output_map {{ key: "OUTPUT0" value: "OUTPUT0" }}
}} ] }}
"""

AMBIGUOUS = (
    "There are 2 identifiers of model 'x' in global map, model namespace must be provided to "
    "resolve ambiguity."
)


def _python_model(repo: Path, name: str, factor: int) -> None:
    (repo / name / "1").mkdir(parents=True)
    config = f'name: "{name}"\nbackend: "python"\nmax_batch_size: 0\n{_IO}'
    (repo / name / "config.pbtxt").write_text(config)
    (repo / name / "1" / "model.py").write_text(_MODEL.format(factor=factor))


def _ensemble(repo: Path, name: str) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(_ENSEMBLE.format(name=name, io=_IO))


def _repositories(root: Path) -> list[Path]:
    a, b = root / "a", root / "b"
    _python_model(a, "x", 1)
    _python_model(b, "x", 2)
    _python_model(a, "only_a", 3)
    _ensemble(a, "ens_a")
    _ensemble(b, "ens_b")
    return [a, b]


@pytest.fixture(scope="module")
def namespaced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(_repositories(tmp_path_factory.mktemp("ns")), "--model-namespacing")
    yield proc
    proc.stop()


def _infer(protocol: str, url: str, model: str) -> np.ndarray:
    data = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    result = client(protocol, url).infer(model, [make_input(protocol, "INPUT0", data, "FP32")])
    return result.as_numpy("OUTPUT0")


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_each_ensemble_uses_its_own_repositorys_model(
    namespaced: ServerProcess, protocol: str
) -> None:
    url = namespaced.url(protocol)
    np.testing.assert_array_equal(_infer(protocol, url, "ens_a"), [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(_infer(protocol, url, "ens_b"), [2.0, 4.0, 6.0])


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_name_in_two_repositories_is_ambiguous(namespaced: ServerProcess, protocol: str) -> None:
    url = namespaced.url(protocol)
    with pytest.raises(InferenceServerException) as caught:
        _infer(protocol, url, "x")
    assert AMBIGUOUS in caught.value.message()
    if protocol == "grpc":
        assert caught.value.status() == "StatusCode.INVALID_ARGUMENT"
    else:
        assert caught.value.status() == "400"
    c = client(protocol, url)
    with pytest.raises(InferenceServerException, match="identifiers of model 'x'"):
        c.get_model_metadata("x")
    with pytest.raises(InferenceServerException, match="identifiers of model 'x'"):
        c.get_inference_statistics("x")


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_name_in_one_repository_serves(namespaced: ServerProcess, protocol: str) -> None:
    url = namespaced.url(protocol)
    np.testing.assert_array_equal(_infer(protocol, url, "only_a"), [3.0, 6.0, 9.0])
    c = client(protocol, url)
    assert c.is_model_ready("only_a")
    stats: Any = c.get_inference_statistics("only_a")
    if protocol == "grpc":
        stats = {"model_stats": [{"name": s.name} for s in stats.model_stats]}
    assert [s["name"] for s in stats["model_stats"]] == ["only_a"]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_index_lists_every_copy(namespaced: ServerProcess, protocol: str) -> None:
    c = client(protocol, namespaced.url(protocol))
    if protocol == "http":
        rows = c.get_model_repository_index()
    else:
        rows = c.get_model_repository_index(as_json=True)["models"]
    names = sorted(r["name"] for r in rows)
    assert names == ["ens_a", "ens_b", "only_a", "x", "x"]
    assert all(r["state"] == "READY" for r in rows)


def test_metrics_carry_the_namespace(namespaced: ServerProcess) -> None:
    """Triton labels a namespaced model's families with ``namespace`` (its repository)."""
    for model in ("ens_a", "ens_b"):
        _infer("http", namespaced.http_url, model)
    url = f"http://127.0.0.1:{namespaced.ports['metrics']}/metrics"
    with urllib.request.urlopen(url, timeout=30) as answer:
        text = answer.read().decode()
    counts = [line for line in text.splitlines() if line.startswith('nv_inference_count{model="x"')]
    assert len(counts) == 2, counts
    assert all('namespace="' in line for line in counts)
    assert len({line.split('namespace="')[1].split('"')[0] for line in counts}) == 2


def test_without_the_flag_a_name_in_two_repositories_is_unavailable(tmp_path: Path) -> None:
    proc = ServerProcess(
        _repositories(tmp_path), "--exit-on-error=false", "--strict-readiness=false"
    )
    try:
        c = client("http", proc.http_url)
        assert not c.is_model_ready("x")
        np.testing.assert_array_equal(_infer("http", proc.http_url, "only_a"), [3.0, 6.0, 9.0])
    finally:
        proc.stop()
