"""Health, metadata, readiness, versions, model configuration and repository index.

Every scenario runs over HTTP and gRPC through the official ``tritonclient``; the raw HTTP
router checks use ``http.client`` and the gRPC health service uses ``grpc_health.v1``.
"""

from __future__ import annotations

import http.client
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from google.protobuf import json_format
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tritonclient.grpc import model_config_pb2
from tritonclient.utils import InferenceServerException

from tests.support import clients
from testkit.server_process import ServerProcess

SIMPLE_IO = ["INPUT0", "INPUT1"], ["OUTPUT0", "OUTPUT1"]
VERSIONED = {
    "versioned_latest": [3],
    "versioned_all": [1, 2, 3],
    "versioned_specific": [1, 3],
}


@pytest.fixture
def client(server: ServerProcess, protocol: str) -> Iterator[Any]:
    c = clients.client(protocol, server.url(protocol))
    yield c
    c.close()


def _json(protocol: str, call: Any, *args: Any, **kwargs: Any) -> Any:
    """Call a client getter and return a JSON-like object for both protocols."""
    if protocol == "grpc":
        kwargs["as_json"] = True
    return call(*args, **kwargs)


def _ready(client: Any, name: str, version: str = "") -> bool:
    """Model readiness as a bool: the HTTP client answers False for any non-200; the gRPC
    client raises for an unknown/unavailable version, which also means not ready."""
    try:
        return bool(client.is_model_ready(name, version))
    except InferenceServerException:
        return False


def _model_names(*repos: Path) -> set[str]:
    return {p.name for repo in repos for p in repo.iterdir() if p.is_dir()}


