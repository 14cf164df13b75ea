"""Wrong-typed reserved parameters, out-of-range tensor values and undecodable gRPC messages
are INVALID_ARG with a clear message on every protocol (issue 10 item 11), and the server
keeps serving: the next good ``simple`` inference still succeeds."""

from __future__ import annotations

import http.client
import json
from typing import Any

import grpc
import pytest
from tests.support.clients import assert_simple_works, client
from testkit.server_process import ServerProcess
from tritonclient.grpc import service_pb2 as pb

from tritium.frontends.grpc.codec import set_parameters

MODEL_INFER = "/inference.GRPCInferenceService/ModelInfer"
MODEL_STREAM_INFER = "/inference.GRPCInferenceService/ModelStreamInfer"

# (parameter, JSON value, what the message says)
BAD_PARAMETERS = [
    ("priority", "abc", "'priority'"),
    ("priority", True, "'priority'"),
    ("priority", -1, "'priority'"),
    ("priority", 1.5, "'priority'"),
    ("timeout", "x", "'timeout'"),
    ("timeout", -5, "'timeout'"),
    ("sequence_id", [1], "'sequence_id'"),
    ("sequence_id", 2.5, "'sequence_id'"),
    ("sequence_id", -3, "'sequence_id'"),
    ("sequence_start", 1, "'sequence_start'"),
    ("sequence_end", "yes", "'sequence_end'"),
]


def _simple_ok(server: ServerProcess, protocol: str) -> None:
    c = client(protocol, server.url(protocol))
    try:
        assert_simple_works(c, protocol)
    finally:
        c.close()


