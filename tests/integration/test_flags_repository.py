"""Issue 15 items 1 and 5 on the real server: Triton's repository and request odds and ends
(--model-config-name, --model-load-retry-count, /v2/repository/{repo}/..., raw binary
requests, --http-header-forward-pattern, --backend-config, --allow-cpu-metrics) and the
flag table's start-up behaviour (GPU-only notices, refusals)."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from tritonclient.grpc import service_pb2, service_pb2_grpc

from tests.support.clients import client, make_input
from tests.support.models import build_test_repository
from testkit.server_process import ServerProcess

_IDENTITY = """\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        inputs = [pb_utils.get_input_tensor_by_name(r, "INPUT0") for r in requests]
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", i.as_numpy())]) for i in inputs
        ]
"""

_FLAKY = """\
import os

import triton_python_backend_utils as pb_utils

COUNTER = {counter!r}
FAILS = {fails}


class TritonPythonModel:
    def initialize(self, args):
        tries = int(open(COUNTER).read()) if os.path.exists(COUNTER) else 0
        with open(COUNTER, "w") as handle:
            handle.write(str(tries + 1))
        if tries < FAILS:
            raise RuntimeError(f"attempt {{tries + 1}} fails")

    def execute(self, requests):
        inputs = [pb_utils.get_input_tensor_by_name(r, "INPUT0") for r in requests]
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", i.as_numpy())]) for i in inputs
        ]