def _raw(
    server: ServerProcess,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    host, port = server.http_url.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        data = response.read()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, data
    finally:
        conn.close()


# ----------------------------------------------------------------------------------
# Health and server metadata
# ----------------------------------------------------------------------------------


def test_server_live_and_ready(client: Any) -> None:
    assert client.is_server_live() is True
    assert client.is_server_ready() is True


def test_server_metadata(client: Any, protocol: str) -> None:
    meta = _json(protocol, client.get_server_metadata)
    assert meta["name"] == "triton"
    assert isinstance(meta["version"], str)
    assert re.fullmatch(r"\d+\.\d+\.\d+(\S*)?", meta["version"]), meta["version"]
    extensions = meta["extensions"]
    assert isinstance(extensions, list)
    assert all(isinstance(e, str) and e for e in extensions)
    assert len(set(extensions)) == len(extensions)


def test_grpc_health_check_serving(server: ServerProcess) -> None:
    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        reply = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_grpc_health_watch_streams_the_status(server: ServerProcess) -> None:
    """Watch (Kubernetes' gRPC probes, grpc_health_probe -watch): the current status at once,
    then a message per change while the call stays open; cancelling it leaves the server
    serving."""
    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        watch = stub.Watch(health_pb2.HealthCheckRequest(service=""), timeout=30)
        first = next(watch)
        assert first.status == health_pb2.HealthCheckResponse.SERVING
        watch.cancel()
        reply = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


# ----------------------------------------------------------------------------------
# Model metadata and readiness
# ----------------------------------------------------------------------------------


def _tensors(entries: list[dict[str, Any]]) -> dict[str, tuple[str, list[int]]]:
    # gRPC JSON renders int64 shapes as strings; int() normalises both protocols.
    return {t["name"]: (t["datatype"], [int(d) for d in t["shape"]]) for t in entries}


@pytest.mark.parametrize(
    ("model", "platform"), [("simple", "onnxruntime_onnx"), ("add_sub_python", "python")]
)
@pytest.mark.parametrize("version", ["", "1"])
def test_model_metadata(
    client: Any, protocol: str, model: str, platform: str, version: str
) -> None:
    meta = _json(protocol, client.get_model_metadata, model, version)
    assert meta["name"] == model
    assert meta["versions"] == ["1"]
    assert meta["platform"] == platform
    inputs, outputs = SIMPLE_IO
    assert _tensors(meta["inputs"]) == {n: ("INT32", [-1, 16]) for n in inputs}
    assert _tensors(meta["outputs"]) == {n: ("INT32", [-1, 16]) for n in outputs}
    # order follows the config
    assert [t["name"] for t in meta["inputs"]] == inputs
    assert [t["name"] for t in meta["outputs"]] == outputs


def test_model_metadata_identity_shapes(client: Any, protocol: str) -> None:
    # max_batch_size 0: the shape is dims as configured, no batch dimension.
    meta = _json(protocol, client.get_model_metadata, "identity_fp32")
    assert _tensors(meta["inputs"]) == {"INPUT0": ("FP32", [-1])}
    assert _tensors(meta["outputs"]) == {"OUTPUT0": ("FP32", [-1])}
    meta = _json(protocol, client.get_model_metadata, "identity_bytes")
    assert _tensors(meta["inputs"]) == {"INPUT0": ("BYTES", [-1])}


def test_model_metadata_unknown_model(client: Any) -> None:
    with pytest.raises(InferenceServerException, match="no_such_model"):
        client.get_model_metadata("no_such_model")


@pytest.mark.parametrize("model", ["simple", "add_sub_python", "simple_string", "identity_bf16"])
def test_model_ready(client: Any, model: str) -> None:
    assert client.is_model_ready(model) is True
    assert client.is_model_ready(model, "1") is True


def test_model_ready_unknown(client: Any) -> None:
    assert _ready(client, "no_such_model") is False
    assert _ready(client, "simple", "7") is False


# ----------------------------------------------------------------------------------
# Versions
# ----------------------------------------------------------------------------------


def _versioned_infer(protocol: str, client: Any, model: str, value: int, version: str = "") -> int:
    x = np.array([value], dtype=np.int32)
    result = client.infer(
        model, [clients.make_input(protocol, "INPUT0", x, "INT32")], model_version=version
    )
    out = result.as_numpy("OUTPUT0")
    assert out.dtype == np.int32 and out.shape == (1,)
    return int(out[0])


@pytest.mark.parametrize("model", list(VERSIONED))
def test_versioned_served_versions(client: Any, protocol: str, model: str) -> None:
    served = VERSIONED[model]
    for v in (1, 2, 3):
        assert _ready(client, model, str(v)) is (v in served), (model, v)
    assert client.is_model_ready(model) is True
    meta = _json(protocol, client.get_model_metadata, model)
    assert sorted(meta["versions"], key=int) == [str(v) for v in served]
    for v in served:
        meta = _json(protocol, client.get_model_metadata, model, str(v))
        assert meta["versions"] == [str(v)]


@pytest.mark.parametrize("model", list(VERSIONED))
def test_versioned_infer(client: Any, protocol: str, model: str) -> None:
    served = VERSIONED[model]
    x = 7
    for v in served:
        assert _versioned_infer(protocol, client, model, x, str(v)) == x * v
    # No version: the highest ready version answers.
    assert _versioned_infer(protocol, client, model, x) == x * max(served)
    for v in sorted({1, 2, 3} - set(served)):
        with pytest.raises(InferenceServerException, match=model):
            _versioned_infer(protocol, client, model, x, str(v))


def test_versioned_metadata_of_unserved_version_fails(client: Any) -> None:
    with pytest.raises(InferenceServerException, match="versioned_specific"):
        client.get_model_metadata("versioned_specific", "2")


# ----------------------------------------------------------------------------------
# Model configuration
# ----------------------------------------------------------------------------------


def _config(protocol: str, client: Any, model: str, version: str = "") -> dict[str, Any]:
    if protocol == "http":
        return client.get_model_config(model, version)
    return client.get_model_config(model, version, as_json=True)["config"]


def _dims(tensor: dict[str, Any], protocol: str) -> list[int]:
    dims = tensor["dims"]
    if protocol == "http":
        # Triton renders every int64 as a JSON number over HTTP.
        assert all(type(d) is int for d in dims), dims
        return dims
    return [int(d) for d in dims]


def _io(cfg: dict[str, Any], key: str, protocol: str) -> dict[str, tuple[str, list[int]]]:
    return {t["name"]: (t["data_type"], _dims(t, protocol)) for t in cfg.get(key, [])}


@pytest.mark.parametrize(
    ("model", "backend", "platform", "filename", "count"),
    [
        ("simple", "onnxruntime", "onnxruntime_onnx", "model.onnx", 2),
        ("add_sub_python", "python", None, "model.py", 1),
    ],
)
def test_model_config_normalized(
    client: Any,
    protocol: str,
    model: str,
    backend: str,
    platform: str | None,
    filename: str,
    count: int,
) -> None:
    cfg = _config(protocol, client, model)
    assert cfg["name"] == model
    assert cfg["backend"] == backend
    if platform is not None:
        assert cfg["platform"] == platform
    elif protocol == "http":
        # always_print_primitive_fields: the empty platform is rendered
        assert cfg["platform"] == ""
    assert type(cfg["max_batch_size"]) is int and cfg["max_batch_size"] == 8
    assert cfg["default_model_filename"] == filename
    assert cfg["version_policy"] == {"latest": {"num_versions": 1}}
    groups = cfg["instance_group"]
    assert len(groups) == 1
    assert groups[0]["kind"] == "KIND_CPU"
    assert type(groups[0]["count"]) is int and groups[0]["count"] == count
    assert groups[0]["name"] == f"{model}_0"
    inputs, outputs = SIMPLE_IO
    assert _io(cfg, "input", protocol) == {n: ("TYPE_INT32", [16]) for n in inputs}
    assert _io(cfg, "output", protocol) == {n: ("TYPE_INT32", [16]) for n in outputs}


def test_model_config_with_version(client: Any, protocol: str) -> None:
    assert _config(protocol, client, "simple", "1") == _config(protocol, client, "simple")


def test_model_config_http_prints_defaults(server: ServerProcess) -> None:
    # max_batch_size 0 and empty platform are still present over HTTP, numbers as numbers.
    c = clients.client("http", server.http_url)
    try:
        cfg = c.get_model_config("versioned_specific")
    finally:
        c.close()
    assert cfg["max_batch_size"] == 0 and type(cfg["max_batch_size"]) is int
    assert cfg["platform"] == ""
    assert cfg["backend"] == "python"
    assert cfg["version_policy"] == {"specific": {"versions": [1, 3]}}
    assert cfg["input"][0]["dims"] == [1]


@pytest.mark.parametrize(
    "model",
    [
        "simple",
        "add_sub_python",
        "identity_onnx_nocfg",
        "onnx_partial_cfg",
        "versioned_all",
        "simple_string",
    ],
)
def test_model_config_same_over_both_protocols(server: ServerProcess, model: str) -> None:
    h = clients.client("http", server.http_url)
    g = clients.client("grpc", server.grpc_url)
    try:
        http_cfg = h.get_model_config(model)
        grpc_cfg = g.get_model_config(model).config
    finally:
        h.close()
        g.close()
    parsed = json_format.ParseDict(http_cfg, model_config_pb2.ModelConfig())
    assert parsed == grpc_cfg


@pytest.mark.parametrize(
    ("model", "max_batch_size"), [("identity_onnx_nocfg", 4), ("onnx_partial_cfg", 2)]
)
def test_model_config_onnx_autocomplete(
    client: Any, protocol: str, model: str, max_batch_size: int
) -> None:
    cfg = _config(protocol, client, model)
    assert cfg["name"] == model
    assert cfg["backend"] == "onnxruntime"
    assert cfg["platform"] == "onnxruntime_onnx"
    assert cfg["default_model_filename"] == "model.onnx"
    assert cfg["max_batch_size"] == max_batch_size
    # ONNX shape ["batch", 4]: the batch dimension is dropped from dims
    assert _io(cfg, "input", protocol) == {"INPUT0": ("TYPE_FP32", [4])}
    assert _io(cfg, "output", protocol) == {"OUTPUT0": ("TYPE_FP32", [4])}
    # onnxruntime auto-complete adds dynamic_batching when max_batch_size > 1 and no scheduler
    # is configured; core then normalises preferred_batch_size to [max_batch_size].
    assert "dynamic_batching" in cfg, cfg
    preferred = [int(b) for b in cfg["dynamic_batching"]["preferred_batch_size"]]
    assert preferred == [max_batch_size]
    assert cfg["instance_group"][0]["kind"] == "KIND_CPU"
    assert cfg["version_policy"] == {"latest": {"num_versions": 1}}


def test_python_auto_complete_config(client: Any, protocol: str) -> None:
    """A Python model's static auto_complete_config fills a config that names only the
    backend; the completed config is what /config, metadata and validation use."""
    cfg = _config(protocol, client, "autocomplete_py")
    assert cfg["max_batch_size"] == 4
    assert _io(cfg, "input", protocol) == {"INPUT0": ("TYPE_FP32", [3])}
    assert _io(cfg, "output", protocol) == {"OUTPUT0": ("TYPE_FP32", [3])}
    assert "dynamic_batching" in cfg
    meta = _json(protocol, client.get_model_metadata, "autocomplete_py")
    assert _tensors(meta["inputs"]) == {"INPUT0": ("FP32", [-1, 3])}
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    result = client.infer("autocomplete_py", [clients.make_input(protocol, "INPUT0", x, "FP32")])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x + 1)


