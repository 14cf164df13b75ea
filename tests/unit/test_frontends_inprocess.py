"""Both doors' handlers in process (``tests/support/inprocess.py``): a real server over
examples' ``simple`` and a decoupled model, the real HTTP app on a fake transport and the
real gRPC service on an in-memory HTTP/2 connection. The answers and Triton's error texts are
those the integration tests assert over sockets (test_bad_input.py, test_endpoints.py,
test_streaming.py); here each case runs in milliseconds."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from tritonclient.grpc import service_pb2 as pb

from tests.support.inprocess import InProcess, serving

# Triton's texts, as the integration tests assert them
UNKNOWN_MODEL = "Request for unknown model: 'nope' is not found"
UNKNOWN_VERSION = "Request for unknown model: 'simple' version 7 is not found"
BAD_SHAPE = "unexpected shape for input 'INPUT1' for model 'simple'. Expected [-1,16], got [2,8]"
BAD_DATATYPE = "data-type is 'FP32', but model 'simple' expects 'INT32'"
DECOUPLED_HTTP = "HTTP end point doesn't support models with decoupled transaction policy"
DECOUPLED_GRPC = "ModelInfer RPC doesn't support models with decoupled transaction policy"
# gRPC status codes
OK, INVALID_ARGUMENT, NOT_FOUND, UNIMPLEMENTED = 0, 3, 5, 12

A = np.arange(16, dtype=np.int32).reshape(1, 16)
B = np.full((1, 16), 3, dtype=np.int32)


@pytest.fixture(scope="module")
def doors(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcess]:
    with serving(tmp_path_factory.mktemp("inprocess")) as started:
        yield started


# ----------------------------------------------------------------------------- HTTP


def _tensor(name: str, data: np.ndarray, datatype: str = "INT32") -> dict[str, Any]:
    return {
        "name": name,
        "shape": list(data.shape),
        "datatype": datatype,
        "data": data.ravel().tolist(),
    }


def _json_infer(*inputs: dict[str, Any], **extra: Any) -> bytes:
    return json.dumps(
        {"inputs": list(inputs) or [_tensor("INPUT0", A), _tensor("INPUT1", B)], **extra}
    ).encode()


def _error(answer: tuple[int, dict[str, str], bytes], status: int) -> str:
    code, headers, body = answer
    assert code == status, answer
    assert headers["content-type"] == "application/json"
    return json.loads(body)["error"]


def test_http_server_live_ready_and_metadata(doors: InProcess) -> None:
    assert doors.http("GET", "/v2/health/live")[0] == 200
    assert doors.http("GET", "/v2/health/ready")[0] == 200
    status, _, body = doors.http("GET", "/v2")
    meta = json.loads(body)
    assert status == 200 and meta["name"] == "triton"
    assert re.fullmatch(r"\d+\.\d+\.\d+(\S*)?", meta["version"]), meta
    assert len(set(meta["extensions"])) == len(meta["extensions"]) > 0


def test_http_model_metadata_and_ready(doors: InProcess) -> None:
    status, _, body = doors.http("GET", "/v2/models/simple")
    meta = json.loads(body)
    assert status == 200, body
    assert (meta["name"], meta["versions"], meta["platform"]) == (
        "simple",
        ["1"],
        "onnxruntime_onnx",
    )
    assert [(t["name"], t["datatype"], t["shape"]) for t in meta["inputs"]] == [
        ("INPUT0", "INT32", [-1, 16]),
        ("INPUT1", "INT32", [-1, 16]),
    ]
    assert doors.http("GET", "/v2/models/simple/ready")[0] == 200
    assert doors.http("GET", "/v2/models/simple/versions/1/ready")[0] == 200
    assert doors.http("GET", "/v2/models/nope/ready")[0] == 400  # the client's "not ready"
    assert _error(doors.http("GET", "/v2/models/nope"), 404) == UNKNOWN_MODEL


def test_http_json_infer(doors: InProcess) -> None:
    status, _, body = doors.http("POST", "/v2/models/simple/infer", _json_infer(id="j1"))
    assert status == 200, body
    doc = json.loads(body)
    assert (doc["model_name"], doc["model_version"], doc["id"]) == ("simple", "1", "j1")
    outputs = {o["name"]: (o["datatype"], o["shape"], o["data"]) for o in doc["outputs"]}
    assert outputs["OUTPUT0"] == ("INT32", [1, 16], (A + B).ravel().tolist())
    assert outputs["OUTPUT1"] == ("INT32", [1, 16], (A - B).ravel().tolist())


def test_http_binary_infer_in_and_out(doors: InProcess) -> None:
    sizes = {"binary_data_size": 64}
    header = json.dumps(
        {
            "inputs": [
                {"name": n, "shape": [1, 16], "datatype": "INT32", "parameters": sizes}
                for n in ("INPUT0", "INPUT1")
            ],
            "parameters": {"binary_data_output": True},
        }
    ).encode()
    status, headers, body = doors.http(
        "POST",
        "/v2/models/simple/infer",
        header + A.tobytes() + B.tobytes(),
        {"Inference-Header-Content-Length": str(len(header))},
    )
    assert status == 200, body
    assert headers["content-type"] == "application/octet-stream"
    split = int(headers["inference-header-content-length"])
    doc, raw = json.loads(body[:split]), body[split:]
    sizes_out = [o["parameters"]["binary_data_size"] for o in doc["outputs"]]
    assert [o["name"] for o in doc["outputs"]] == ["OUTPUT0", "OUTPUT1"] and sizes_out == [64, 64]
    assert np.frombuffer(raw[:64], np.int32).tolist() == (A + B).ravel().tolist()
    assert np.frombuffer(raw[64:], np.int32).tolist() == (A - B).ravel().tolist()


def test_http_unknown_model_and_version(doors: InProcess) -> None:
    assert _error(doors.http("POST", "/v2/models/nope/infer", _json_infer()), 404) == UNKNOWN_MODEL
    answer = doors.http("POST", "/v2/models/simple/versions/7/infer", _json_infer())
    assert _error(answer, 404) == UNKNOWN_VERSION


def test_http_bad_shape_and_datatype(doors: InProcess) -> None:
    two = np.arange(32, dtype=np.int32)
    shaped = _json_infer(
        _tensor("INPUT0", two.reshape(2, 16)), _tensor("INPUT1", two[:16].reshape(2, 8))
    )
    assert BAD_SHAPE in _error(doors.http("POST", "/v2/models/simple/infer", shaped), 400)
    typed = _json_infer(_tensor("INPUT0", A.astype(np.float32), "FP32"), _tensor("INPUT1", B))
    assert BAD_DATATYPE in _error(doors.http("POST", "/v2/models/simple/infer", typed), 400)


def test_http_malformed_json_then_serves_on(doors: InProcess) -> None:
    _error(doors.http("POST", "/v2/models/simple/infer", b'{"inputs": ['), 400)
    assert doors.http("POST", "/v2/models/simple/infer", _json_infer())[0] == 200


def test_http_refuses_decoupled_model(doors: InProcess) -> None:
    body = _json_infer(_tensor("INPUT0", np.ones(2, np.float32), "FP32"))
    assert _error(doors.http("POST", "/v2/models/split/infer", body), 501) == DECOUPLED_HTTP


def test_http_pipelined_requests_answer_in_order(doors: InProcess) -> None:
    good = _json_infer()
    head = "POST /v2/models/{}/infer HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n"
    wire = b"".join(head.format(m, len(good)).encode() + good for m in ("simple", "nope", "simple"))
    answers = doors.http_raw(wire, answers=3)
    assert [status for status, _, _ in answers] == [200, 404, 200]
    assert json.loads(answers[1][2])["error"] == UNKNOWN_MODEL


# ----------------------------------------------------------------------------- gRPC


def _infer_request(model: str = "simple", **fields: Any) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name=model, id="g1", **fields)
    for name in ("INPUT0", "INPUT1"):
        request.inputs.add(name=name, datatype="INT32", shape=[1, 16])
    request.raw_input_contents.extend([A.tobytes(), B.tobytes()])
    return request


def test_grpc_server_live_ready_and_metadata(doors: InProcess) -> None:
    assert doors.grpc_call("ServerLive", pb.ServerLiveRequest()).reply(pb.ServerLiveResponse).live
    assert (
        doors.grpc_call("ServerReady", pb.ServerReadyRequest()).reply(pb.ServerReadyResponse).ready
    )
    answer = doors.grpc_call("ServerMetadata", pb.ServerMetadataRequest())
    assert answer.status == OK and answer.headers[":status"] == "200"
    meta = answer.reply(pb.ServerMetadataResponse)
    assert meta.name == "triton" and re.fullmatch(r"\d+\.\d+\.\d+(\S*)?", meta.version)


def test_grpc_model_metadata_and_ready(doors: InProcess) -> None:
    answer = doors.grpc_call("ModelMetadata", pb.ModelMetadataRequest(name="simple"))
    meta = answer.reply(pb.ModelMetadataResponse)
    assert (meta.name, list(meta.versions), meta.platform) == ("simple", ["1"], "onnxruntime_onnx")
    assert [(t.name, t.datatype, list(t.shape)) for t in meta.outputs] == [
        ("OUTPUT0", "INT32", [-1, 16]),
        ("OUTPUT1", "INT32", [-1, 16]),
    ]
    ready = doors.grpc_call("ModelReady", pb.ModelReadyRequest(name="simple"))
    assert ready.reply(pb.ModelReadyResponse).ready
    unready = doors.grpc_call("ModelReady", pb.ModelReadyRequest(name="nope"))
    assert unready.status == OK and not unready.reply(pb.ModelReadyResponse).ready
    unknown = doors.grpc_call("ModelMetadata", pb.ModelMetadataRequest(name="nope"))
    assert (unknown.status, unknown.message) == (NOT_FOUND, UNKNOWN_MODEL)


def test_grpc_unknown_method_is_unimplemented(doors: InProcess) -> None:
    answer = doors.grpc_call("Nope", pb.ServerLiveRequest())
    assert (
        answer.status == UNIMPLEMENTED and "/inference.GRPCInferenceService/Nope" in answer.message
    )
    assert doors.grpc_call("ServerLive", pb.ServerLiveRequest()).status == OK  # serves on


def test_grpc_infer(doors: InProcess) -> None:
    answer = doors.grpc_call("ModelInfer", _infer_request())
    assert answer.status == OK, answer.message
    reply = answer.reply(pb.ModelInferResponse)
    assert (reply.model_name, reply.model_version, reply.id) == ("simple", "1", "g1")
    assert [(o.name, o.datatype, list(o.shape)) for o in reply.outputs] == [
        ("OUTPUT0", "INT32", [1, 16]),
        ("OUTPUT1", "INT32", [1, 16]),
    ]
    out0, out1 = (np.frombuffer(raw, np.int32).tolist() for raw in reply.raw_output_contents)
    assert out0 == (A + B).ravel().tolist() and out1 == (A - B).ravel().tolist()


def test_grpc_unknown_model_and_version(doors: InProcess) -> None:
    answer = doors.grpc_call("ModelInfer", _infer_request("nope"))
    assert (answer.status, answer.message) == (NOT_FOUND, UNKNOWN_MODEL)
    answer = doors.grpc_call("ModelInfer", _infer_request(model_version="7"))
    assert (answer.status, answer.message) == (NOT_FOUND, UNKNOWN_VERSION)
    answer = doors.grpc_call("ModelInfer", _infer_request(model_version="abc"))
    assert answer.status == INVALID_ARGUMENT
    assert "version should be an integral value > 0" in answer.message


def test_grpc_bad_shape_and_datatype(doors: InProcess) -> None:
    shaped = _infer_request()
    shaped.inputs[0].shape[:] = [2, 16]
    shaped.inputs[1].shape[:] = [2, 8]
    two = np.arange(32, dtype=np.int32)
    shaped.raw_input_contents[:] = [two.tobytes(), two[:16].tobytes()]
    answer = doors.grpc_call("ModelInfer", shaped)
    assert answer.status == INVALID_ARGUMENT and BAD_SHAPE in answer.message
    typed = _infer_request()
    typed.inputs[0].datatype = "FP32"
    answer = doors.grpc_call("ModelInfer", typed)
    assert answer.status == INVALID_ARGUMENT and BAD_DATATYPE in answer.message


def test_grpc_refuses_decoupled_model(doors: InProcess) -> None:
    request = pb.ModelInferRequest(model_name="split")
    request.inputs.add(name="INPUT0", datatype="FP32", shape=[2])
    request.raw_input_contents.append(np.ones(2, np.float32).tobytes())
    answer = doors.grpc_call("ModelInfer", request)
    assert (answer.status, answer.message) == (UNIMPLEMENTED, DECOUPLED_GRPC)


def test_grpc_statistics_count_each_door_once(doors: InProcess) -> None:
    def successes() -> int:
        answer = doors.grpc_call("ModelStatistics", pb.ModelStatisticsRequest(name="simple"))
        (stats,) = answer.reply(pb.ModelStatisticsResponse).model_stats
        return int(stats.inference_stats.success.count)

    before = successes()
    assert doors.grpc_call("ModelInfer", _infer_request()).status == OK
    assert doors.http("POST", "/v2/models/simple/infer", _json_infer())[0] == 200
    assert successes() == before + 2
