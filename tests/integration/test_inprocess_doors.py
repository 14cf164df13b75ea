"""tritium.tritonfrontend: KServeHttp, KServeGrpc and Metrics started on an in-process
server answer with the official clients, and the same model answers the same over the
in-process API, HTTP and gRPC (ONNX ``simple``, the Python ``add_sub_python``, BYTES
``text_echo``, the decoupled ``square_int32`` over a gRPC stream)."""

from __future__ import annotations

import queue
import urllib.request
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

import tritium.tritonserver as ts
from tests.support.inprocess_api import api_repository
from tritium.tritonfrontend import KServeGrpc, KServeHttp, Metrics

WAIT_S = 30.0
LOOPBACK = "127.0.0.1"
CASES: dict[str, dict[str, np.ndarray]] = {
    "simple": {
        "INPUT0": np.arange(16, dtype=np.int32).reshape(1, 16),
        "INPUT1": np.full((1, 16), 3, dtype=np.int32),
    },
    "add_sub_python": {
        "INPUT0": np.arange(32, dtype=np.int32).reshape(2, 16),
        "INPUT1": np.ones((2, 16), dtype=np.int32),
    },
    "text_echo": {"text_input": np.array([b"tritium"], dtype=object)},
}


@pytest.fixture(scope="module")
def doors(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    repo = api_repository(tmp_path_factory.mktemp("inprocess_doors"))
    server = ts.Server(model_repository=str(repo), exit_timeout=5).start(wait_until_ready=True)
    http = KServeHttp(server, KServeHttp.Options(address=LOOPBACK, port=0))
    grpc = KServeGrpc(server, KServeGrpc.Options(address=LOOPBACK, port=0))
    metrics = Metrics(server, Metrics.Options(address=LOOPBACK, port=0))
    with http, grpc, metrics:
        yield {"server": server, "http": http.port, "grpc": grpc.port, "metrics": metrics.port}
    server.stop()


def _inprocess(server: ts.Server, model: str, inputs: dict[str, np.ndarray]) -> dict[str, Any]:
    (response,) = list(server.model(model).infer(inputs=inputs))
    return {
        name: t.to_bytes_array() if t.data_type is ts.DataType.BYTES else np.from_dlpack(t)
        for name, t in response.outputs.items()
    }


def _wire(module: Any, client: Any, model: str, inputs: dict[str, np.ndarray]) -> dict[str, Any]:
    given = []
    for name, array in inputs.items():
        datatype = "BYTES" if array.dtype == object else "INT32"
        tensor = module.InferInput(name, list(array.shape), datatype)
        tensor.set_data_from_numpy(array)
        given.append(tensor)
    result = client.infer(model, given)
    outputs = result.get_response()
    names = [o["name"] if isinstance(o, dict) else o.name for o in _outputs(outputs)]
    return {name: result.as_numpy(name) for name in names}


def _outputs(response: Any) -> list[Any]:
    return response["outputs"] if isinstance(response, dict) else list(response.outputs)


@pytest.mark.parametrize("model", sorted(CASES))
def test_same_answer_in_process_http_and_grpc(doors: dict[str, Any], model: str) -> None:
    inputs = CASES[model]
    here = _inprocess(doors["server"], model, inputs)
    http = httpclient.InferenceServerClient(f"{LOOPBACK}:{doors['http']}")
    grpc = grpcclient.InferenceServerClient(f"{LOOPBACK}:{doors['grpc']}")
    try:
        over_http = _wire(httpclient, http, model, inputs)
        over_grpc = _wire(grpcclient, grpc, model, inputs)
    finally:
        http.close()
        grpc.close()
    assert sorted(here) == sorted(over_http) == sorted(over_grpc)
    for name, value in here.items():
        np.testing.assert_array_equal(value, over_http[name])
        np.testing.assert_array_equal(value, over_grpc[name])


def test_decoupled_same_over_grpc_stream(doors: dict[str, Any]) -> None:
    value = np.array([3], dtype=np.int32)
    here = [
        np.from_dlpack(r.outputs["OUT"]).tolist()
        for r in doors["server"].model("square_int32").infer(inputs={"IN": value})
        if not r.final
    ]
    got: queue.SimpleQueue[Any] = queue.SimpleQueue()
    client = grpcclient.InferenceServerClient(f"{LOOPBACK}:{doors['grpc']}")
    client.start_stream(callback=lambda result, error: got.put(error or result))
    tensor = grpcclient.InferInput("IN", [1], "INT32")
    tensor.set_data_from_numpy(value)
    client.async_stream_infer("square_int32", [tensor])
    over_grpc = [got.get(timeout=WAIT_S).as_numpy("OUT").tolist() for _ in range(3)]
    client.stop_stream()
    client.close()
    assert here == over_grpc == [[3], [3], [3]]


def test_health_and_metadata_over_http(doors: dict[str, Any]) -> None:
    client = httpclient.InferenceServerClient(f"{LOOPBACK}:{doors['http']}")
    try:
        assert client.is_server_live() and client.is_server_ready()
        assert client.get_server_metadata()["name"] == doors["server"].metadata()["name"]
    finally:
        client.close()


def test_metrics_endpoint(doors: dict[str, Any]) -> None:
    _inprocess(doors["server"], "simple", CASES["simple"])
    url = f"http://{LOOPBACK}:{doors['metrics']}/metrics"
    with urllib.request.urlopen(url, timeout=WAIT_S) as answer:
        text = answer.read().decode()
    assert 'nv_inference_request_success{model="simple",version="1"}' in text


def test_stop_and_start_again(doors: dict[str, Any]) -> None:
    server = doors["server"]
    http = KServeHttp(server, KServeHttp.Options(address=LOOPBACK, port=0))
    http.start()
    with pytest.raises(ts.InvalidArgumentError, match="already started"):
        http.start()
    port = http.port
    client = httpclient.InferenceServerClient(f"{LOOPBACK}:{port}")
    assert client.is_server_live()
    client.close()
    http.stop()
    assert http.port is None
    http.stop()  # stopping twice is harmless


def test_options_refused(doors: dict[str, Any]) -> None:
    server = doors["server"]
    with pytest.raises(ts.UnsupportedError, match="thread_count"):
        KServeHttp(server, KServeHttp.Options(thread_count=5))
    with pytest.raises(ts.UnsupportedError, match="infer_thread_count"):
        KServeGrpc(server, KServeGrpc.Options(infer_thread_count=4))
    with pytest.raises(ts.InvalidArgumentError, match="port"):
        KServeHttp.Options(port=70000)
    with pytest.raises(ts.InvalidArgumentError, match="Incorrect type for options"):
        KServeHttp(server, KServeGrpc.Options())  # type: ignore[arg-type]