def test_autocompleted_model_metadata_and_infer(client: Any, protocol: str) -> None:
    meta = _json(protocol, client.get_model_metadata, "identity_onnx_nocfg")
    assert meta["platform"] == "onnxruntime_onnx"
    assert _tensors(meta["inputs"]) == {"INPUT0": ("FP32", [-1, 4])}
    x = np.arange(12, dtype=np.float32).reshape(3, 4) - 5.5
    inputs = [clients.make_input(protocol, "INPUT0", x, "FP32")]
    result = client.infer("identity_onnx_nocfg", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x * np.float32(2))


# ----------------------------------------------------------------------------------
# Repository index
# ----------------------------------------------------------------------------------


def test_repository_index(client: Any, protocol: str, example_repo: Path, test_repo: Path) -> None:
    if protocol == "http":
        entries = client.get_model_repository_index()
    else:
        entries = client.get_model_repository_index(as_json=True).get("models", [])
    assert isinstance(entries, list)
    seen: dict[str, set[str]] = {}
    for entry in entries:
        assert entry["state"] == "READY", entry
        assert isinstance(entry["version"], str)
        assert not entry.get("reason")
        seen.setdefault(entry["name"], set()).add(entry["version"])
    assert set(seen) == _model_names(example_repo, test_repo)
    for name, versions in seen.items():
        expected = VERSIONED.get(name, [1])
        assert versions == {str(v) for v in expected}, name


