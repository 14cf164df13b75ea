"""Bad inference requests get Triton's error (status and message), and never hurt the server:
the very next good ``simple`` inference still succeeds.

Messages are Triton's (reference/protocol.md §1.3, and Triton's http_server.cc / core where
§1.3 has none); where tritium's wording legitimately differs only key phrases are checked.
"""

from __future__ import annotations

import gzip
import http.client
import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tests.support.clients import add_sub_inputs, assert_simple_works, client, make_input, module
from testkit.server_process import ServerProcess
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

GRPC_STATUS = {
    "400": "StatusCode.INVALID_ARGUMENT",
    "404": "StatusCode.NOT_FOUND",
    "500": "StatusCode.INTERNAL",
    "503": "StatusCode.UNAVAILABLE",
}


# ----------------------------------------------------------------------------- helpers


@pytest.fixture
def triton(server: ServerProcess, protocol: str) -> Iterator[Any]:
    c = client(protocol, server.url(protocol))
    yield c
    c.close()


def expect_error(
    protocol: str,
    call: Callable[[], Any],
    http_status: str,
    *phrases: str,
    grpc_status: str | None = None,
) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as info:
        call()
    exc = info.value
    expected = http_status if protocol == "http" else (grpc_status or GRPC_STATUS[http_status])
    assert exc.status() == expected, str(exc)
    message = exc.message()
    for phrase in phrases:
        assert phrase in message, f"{phrase!r} not in {message!r}"
    return exc


def int32_input(protocol: str, name: str, shape: list[int]) -> Any:
    return make_input(
        protocol, name, np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape), "INT32"
    )


# ------------------------------------------------------------ validation errors (both protocols)


def test_wrong_shape(triton: Any, protocol: str) -> None:
    # INPUT0 is fine with batch 2; INPUT1 carries the right 16 elements per batch in a [2, 8] shape.
    inputs = [int32_input(protocol, "INPUT0", [2, 16]), int32_input(protocol, "INPUT1", [2, 8])]
    expect_error(
        protocol,
        lambda: triton.infer("simple", inputs),
        "400",
        "unexpected shape for input 'INPUT1' for model 'simple'. Expected [-1,16], got [2,8]",
    )
    assert_simple_works(triton, protocol)


def test_wrong_datatype(triton: Any, protocol: str) -> None:
    inputs = [
        make_input(protocol, "INPUT0", np.ones((1, 16), dtype=np.float32), "FP32"),
        int32_input(protocol, "INPUT1", [1, 16]),
    ]
    expect_error(
        protocol,
        lambda: triton.infer("simple", inputs),
        "400",
        "data-type is 'FP32', but model 'simple' expects 'INT32'",
    )
    assert_simple_works(triton, protocol)


def test_missing_input(triton: Any, protocol: str) -> None:
    inputs = [int32_input(protocol, "INPUT0", [1, 16])]
    expect_error(
        protocol,
        lambda: triton.infer("simple", inputs),
        "400",
        "expected 2 inputs but got 1 inputs for model 'simple'",
    )
    assert_simple_works(triton, protocol)


def test_unknown_input_name(triton: Any, protocol: str) -> None:
    inputs = [int32_input(protocol, "INPUT0", [1, 16]), int32_input(protocol, "NOPE", [1, 16])]
    expect_error(
        protocol,
        lambda: triton.infer("simple", inputs),
        "400",
        "unexpected inference input 'NOPE' for model 'simple'",
    )
    assert_simple_works(triton, protocol)


def test_unknown_requested_output(triton: Any, protocol: str) -> None:
    inputs, _, _ = add_sub_inputs(protocol)
    outputs = [module(protocol).InferRequestedOutput("NOPE")]
    expect_error(
        protocol,
        lambda: triton.infer("simple", inputs, outputs=outputs),
        "400",
        "unexpected inference output 'NOPE' for model 'simple'",
    )
    assert_simple_works(triton, protocol)


def test_batch_too_large(triton: Any, protocol: str) -> None:
    inputs, _, _ = add_sub_inputs(protocol, batch=9)
    expect_error(
        protocol,
        lambda: triton.infer("simple", inputs),
        "400",
        "inference request batch-size must be <= 8 for 'simple'",
    )
    assert_simple_works(triton, protocol)


def test_unknown_model(triton: Any, protocol: str) -> None:
    inputs, _, _ = add_sub_inputs(protocol)
    expect_error(
        protocol,
        lambda: triton.infer("nope", inputs),
        "404",
        "Request for unknown model: 'nope' is not found",
    )
    assert_simple_works(triton, protocol)


def test_unknown_version(triton: Any, protocol: str) -> None:
    inputs, _, _ = add_sub_inputs(protocol)
    # Triton core (ModelLifeCycle::GetModel): a version with no record is NOT_FOUND.
    expect_error(
        protocol,
        lambda: triton.infer("simple", inputs, model_version="7"),
        "404",
        "Request for unknown model: 'simple' version 7 is not found",
    )
    assert_simple_works(triton, protocol)


