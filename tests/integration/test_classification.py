"""The classification extension over HTTP and gRPC with the official tritonclient
(``InferRequestedOutput(name, class_count=N)``), as Triton answers it: the output becomes a
BYTES tensor of ``"score:index[:label]"`` strings, top N per batch element, highest first.

Models: ``classify_batched`` (tests/support/classify_models.py: batched, FP32 output with a
label file whose third line is empty and which has four labels for five classes, INT32 output
without labels) and the non-batched ``identity_<type>`` models.
"""

from __future__ import annotations

import http.client
import json
import queue
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tests.support.clients import client, make_input, module
from testkit.server_process import ServerProcess
from tritonclient.grpc import service_pb2 as pb
from tritonclient.utils import InferenceServerException

from tritium.frontends.grpc.codec import set_parameters

MODEL = "classify_batched"
# Two batch elements; the second has ties (2.0 at indices 2 and 3: the lower index first).
ROWS = np.array([[0.1, 0.7, 0.2, 0.05, 0.9], [3.0, 1.0, 2.0, 2.0, 0.0]], dtype=np.float32)
# Top 3 of each row with the labels "cat", "dog", "" (no label), "bird", none for index 4.
TOP3_LABELLED = [
    ["0.900000:4", "0.700000:1:dog", "0.200000:2"],
    ["3.000000:0:cat", "2.000000:2", "2.000000:3:bird"],
]
TOP3_INT = [["0:0", "0:1", "0:2"], ["3:0", "2:2", "2:3"]]  # OUTPUT1: the rows as int32


@pytest.fixture
def c(server: ServerProcess, protocol: str) -> Any:
    conn = client(protocol, server.url(protocol))
    yield conn
    conn.close()


def _output(protocol: str, name: str, count: int, binary: bool = True) -> Any:
    if protocol == "http":
        return module(protocol).InferRequestedOutput(name, binary_data=binary, class_count=count)
    return module(protocol).InferRequestedOutput(name, class_count=count)


def _texts(result: Any, name: str) -> list[Any]:
    """The classification strings as nested lists of str (tritonclient gives bytes)."""
    array = result.as_numpy(name)
    assert array.dtype == np.object_
    return np.vectorize(lambda v: v.decode() if isinstance(v, bytes) else v)(array).tolist()


def _infer(c: Any, protocol: str, rows: np.ndarray, outputs: list[Any]) -> Any:
    return c.infer(MODEL, [make_input(protocol, "INPUT0", rows, "FP32")], outputs=outputs)


# ------------------------------------------------------------------------------ good requests


@pytest.mark.parametrize("binary", [True, False])
@pytest.mark.parametrize("batch", [1, 2])
def test_top3_with_labels(c: Any, protocol: str, batch: int, binary: bool) -> None:
    result = _infer(c, protocol, ROWS[:batch], [_output(protocol, "OUTPUT0", 3, binary)])
    out = result.get_output("OUTPUT0")
    datatype = out["datatype"] if protocol == "http" else out.datatype
    shape = out["shape"] if protocol == "http" else list(out.shape)
    assert (datatype, shape) == ("BYTES", [batch, 3])
    assert _texts(result, "OUTPUT0") == TOP3_LABELLED[:batch]


@pytest.mark.parametrize("batch", [1, 2])
def test_top1(c: Any, protocol: str, batch: int) -> None:
    result = _infer(c, protocol, ROWS[:batch], [_output(protocol, "OUTPUT0", 1)])
    assert _texts(result, "OUTPUT0") == [row[:1] for row in TOP3_LABELLED[:batch]]


def test_integer_output_without_labels_beside_a_raw_output(c: Any, protocol: str) -> None:
    """OUTPUT1 (INT32) classified prints plain integers; OUTPUT0 asked without classes in the
    same request stays the model's FP32 tensor."""
    outputs = [module(protocol).InferRequestedOutput("OUTPUT0"), _output(protocol, "OUTPUT1", 3)]
    result = _infer(c, protocol, ROWS, outputs)
    assert _texts(result, "OUTPUT1") == TOP3_INT
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), ROWS)