def test_repository_index_grpc_message(server: ServerProcess) -> None:
    c = clients.client("grpc", server.grpc_url)
    try:
        index = c.get_model_repository_index()
    finally:
        c.close()
    by_name = {(m.name, m.version): m.state for m in index.models}
    assert by_name[("simple", "1")] == "READY"
    assert by_name[("versioned_all", "2")] == "READY"


# ----------------------------------------------------------------------------------
# Raw HTTP router behaviour
# ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path", ["/", "/nope", "/v2/nope", "/v3/health/live", "/v2/models/simple/versions/x/ready"]
)
def test_http_unknown_path_404(server: ServerProcess, path: str) -> None:
    status, headers, body = _raw(server, "GET", path)
    assert status == 404
    assert headers["content-type"].startswith("application/json")
    assert json.loads(body) == {"error": "Not Found"}


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v2/models/simple/infer"),
        ("POST", "/v2/health/live"),
        ("POST", "/v2/health/ready"),
        ("PUT", "/v2"),
        ("DELETE", "/v2/models/simple"),
        ("GET", "/v2/repository/index"),
    ],
)
def test_http_wrong_method_405(server: ServerProcess, method: str, path: str) -> None:
    status, headers, body = _raw(server, method, path)
    assert status == 405
    assert headers["content-type"].startswith("application/json")
    assert json.loads(body) == {"error": "Method Not Allowed"}


def test_http_health_has_empty_body(server: ServerProcess) -> None:
    for path in ("/v2/health/live", "/v2/health/ready"):
        status, _, body = _raw(server, "GET", path)
        assert status == 200
        assert body == b""


def test_http_query_parameters_ignored(server: ServerProcess) -> None:
    status, _, body = _raw(server, "GET", "/v2/health/ready?x=1")
    assert (status, body) == (200, b"")
    status, _, body = _raw(server, "GET", "/v2/models/simple?verbose=true&x=")
    assert status == 200
    assert json.loads(body)["name"] == "simple"


@pytest.mark.parametrize(
    "path", ["/v2", "/v2/models/simple", "/v2/models/simple/versions/1", "/v2/models/simple/config"]
)
def test_http_json_content_type(server: ServerProcess, path: str) -> None:
    status, headers, body = _raw(server, "GET", path)
    assert status == 200
    assert headers["content-type"].split(";")[0].strip() == "application/json"
    assert int(headers["content-length"]) == len(body)
    assert isinstance(json.loads(body), dict)


def test_http_repository_index_raw(server: ServerProcess) -> None:
    # tritonclient posts an empty body; `{"ready": true}` filters to ready models.
    for body in (b"", b"{}", b'{"ready": true}'):
        status, headers, data = _raw(server, "POST", "/v2/repository/index", body)
        assert status == 200, data
        assert headers["content-type"].startswith("application/json")
        entries = json.loads(data)
        assert isinstance(entries, list)
        assert {"name": "simple", "version": "1", "state": "READY"} in entries


def test_http_model_ready_unknown_version_is_error_json(server: ServerProcess) -> None:
    status, _, body = _raw(server, "GET", "/v2/models/versioned_specific/versions/2/ready")
    assert status in (400, 404, 503)
    assert "error" in json.loads(body)


def test_asyncio_http_client_reads_every_answer(server: ServerProcess) -> None:
    """tritonclient.http.aio sends Accept-Encoding (aiohttp's default) but parses non-infer
    answers as plain JSON, so the server compresses inference responses only (as Triton).
    Every model's config, metadata and statistics, and the index, must read back."""
    import asyncio

    import tritonclient.http.aio as httpaio

    async def main() -> list[int]:
        conn = httpaio.InferenceServerClient(server.http_url)
        try:
            index = await conn.get_model_repository_index()
            names = sorted({m["name"] for m in index if m.get("state") == "READY"})
            sizes = []
            for name in names:
                config = await conn.get_model_config(name)
                assert config["name"] == name
                assert (await conn.get_model_metadata(name))["name"] == name
                sizes.append(len(json.dumps(config)))
            assert (await conn.get_inference_statistics())["model_stats"]
            return sizes
        finally:
            await conn.close()

    sizes = asyncio.run(main())
    assert max(sizes) > 1024, "no config large enough to have been compressed"