def _post(server: ServerProcess, path: str, doc: Any) -> tuple[int, str]:
    conn = http.client.HTTPConnection(server.http_url, timeout=60)
    try:
        conn.request("POST", path, json.dumps(doc), {"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, response.read().decode(errors="replace")
    finally:
        conn.close()


def _identity_doc(datatype: str, data: list[Any], **parameters: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "inputs": [{"name": "INPUT0", "datatype": datatype, "shape": [len(data)], "data": data}]
    }
    if parameters:
        doc["parameters"] = parameters
    return doc


def _grpc_infer(server: ServerProcess, message: bytes) -> grpc.RpcError | pb.ModelInferResponse:
    with grpc.insecure_channel(server.grpc_url) as channel:
        call = channel.unary_unary(
            MODEL_INFER,
            request_serializer=None,
            response_deserializer=pb.ModelInferResponse.FromString,
        )
        try:
            return call(message, timeout=60)
        except grpc.RpcError as exc:
            return exc


def _int8_request(values: list[int], **parameters: Any) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="identity_int8")
    tensor = request.inputs.add(name="INPUT0", datatype="INT8", shape=[len(values)])
    tensor.contents.int_contents.extend(values)
    set_parameters(request.parameters, parameters)
    return request


# ------------------------------------------------------------------------------ parameters


@pytest.mark.parametrize(("key", "value", "phrase"), BAD_PARAMETERS)
def test_wrong_parameter_http(server: ServerProcess, key: str, value: Any, phrase: str) -> None:
    status, text = _post(
        server, "/v2/models/identity_int8/infer", _identity_doc("INT8", [1], **{key: value})
    )
    assert status == 400, text
    assert phrase in json.loads(text)["error"]
    _simple_ok(server, "http")


@pytest.mark.parametrize(("key", "value", "phrase"), BAD_PARAMETERS)
def test_wrong_parameter_generate(server: ServerProcess, key: str, value: Any, phrase: str) -> None:
    status, text = _post(
        server, "/v2/models/identity_int8/generate", {"INPUT0": [1], "parameters": {key: value}}
    )
    assert status == 400, text
    assert phrase in json.loads(text)["error"]


GRPC_BAD_PARAMETERS = [p for p in BAD_PARAMETERS if not isinstance(p[1], list)]  # no list params


@pytest.mark.parametrize(("key", "value", "phrase"), GRPC_BAD_PARAMETERS)
def test_wrong_parameter_grpc(server: ServerProcess, key: str, value: Any, phrase: str) -> None:
    answer = _grpc_infer(server, _int8_request([1], **{key: value}).SerializeToString())
    assert isinstance(answer, grpc.RpcError), answer
    assert answer.code() == grpc.StatusCode.INVALID_ARGUMENT, answer.details()
    assert phrase in (answer.details() or "")
    _simple_ok(server, "grpc")


def test_good_parameters_still_accepted(server: ServerProcess) -> None:
    good = {"priority": 0, "timeout": 1_000_000, "sequence_id": 0}
    doc = _identity_doc("INT8", [7], **good)
    status, text = _post(server, "/v2/models/identity_int8/infer", doc)
    assert status == 200, text
    assert json.loads(text)["outputs"][0]["data"] == [7]
    answer = _grpc_infer(server, _int8_request([7], **good).SerializeToString())
    assert isinstance(answer, pb.ModelInferResponse), answer


# --------------------------------------------------------- parameters that are no object

# Anything but a JSON object where the protocol has ``parameters`` (issue 44 item 1). Triton's
# reader refuses a request-level one ("attempt to get members for non-object"); an input's or
# output's it skips, which tritium refuses instead of ignoring.
NOT_OBJECTS = [5, "shared_memory_region", ["binary_data_size"], [], None, True, 0, ""]


@pytest.mark.parametrize("value", NOT_OBJECTS)
def test_request_parameters_not_an_object(server: ServerProcess, value: Any) -> None:
    doc = _identity_doc("INT8", [1])
    doc["parameters"] = value
    status, text = _post(server, "/v2/models/identity_int8/infer", doc)
    assert status == 400, text
    assert json.loads(text) == {
        "error": "failed to get request params.: attempt to get members for non-object"
    }
    _simple_ok(server, "http")


@pytest.mark.parametrize("value", NOT_OBJECTS)
def test_input_parameters_not_an_object(server: ServerProcess, value: Any) -> None:
    doc = _identity_doc("INT8", [1])
    doc["inputs"][0]["parameters"] = value
    status, text = _post(server, "/v2/models/identity_int8/infer", doc)
    assert status == 400, text
    assert json.loads(text) == {
        "error": "Unable to parse 'parameters' of input 'INPUT0': attempt to access JSON "
        "non-object as object"
    }
    _simple_ok(server, "http")


@pytest.mark.parametrize("value", [*NOT_OBJECTS, "classification", ["classification"]])
def test_output_parameters_not_an_object(server: ServerProcess, value: Any) -> None:
    doc = _identity_doc("INT8", [1])
    doc["outputs"] = [{"name": "OUTPUT0", "parameters": value}]
    status, text = _post(server, "/v2/models/identity_int8/infer", doc)
    assert status == 400, text
    assert json.loads(text) == {
        "error": "Unable to parse 'parameters' of output 'OUTPUT0': attempt to access JSON "
        "non-object as object"
    }
    _simple_ok(server, "http")


@pytest.mark.parametrize("value", [None, [], 5])
def test_generate_parameters_not_an_object(server: ServerProcess, value: Any) -> None:
    status, text = _post(
        server, "/v2/models/identity_int8/generate", {"INPUT0": [1], "parameters": value}
    )
    assert status == 400, text
    # Triton's generate endpoint (L0_http generate_endpoint_test.py test_parameters)
    assert "Expected JSON object for keyword: 'parameters'" in json.loads(text)["error"]


def test_parameters_not_an_object_leave_no_traceback(server: ServerProcess) -> None:
    """Forty such requests: forty 400s and not one traceback in the server's log (each was a
    500 with a kilobyte of traceback before)."""
    before = server.log_text().count("Traceback")
    for _ in range(20):
        for where in ("inputs", "outputs"):
            doc = _identity_doc("INT8", [1])
            doc.setdefault(where, [{"name": "OUTPUT0"}])[0]["parameters"] = 7
            status, text = _post(server, "/v2/models/identity_int8/infer", doc)
            assert status == 400, text
    assert server.log_text().count("Traceback") == before


# ------------------------------------------------------------------------- tensor values

OUT_OF_RANGE = [
    ("INT8", [1000]),
    ("INT8", [-129]),
    ("UINT8", [-1]),
    ("UINT8", [256]),
    ("INT16", [40000]),
    ("UINT16", [70000]),
    ("INT32", [2**31]),
    ("UINT32", [-1]),
    ("INT64", [2**63]),
    ("UINT64", [-1]),
    ("INT32", [1.5]),
    ("UINT64", [2.0]),
]


@pytest.mark.parametrize(("datatype", "data"), OUT_OF_RANGE)
def test_json_value_out_of_range(server: ServerProcess, datatype: str, data: list[Any]) -> None:
    path = f"/v2/models/identity_{datatype.lower()}/infer"
    status, text = _post(server, path, _identity_doc(datatype, data))
    assert status == 400, text
    message = json.loads(text)["error"]
    assert "INPUT0" in message and datatype in message, message
    status, text = _post(server, path.replace("/infer", "/generate"), {"INPUT0": data})
    assert status == 400, text
    assert "INPUT0" in json.loads(text)["error"]


def test_grpc_typed_contents_out_of_range(server: ServerProcess) -> None:
    answer = _grpc_infer(server, _int8_request([1, 1000]).SerializeToString())
    assert isinstance(answer, grpc.RpcError), answer
    assert answer.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "out of range" in (answer.details() or ""), answer.details()


def test_json_values_at_the_limits(server: ServerProcess) -> None:
    doc = _identity_doc("INT8", [-128, 127])
    status, text = _post(server, "/v2/models/identity_int8/infer", doc)
    assert status == 200, text
    assert json.loads(text)["outputs"][0]["data"] == [-128, 127]
    data = [0, 2**64 - 1]
    status, text = _post(server, "/v2/models/identity_uint64/infer", _identity_doc("UINT64", data))
    assert status == 200, text
    assert json.loads(text)["outputs"][0]["data"] == data


# ------------------------------------------------------------------ undecodable gRPC messages


def _not_utf8(field: str) -> bytes:
    """A ModelInferRequest whose string ``field`` holds bytes that are not UTF-8."""
    message = _int8_request([1])
    setattr(message, field, "\x01PLACEHOLDER\x01")
    not_utf8 = b"\xff\xfe\xfd" * 3 + b"abcd"  # as long as the placeholder
    return message.SerializeToString().replace(b"\x01PLACEHOLDER\x01", not_utf8)


@pytest.mark.parametrize("field", ["model_name", "id"])
def test_grpc_invalid_utf8(server: ServerProcess, field: str) -> None:
    answer = _grpc_infer(server, _not_utf8(field))
    assert isinstance(answer, grpc.RpcError), answer
    assert answer.code() == grpc.StatusCode.INVALID_ARGUMENT, answer.details()
    assert "UTF-8" in (answer.details() or "")
    _simple_ok(server, "grpc")


def test_grpc_stream_invalid_utf8_then_good(server: ServerProcess) -> None:
    good = _int8_request([5])
    good.id = "good"
    with grpc.insecure_channel(server.grpc_url) as channel:
        call = channel.stream_stream(
            MODEL_STREAM_INFER,
            request_serializer=None,
            response_deserializer=pb.ModelStreamInferResponse.FromString,
        )
        answers = list(call(iter([_not_utf8("model_name"), good.SerializeToString()]), timeout=60))
    assert len(answers) == 2, answers
    assert "UTF-8" in answers[0].error_message
    assert answers[1].error_message == ""
    assert answers[1].infer_response.id == "good"