"""


def _config(name: str, max_batch_size: int = 0) -> str:
    return (
        f'name: "{name}"\nbackend: "python"\nmax_batch_size: {max_batch_size}\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
        "instance_group [ { kind: KIND_CPU count: 1 } ]\n"
    )


def _model(repo: Path, name: str, files: dict[str, str]) -> None:
    for relative, text in files.items():
        path = repo / name / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


@pytest.fixture(scope="module")
def flag_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("flags")
    repo = build_test_repository(root / "repo", ["identity_onnx_nocfg", "parameters_echo"])
    _model(repo, "custom_config", {
        "config.pbtxt": _config("custom_config"),
        "configs/special.pbtxt": _config("custom_config", max_batch_size=4),
        "1/model.py": _IDENTITY,
    })  # fmt: skip
    _model(repo, "plain_config", {"config.pbtxt": _config("plain_config"), "1/model.py": _IDENTITY})
    for name, fails in (("flaky_once", 1), ("flaky_twice", 2)):
        source = _FLAKY.format(counter=str(root / f"{name}.count"), fails=fails)
        _model(repo, name, {"config.pbtxt": _config(name), "1/model.py": source})
    proc = ServerProcess(
        [repo],
        "--exit-on-error=false",
        "--strict-readiness=false",
        "--model-config-name=special",
        "--model-load-retry-count=1",
        "--backend-config=onnxruntime,default-max-batch-size=8",
        "--backend-config=python,shm-default-byte-size=1048576",
        "--allow-cpu-metrics=false",
        "--http-header-forward-pattern=x-tenant.*",
        "--pinned-memory-pool-byte-size=268435456",
        "--http-thread-count=16",
        "--log-verbose=1",
    )
    yield proc
    proc.stop()


def _config_of(protocol: str, url: str, name: str) -> dict[str, Any]:
    c = client(protocol, url)
    if protocol == "http":
        return c.get_model_config(name)
    return c.get_model_config(name, as_json=True)["config"]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_model_config_name_picks_configs_name(flag_server: ServerProcess, protocol: str) -> None:
    url = flag_server.url(protocol)
    assert int(_config_of(protocol, url, "custom_config")["max_batch_size"]) == 4
    assert int(_config_of(protocol, url, "plain_config").get("max_batch_size", 0)) == 0


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_model_load_retry_count(flag_server: ServerProcess, protocol: str) -> None:
    """One retry: a model that fails its first load serves; one that fails twice does not,
    with the second failure as its reason."""
    c = client(protocol, flag_server.url(protocol))
    assert c.is_model_ready("flaky_once")
    assert not c.is_model_ready("flaky_twice")
    if protocol == "http":
        rows = c.get_model_repository_index()
    else:
        rows = c.get_model_repository_index(as_json=True)["models"]
    twice = next(r for r in rows if r["name"] == "flaky_twice")
    assert twice["state"] == "UNAVAILABLE" and "attempt 2 fails" in twice["reason"]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_backend_config_default_max_batch_size(flag_server: ServerProcess, protocol: str) -> None:
    config = _config_of(protocol, flag_server.url(protocol), "identity_onnx_nocfg")
    assert int(config["max_batch_size"]) == 8


def test_allow_cpu_metrics_false(flag_server: ServerProcess) -> None:
    url = f"http://127.0.0.1:{flag_server.ports['metrics']}/metrics"
    with urllib.request.urlopen(url, timeout=10) as reply:
        text = reply.read().decode()
    assert "nv_inference_request_success" in text and "nv_cpu_utilization" not in text


def test_http_header_forward_pattern(flag_server: ServerProcess) -> None:
    c = client("http", flag_server.http_url)
    inputs = [make_input("http", "INPUT0", np.array([1], dtype=np.int32), "INT32")]
    result = c.infer("parameters_echo", inputs, headers={"x-tenant-id": "a", "x-other": "b"})
    seen = json.loads(result.as_numpy("OUTPUT0")[0])
    assert seen.get("x-tenant-id") == "a" and "x-other" not in seen


def test_start_up_notices(flag_server: ServerProcess) -> None:
    log = flag_server.log_text()
    assert "--pinned-memory-pool-byte-size=268435456: page-locked" in log
    assert "no effect without a GPU" in log
    assert "--http-thread-count=16 accepted" in log
    assert "--backend-config=python,shm-default-byte-size=1048576 accepted" in log


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("--allow-sagemaker=true", "tritium has no SageMaker front-end"),
        ("--vertex-ai-port=8080", "tritium has no Vertex AI front-end"),
        ("--allow-vertex-ai=true", "tritium has no Vertex AI front-end"),
        ("--backend-config=tensorflow,version=2", "no settings for backend 'tensorflow'"),
    ],
)
def test_refused_flags_stop_the_server(tmp_path: Path, flag: str, message: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tritium", "serve", "--model-repository", str(tmp_path), flag],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0 and message in done.stderr
    assert "unrecognized arguments" not in done.stderr


# -- the shared server ------------------------------------------------------------------------


def _post(url: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, Any, bytes]:
    request = urllib.request.Request(url, data=body, method="POST", headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, reply.headers, reply.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read()


def test_raw_binary_request(server: ServerProcess) -> None:
    """Inference-Header-Content-Length: 0: the body is the one input; the answer is binary."""
    data = np.arange(5, dtype=np.float32)
    status, headers, body = _post(
        f"http://{server.http_url}/v2/models/identity_fp32/infer",
        data.tobytes(),
        {"Inference-Header-Content-Length": "0", "Content-Type": "application/octet-stream"},
    )
    assert status == 200, body
    length = int(headers["Inference-Header-Content-Length"])
    doc = json.loads(body[:length])
    (output,) = doc["outputs"]
    assert output["name"] == "OUTPUT0" and output["shape"] == [5]
    assert output["parameters"]["binary_data_size"] == data.nbytes
    assert np.array_equal(np.frombuffer(body[length:], dtype=np.float32), data)


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ("add_sub_python", "Raw request must only have 1 input (found 1) to be deduced but got 2"),
        ("identity_bytes", "the model must have input shape [1]"),
        ("identity_int32", "input byte size mismatch"),
    ],
)
def test_raw_binary_request_errors(server: ServerProcess, model: str, message: str) -> None:
    status, _, body = _post(
        f"http://{server.http_url}/v2/models/{model}/infer",
        b"\x01\x02\x03",
        {"Inference-Header-Content-Length": "0"},
    )
    assert status == 400 and message in json.loads(body)["error"]


def test_repository_index_with_a_repository_name(server: ServerProcess) -> None:
    """Triton's HTTP index ignores a repository name; load/unload refuse one (501)."""
    base = f"http://{server.http_url}/v2/repository"
    status, _, named = _post(f"{base}/any-name/index", b"")
    _, _, plain = _post(f"{base}/index", b"")
    assert status == 200 and json.loads(named) == json.loads(plain)
    for action in ("load", "unload"):
        status, _, body = _post(f"{base}/any-name/models/add_sub_python/{action}", b"")
        assert status == 501
        assert json.loads(body) == {"error": "'repository_name' specification is not supported"}
    status, _, body = _post(f"{base}/index", b'{"ready": "yes"}')
    assert status == 400 and "expected a boolean" in json.loads(body)["error"]


def test_grpc_repository_name_is_unsupported(server: ServerProcess) -> None:
    """gRPC's RepositoryIndex refuses a repository name (Triton: UNSUPPORTED)."""
    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        with pytest.raises(grpc.RpcError) as info:
            stub.RepositoryIndex(
                service_pb2.RepositoryIndexRequest(repository_name="any"), timeout=10
            )
    assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert info.value.details() == "'repository_name' specification is not supported"


EXTENSIONS = [
    "classification",
    "sequence",
    "model_repository",
    "model_repository(unload_dependents)",
    "schedule_policy",
    "model_configuration",
    "system_shared_memory",
    "binary_tensor_data",
    "parameters",
    "statistics",
    "trace",
    "logging",
]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_server_metadata_lists_the_extensions_that_work(
    server: ServerProcess, protocol: str
) -> None:
    """Every extension listed is served (each has its tests); cuda_shared_memory never is
    without a GPU."""
    meta = client(protocol, server.url(protocol)).get_server_metadata()
    extensions = meta["extensions"] if protocol == "http" else list(meta.extensions)
    assert extensions == EXTENSIONS