def test_non_numeric_version(triton: Any, protocol: str) -> None:
    inputs, _, _ = add_sub_inputs(protocol)
    if protocol == "grpc":
        expect_error(
            protocol,
            lambda: triton.infer("simple", inputs, model_version="abc"),
            "400",
            "version should be an integral value > 0",
        )
    else:
        # HTTP: a version segment must match [0-9]+, so the route does not exist.
        expect_error(
            protocol,
            lambda: triton.infer("simple", inputs, model_version="abc"),
            "404",
            "Not Found",
        )
    assert_simple_works(triton, protocol)


def test_model_raises(triton: Any, protocol: str) -> None:
    inputs = [make_input(protocol, "INPUT0", np.ones(4, dtype=np.float32), "FP32")]
    expect_error(protocol, lambda: triton.infer("raises", inputs), "500", "boom from model")
    assert_simple_works(triton, protocol)


def test_model_error_response(triton: Any, protocol: str) -> None:
    inputs = [make_input(protocol, "INPUT0", np.ones(4, dtype=np.float32), "FP32")]
    expect_error(protocol, lambda: triton.infer("error_response", inputs), "500", "bad things")
    assert_simple_works(triton, protocol)


# ---------------------------------------------------------------- raw HTTP (http.client)

INFER_PATH = "/v2/models/simple/infer"
A = np.arange(16, dtype=np.int32).reshape(1, 16)
B = np.full((1, 16), 3, dtype=np.int32)