def test_count_above_the_classes_is_clamped(c: Any, protocol: str) -> None:
    result = _infer(c, protocol, ROWS, [_output(protocol, "OUTPUT0", 10)])
    texts = _texts(result, "OUTPUT0")
    assert np.array(texts).shape == (2, 5)
    assert texts[0] == ["0.900000:4", "0.700000:1:dog", "0.200000:2", "0.100000:0:cat",
                        "0.050000:3:bird"]  # fmt: skip


@pytest.mark.parametrize(
    ("model", "datatype", "values", "expected"),
    [
        ("identity_fp32", "FP32", [0.5, 0.25, 1.0], ["1.000000:2", "0.500000:0"]),
        ("identity_fp64", "FP64", [1e-7, -2.5, 3.25], ["3.250000:2", "0.000000:0"]),
        ("identity_uint8", "UINT8", [7, 250, 9], ["250:1", "9:2"]),
        ("identity_int8", "INT8", [-7, -3, -9], ["-3:1", "-7:0"]),
        ("identity_uint64", "UINT64", [2**64 - 1, 5, 2**63], ["18446744073709551615:0",
                                                              "9223372036854775808:2"]),
        ("identity_int64", "INT64", [-(2**63), 2**62, 0], ["4611686018427387904:1", "0:2"]),
    ],
)  # fmt: skip
def test_non_batched_model(
    c: Any, protocol: str, model: str, datatype: str, values: list[Any], expected: list[str]
) -> None:
    """A model without batching classifies the whole output: shape [N], not [1, N]."""
    array = np.array(values, dtype=module(protocol).triton_to_np_dtype(datatype))
    outputs = [_output(protocol, "OUTPUT0", 2)]
    result = c.infer(model, [make_input(protocol, "INPUT0", array, datatype)], outputs=outputs)
    assert list(result.as_numpy("OUTPUT0").shape) == [2]
    assert _texts(result, "OUTPUT0") == expected


def test_grpc_stream(server: ServerProcess) -> None:
    """Classification applies to every response of a stream too."""
    answers: queue.Queue[Any] = queue.Queue()
    c = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        c.start_stream(callback=lambda result, error: answers.put((result, error)))
        for batch in (1, 2):
            c.async_stream_infer(
                MODEL,
                [make_input("grpc", "INPUT0", ROWS[:batch], "FP32")],
                outputs=[_output("grpc", "OUTPUT0", 3)],
            )
        got = [answers.get(timeout=60) for _ in range(2)]
    finally:
        c.stop_stream()
        c.close()
    assert [error for _, error in got] == [None, None]
    assert [_texts(result, "OUTPUT0") for result, _ in got] == [TOP3_LABELLED[:1], TOP3_LABELLED]


def test_extension_is_listed(c: Any, protocol: str) -> None:
    meta = c.get_server_metadata()
    extensions = meta["extensions"] if protocol == "http" else list(meta.extensions)
    assert "classification" in extensions


# ------------------------------------------------------------------------------ errors


@pytest.mark.parametrize(
    ("model", "datatype"), [("identity_bytes", "BYTES"), ("identity_fp16", "FP16")]
)
def test_unsupported_output_type(c: Any, protocol: str, model: str, datatype: str) -> None:
    """Triton's text; the server keeps serving the same model afterwards."""
    if datatype == "BYTES":
        array = np.array([b"a", b"b"], dtype=np.object_)
    else:
        array = np.array([1.0, 2.0], dtype=np.float16)
    inputs = [make_input(protocol, "INPUT0", array, datatype)]
    with pytest.raises(InferenceServerException) as caught:
        c.infer(model, inputs, outputs=[_output(protocol, "OUTPUT0", 1)])
    assert f"class result not available for output due to unsupported type '{datatype}'" in str(
        caught.value
    )
    if protocol == "http":
        assert caught.value.status() == "400"
    else:
        assert caught.value.status() == "StatusCode.INVALID_ARGUMENT"
    result = c.infer(model, inputs)
    assert result.as_numpy("OUTPUT0").tolist() == array.tolist()