def post(
    url: str, body: bytes, headers: dict[str, str] | None = None, path: str = INFER_PATH
) -> tuple[int, dict[str, str], bytes]:
    host, port = url.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request("POST", path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


def binary_request(sizes: tuple[int, int] = (64, 64)) -> bytes:
    doc = {
        "inputs": [
            {
                "name": "INPUT0",
                "shape": [1, 16],
                "datatype": "INT32",
                "parameters": {"binary_data_size": sizes[0]},
            },
            {
                "name": "INPUT1",
                "shape": [1, 16],
                "datatype": "INT32",
                "parameters": {"binary_data_size": sizes[1]},
            },
        ]
    }
    return json.dumps(doc).encode()


def json_request(**extra: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "inputs": [
            {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": A.ravel().tolist()},
            {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": B.ravel().tolist()},
        ]
    }
    doc.update(extra)
    return doc


def assert_error_json(status: int, body: bytes, expected_status: int = 400, *phrases: str) -> str:
    assert status == expected_status, (status, body)
    doc = json.loads(body)
    assert isinstance(doc, dict) and isinstance(doc.get("error"), str), body
    for phrase in phrases:
        assert phrase in doc["error"], f"{phrase!r} not in {doc['error']!r}"
    return doc["error"]


def assert_simple_works_raw(url: str) -> None:
    """The next good request over HTTP (JSON in, JSON out) still succeeds."""
    status, _, body = post(
        url, json.dumps(json_request()).encode(), {"Content-Type": "application/json"}
    )
    assert status == 200, body
    outputs = {o["name"]: o["data"] for o in json.loads(body)["outputs"]}
    assert outputs["OUTPUT0"] == (A + B).ravel().tolist()
    assert outputs["OUTPUT1"] == (A - B).ravel().tolist()
    c = client("http", url)
    try:
        assert_simple_works(c, "http")
    finally:
        c.close()


def test_raw_good_binary_request_is_accepted(server: ServerProcess) -> None:
    """Sanity check of the hand-built binary request the cases below corrupt."""
    header = binary_request()
    status, headers, body = post(
        server.http_url,
        header + A.tobytes() + B.tobytes(),
        {"Inference-Header-Content-Length": str(len(header))},
    )
    assert status == 200, body
    doc = json.loads(body)
    assert {o["name"] for o in doc["outputs"]} == {"OUTPUT0", "OUTPUT1"}


def test_raw_truncated_binary_data(server: ServerProcess) -> None:
    header = binary_request()
    # INPUT1 claims 64 bytes, only 60 follow.
    status, _, body = post(
        server.http_url,
        header + A.tobytes() + B.tobytes()[:60],
        {"Inference-Header-Content-Length": str(len(header))},
    )
    assert_error_json(status, body, 400, "unexpected size for input 'INPUT1'")
    assert_simple_works_raw(server.http_url)


def test_raw_binary_data_larger_than_declared(server: ServerProcess) -> None:
    header = binary_request()
    status, _, body = post(
        server.http_url,
        header + A.tobytes() + B.tobytes() + b"\x00" * 8,
        {"Inference-Header-Content-Length": str(len(header))},
    )
    assert_error_json(status, body, 400, "unexpected additional input data for model 'simple'")
    assert_simple_works_raw(server.http_url)


def test_raw_byte_size_does_not_match_shape(server: ServerProcess) -> None:
    header = binary_request((60, 64))
    status, _, body = post(
        server.http_url,
        header + A.tobytes()[:60] + B.tobytes(),
        {"Inference-Header-Content-Length": str(len(header))},
    )
    assert_error_json(
        status, body, 400, "input byte size mismatch for input 'INPUT0' for model 'simple'"
    )
    assert_simple_works_raw(server.http_url)


def test_raw_malformed_json(server: ServerProcess) -> None:
    status, headers, body = post(server.http_url, b'{"inputs": [', {})
    assert_error_json(status, body, 400)
    assert headers.get("content-type", "").startswith("application/json")
    assert_simple_works_raw(server.http_url)


def test_raw_json_not_an_object(server: ServerProcess) -> None:
    status, _, body = post(server.http_url, b"[1, 2, 3]", {})
    assert_error_json(status, body, 400)
    assert_simple_works_raw(server.http_url)


def test_raw_missing_inputs(server: ServerProcess) -> None:
    status, _, body = post(server.http_url, b'{"id": "x"}', {})
    assert_error_json(status, body, 400, "inputs")
    assert_simple_works_raw(server.http_url)


@pytest.mark.parametrize("value", ["-1", "too-large", "abc", "1.5"])
def test_raw_invalid_inference_header_length(server: ServerProcess, value: str) -> None:
    header = binary_request()
    payload = header + A.tobytes() + B.tobytes()
    if value == "too-large":
        value = str(len(payload) + 1)
    status, _, body = post(server.http_url, payload, {"Inference-Header-Content-Length": value})
    assert_error_json(status, body, 400)
    assert_simple_works_raw(server.http_url)


def test_raw_triton_prefixed_parameter(server: ServerProcess) -> None:
    doc = json_request(parameters={"triton_foo": 1})
    status, _, body = post(server.http_url, json.dumps(doc).encode(), {})
    assert_error_json(status, body, 400, "starting with 'triton_' are reserved")
    assert_simple_works_raw(server.http_url)


def test_raw_fp16_as_json(server: ServerProcess) -> None:
    doc = {"inputs": [{"name": "INPUT0", "shape": [2], "datatype": "FP16", "data": [1.0, 2.0]}]}
    status, _, body = post(
        server.http_url, json.dumps(doc).encode(), {}, path="/v2/models/identity_fp16/infer"
    )
    message = assert_error_json(status, body, 400, "FP16")
    assert "JSON" in message
    assert_simple_works_raw(server.http_url)


def test_raw_invalid_gzip_body(server: ServerProcess) -> None:
    status, _, body = post(
        server.http_url, b"this is not gzip data at all", {"Content-Encoding": "gzip"}
    )
    assert_error_json(status, body, 400)
    assert_simple_works_raw(server.http_url)


def test_raw_valid_gzip_body_is_accepted(server: ServerProcess) -> None:
    """Counterpart of the invalid-gzip case: a good compressed request works."""
    packed = gzip.compress(json.dumps(json_request()).encode())
    status, _, body = post(server.http_url, packed, {"Content-Encoding": "gzip"})
    assert status == 200, body


@pytest.fixture(scope="module")
def small_limit_server(
    example_repo: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("small_limit") / "repo"
    repo.mkdir()
    shutil.copytree(example_repo / "simple", repo / "simple")
    proc = ServerProcess([repo], "--http-max-input-size", "1024")
    yield proc
    proc.stop()


def test_raw_oversized_body(small_limit_server: ServerProcess) -> None:
    url = small_limit_server.http_url
    doc = json_request(id="x" * 4096)
    payload = json.dumps(doc).encode()
    assert len(payload) > 4096
    status, _, body = post(url, payload, {})
    assert_error_json(status, body, 400, "exceeds the maximum allowed value")
    # A small good request (well under 1 KiB) still works.
    small = json.dumps(json_request()).encode()
    assert len(small) < 1024
    assert_simple_works_raw(url)


# ---------------------------------------------------------------------------- gRPC only


def test_grpc_raw_and_typed_contents_mixed(server: ServerProcess) -> None:
    request = service_pb2.ModelInferRequest(model_name="simple")
    for name in ("INPUT0", "INPUT1"):
        tensor = request.inputs.add(name=name, datatype="INT32", shape=[1, 16])
        if name == "INPUT0":
            tensor.contents.int_contents.extend(A.ravel().tolist())
    request.raw_input_contents.extend([A.tobytes(), B.tobytes()])
    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        with pytest.raises(grpc.RpcError) as info:
            stub.ModelInfer(request, timeout=30)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "contents field must not be specified when using raw_input_contents" in (
        info.value.details()
    )
    c = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        assert_simple_works(c, "grpc")
    finally:
        c.close()