def test_negative_count(c: Any, protocol: str) -> None:
    """tritonclient sends any non-zero class_count: a negative one is refused with each
    front-end's text (Triton's)."""
    with pytest.raises(InferenceServerException) as caught:
        _infer(c, protocol, ROWS, [_output(protocol, "OUTPUT0", -1)])
    if protocol == "http":
        text = "Unable to set 'classification': attempt to access JSON non-unsigned-integer"
        assert caught.value.status() == "400"
    else:
        text = "invalid value for 'classification' parameter, expected >= 0"
        assert caught.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert text in str(caught.value)


def _post(server: ServerProcess, doc: Any) -> tuple[int, Any]:
    conn = http.client.HTTPConnection(server.http_url, timeout=60)
    try:
        headers = {"Content-Type": "application/json"}
        conn.request("POST", f"/v2/models/{MODEL}/infer", json.dumps(doc), headers)
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


def _http_doc(**output_parameters: Any) -> dict[str, Any]:
    row = ROWS[:1].tolist()
    return {
        "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 5], "data": row}],
        "outputs": [{"name": "OUTPUT0", "parameters": output_parameters}],
    }


def test_http_zero_means_not_requested(server: ServerProcess) -> None:
    status, doc = _post(server, _http_doc(classification=0))
    assert status == 200
    assert doc["outputs"][0]["datatype"] == "FP32"
    assert doc["outputs"][0]["data"] == pytest.approx(ROWS[0].tolist())


@pytest.mark.parametrize(
    ("parameters", "text"),
    [
        ({"classification": "3"}, "Unable to set 'classification'"),
        ({"classification": 2.5}, "Unable to set 'classification'"),
        ({"classification": True}, "Unable to set 'classification'"),
        (
            {"classification": 2, "shared_memory_region": "r", "shared_memory_byte_size": 64},
            "Output can't set both 'shared_memory_region' and 'classification'",
        ),
    ],
)
def test_http_bad_parameter(server: ServerProcess, parameters: dict[str, Any], text: str) -> None:
    status, doc = _post(server, _http_doc(**parameters))
    assert status == 400
    assert text in doc["error"]


def _grpc_infer(server: ServerProcess, parameters: dict[str, Any]) -> grpc.RpcError | Any:
    request = pb.ModelInferRequest(model_name=MODEL)
    tensor = request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 5])
    tensor.contents.fp32_contents.extend(ROWS[0].tolist())
    set_parameters(request.outputs.add(name="OUTPUT0").parameters, parameters)
    with grpc.insecure_channel(server.grpc_url) as channel:
        call = channel.unary_unary(
            "/inference.GRPCInferenceService/ModelInfer",
            request_serializer=pb.ModelInferRequest.SerializeToString,
            response_deserializer=pb.ModelInferResponse.FromString,
        )
        try:
            return call(request, timeout=60)
        except grpc.RpcError as exc:
            return exc


@pytest.mark.parametrize(
    ("parameters", "text"),
    [
        ({"classification": 0}, "invalid value for 'classification' parameter, expected >= 0"),
        ({"classification": "3"}, "invalid value type for 'classification' parameter"),
        ({"classification": True}, "invalid value type for 'classification' parameter"),
        (
            {"classification": 2, "shared_memory_region": "r", "shared_memory_byte_size": 64},
            "output can't set both 'shared_memory_region' and 'classification'",
        ),
    ],
)
def test_grpc_bad_parameter(server: ServerProcess, parameters: dict[str, Any], text: str) -> None:
    answer = _grpc_infer(server, parameters)
    assert isinstance(answer, grpc.RpcError)
    assert answer.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert text in (answer.details() or "")
