"""Inference over HTTP and gRPC with the official tritonclient (sync, async and asyncio).

Expected values are always computed with numpy from the inputs that were sent.
"""

from __future__ import annotations

import asyncio
import gzip
import http.client
import json
import queue
import zlib
from collections.abc import Iterator
from functools import partial
from typing import Any

import grpc
import ml_dtypes
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
import tritonclient.http as httpclient
import tritonclient.http.aio as httpaio
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException, deserialize_bytes_tensor

from tests.support import clients
from tests.support.models import IDENTITY_MODELS
from testkit.server_process import ServerProcess

ADD_SUB_MODELS = ["simple", "add_sub_python", "async_add_sub"]

# (protocol, input binary, output binary). gRPC always carries raw bytes.
TRANSPORTS = [
    pytest.param("http", True, True, id="http-binary"),
    pytest.param("http", False, False, id="http-json"),
    pytest.param("http", True, False, id="http-binary-in-json-out"),
    pytest.param("http", False, True, id="http-json-in-binary-out"),
    pytest.param("grpc", True, True, id="grpc"),
]
transports = pytest.mark.parametrize(("protocol", "binary_in", "binary_out"), TRANSPORTS)

# Datatypes that HTTP cannot carry as JSON.
BINARY_ONLY = {"FP16", "BF16"}

NP_DTYPES: dict[str, Any] = {
    "BOOL": np.bool_,
    "UINT8": np.uint8,
    "UINT16": np.uint16,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "FP16": np.float16,
    "FP32": np.float32,
    "FP64": np.float64,
    "BF16": ml_dtypes.bfloat16,
    "BYTES": np.object_,
}


@pytest.fixture
def client(server: ServerProcess, protocol: str) -> Iterator[Any]:
    c = clients.client(protocol, server.url(protocol))
    yield c
    c.close()


def _requested(protocol: str, names: list[str], binary: bool = True) -> list[Any]:
    if protocol == "http":
        return [httpclient.InferRequestedOutput(n, binary_data=binary) for n in names]
    return [grpcclient.InferRequestedOutput(n) for n in names]


def _response_dict(result: Any, protocol: str) -> dict[str, Any]:
    if protocol == "http":
        return result.get_response()
    r = result.get_response()
    return {
        "id": r.id,
        "model_name": r.model_name,
        "model_version": r.model_version,
        "outputs": [
            {"name": o.name, "datatype": o.datatype, "shape": list(o.shape)} for o in r.outputs
        ],
    }


def _output_meta(result: Any, protocol: str, name: str) -> tuple[str, list[int]]:
    out = result.get_output(name)
    assert out is not None, name
    if protocol == "http":
        return out["datatype"], list(out["shape"])
    return out.datatype, list(out.shape)


def _as_bytes(array: np.ndarray) -> list[bytes]:
    """BYTES elements as bytes whether the client decoded JSON (str) or binary (bytes)."""
    return [x if isinstance(x, bytes) else str(x).encode("utf-8") for x in array.flatten()]


def _check_http_output_encoding(result: Any, protocol: str, names: list[str], binary: bool) -> None:
    if protocol != "http":
        return
    for out in result.get_response()["outputs"]:
        if out["name"] in names:
            has_binary = "binary_data_size" in out.get("parameters", {})
            assert has_binary is binary, out
            assert ("data" in out) is (not binary), out


# ----------------------------------------------------------------------------------
# add/sub models
# ----------------------------------------------------------------------------------


def _add_sub_request(
    protocol: str,
    batch: int,
    binary: bool,
    seed: int,
    dtype: Any = np.int32,
    datatype: str = "INT32",
):
    rng = np.random.default_rng(seed)
    if dtype == np.int8:
        a = rng.integers(-128, 128, size=(batch, 16)).astype(np.int8)
        b = rng.integers(-128, 128, size=(batch, 16)).astype(np.int8)
    else:
        a = rng.integers(-100_000, 100_000, size=(batch, 16)).astype(dtype)
        b = rng.integers(-100_000, 100_000, size=(batch, 16)).astype(dtype)
    inputs = [
        clients.make_input(protocol, "INPUT0", a, datatype, binary),
        clients.make_input(protocol, "INPUT1", b, datatype, binary),
    ]
    return inputs, a, b


@pytest.mark.parametrize("model", ADD_SUB_MODELS)
@pytest.mark.parametrize("batch", [1, 8])
@transports
def test_add_sub(
    client: Any, protocol: str, binary_in: bool, binary_out: bool, model: str, batch: int
) -> None:
    inputs, a, b = _add_sub_request(protocol, batch, binary_in, seed=batch)
    outputs = _requested(protocol, ["OUTPUT0", "OUTPUT1"], binary_out)
    result = client.infer(model, inputs, outputs=outputs)
    out0, out1 = result.as_numpy("OUTPUT0"), result.as_numpy("OUTPUT1")
    assert out0.dtype == np.int32 and out1.dtype == np.int32
    np.testing.assert_array_equal(out0, a + b)
    np.testing.assert_array_equal(out1, a - b)
    for name in ("OUTPUT0", "OUTPUT1"):
        assert _output_meta(result, protocol, name) == ("INT32", [batch, 16])
    _check_http_output_encoding(result, protocol, ["OUTPUT0", "OUTPUT1"], binary_out)
    response = _response_dict(result, protocol)
    assert response["model_name"] == model
    assert response["model_version"] == "1"


@pytest.mark.parametrize("model", ADD_SUB_MODELS)
def test_add_sub_default_outputs(client: Any, protocol: str, model: str) -> None:
    # No outputs listed: every model output comes back (HTTP client asks for binary).
    inputs, a, b = _add_sub_request(protocol, 3, True, seed=3)
    result = client.infer(model, inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    assert sorted(o["name"] for o in _response_dict(result, protocol)["outputs"]) == [
        "OUTPUT0",
        "OUTPUT1",
    ]


def test_add_sub_with_version(client: Any, protocol: str) -> None:
    inputs, a, b = _add_sub_request(protocol, 2, True, seed=5)
    result = client.infer("simple", inputs, model_version="1")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)


@pytest.mark.parametrize("model", ADD_SUB_MODELS)
@pytest.mark.parametrize("binary", [True, False])
def test_requested_output_subset(client: Any, protocol: str, model: str, binary: bool) -> None:
    inputs, a, b = _add_sub_request(protocol, 2, binary, seed=11)
    result = client.infer(model, inputs, outputs=_requested(protocol, ["OUTPUT1"], binary))
    assert result.as_numpy("OUTPUT0") is None
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    names = [o["name"] for o in _response_dict(result, protocol)["outputs"]]
    assert names == ["OUTPUT1"]


def test_request_id_echoed(client: Any, protocol: str) -> None:
    inputs, a, b = _add_sub_request(protocol, 1, True, seed=1)
    result = client.infer("simple", inputs, request_id="req-42/ü")
    response = _response_dict(result, protocol)
    assert response["id"] == "req-42/ü"
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    # An empty id is not echoed over HTTP (and is the empty default over gRPC).
    result = client.infer("simple", inputs)
    assert _response_dict(result, protocol).get("id", "") == ""


@pytest.mark.parametrize("model", ["simple", "add_sub_python"])
def test_custom_parameters_accepted(client: Any, protocol: str, model: str) -> None:
    inputs, a, b = _add_sub_request(protocol, 1, True, seed=2)
    params = {"custom_str": "hello", "custom_int": 7, "custom_bool": True, "custom_float": 0.25}
    result = client.infer(model, inputs, parameters=params)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


# ----------------------------------------------------------------------------------
# simple_int8, simple_string, simple_identity
# ----------------------------------------------------------------------------------


@pytest.mark.parametrize("batch", [1, 8])
@transports
def test_simple_int8_wraps(
    client: Any, protocol: str, binary_in: bool, binary_out: bool, batch: int
) -> None:
    inputs, a, b = _add_sub_request(
        protocol, batch, binary_in, seed=8 + batch, dtype=np.int8, datatype="INT8"
    )
    # make sure both directions overflow somewhere
    a[0, :4] = [127, -128, 100, -100]
    b[0, :4] = [1, 1, 100, 100]
    inputs = [
        clients.make_input(protocol, "INPUT0", a, "INT8", binary_in),
        clients.make_input(protocol, "INPUT1", b, "INT8", binary_in),
    ]
    result = client.infer(
        "simple_int8", inputs, outputs=_requested(protocol, ["OUTPUT0", "OUTPUT1"], binary_out)
    )
    expected_sum = np.add(a, b, dtype=np.int8)  # wraps modulo 2**8
    expected_diff = np.subtract(a, b, dtype=np.int8)
    out0, out1 = result.as_numpy("OUTPUT0"), result.as_numpy("OUTPUT1")
    assert out0.dtype == np.int8 and out1.dtype == np.int8
    np.testing.assert_array_equal(out0, expected_sum)
    np.testing.assert_array_equal(out1, expected_diff)
    wide = a.astype(np.int64) + b.astype(np.int64)
    assert (wide != expected_sum).any(), "the test data must overflow"


@pytest.mark.parametrize("batch", [1, 8])
@transports
def test_simple_string(
    client: Any, protocol: str, binary_in: bool, binary_out: bool, batch: int
) -> None:
    rng = np.random.default_rng(batch)
    ai = rng.integers(-1000, 1000, size=(batch, 16))
    bi = rng.integers(-1000, 1000, size=(batch, 16))
    a = np.array([str(x).encode() for x in ai.flatten()], dtype=np.object_).reshape(batch, 16)
    b = np.array([str(x).encode() for x in bi.flatten()], dtype=np.object_).reshape(batch, 16)
    inputs = [
        clients.make_input(protocol, "INPUT0", a, "BYTES", binary_in),
        clients.make_input(protocol, "INPUT1", b, "BYTES", binary_in),
    ]
    result = client.infer(
        "simple_string", inputs, outputs=_requested(protocol, ["OUTPUT0", "OUTPUT1"], binary_out)
    )
    out0, out1 = result.as_numpy("OUTPUT0"), result.as_numpy("OUTPUT1")
    assert out0.shape == (batch, 16) and out1.shape == (batch, 16)
    assert _as_bytes(out0) == [str(x).encode() for x in (ai + bi).flatten()]
    assert _as_bytes(out1) == [str(x).encode() for x in (ai - bi).flatten()]
    assert _output_meta(result, protocol, "OUTPUT0") == ("BYTES", [batch, 16])


SPECIAL_BYTES_BINARY = [
    b"",
    b"a\x00b",
    b"\x00",
    b"\x00\x00\x00\x00",
    b"hello world",
    b"\xff\xfe\x00\x01 raw",
    "héllo ✓".encode(),
    b"x" * 1000,
    b"",
]
SPECIAL_BYTES_JSON = [
    b"",
    b"a\x00b",
    b"\x00",
    b"hello world",
    "héllo ✓".encode(),
    b'quote " and \\ backslash',
    b"tab\tnewline\n",
    b"x" * 1000,
    b"",
]


@pytest.mark.parametrize("batch", [1, 4])
@transports
def test_simple_identity_bytes(
    client: Any, protocol: str, binary_in: bool, binary_out: bool, batch: int
) -> None:
    # Bytes that are not UTF-8 cannot travel in a JSON string, in either direction.
    all_binary = protocol == "grpc" or (binary_in and binary_out)
    values = SPECIAL_BYTES_BINARY if all_binary else SPECIAL_BYTES_JSON
    data = np.array([values] * batch, dtype=np.object_)
    result = client.infer(
        "simple_identity",
        [clients.make_input(protocol, "INPUT0", data, "BYTES", binary_in)],
        outputs=_requested(protocol, ["OUTPUT0"], binary_out),
    )
    out = result.as_numpy("OUTPUT0")
    assert out.shape == data.shape
    assert _as_bytes(out) == list(data.flatten())
    _check_http_output_encoding(result, protocol, ["OUTPUT0"], binary_out)


def test_non_utf8_bytes_output_as_json_is_an_error(server: ServerProcess) -> None:
    # Bytes that are not UTF-8 cannot be a JSON string: Triton writes them raw (its clients
    # then fail to parse the answer; qa/L0_string_io expects an exception), tritium answers
    # 400 rather than replacing them. As binary data they come back exactly.
    c = httpclient.InferenceServerClient(server.url("http"))
    data = np.array([[b"ok", b"\xff\xfe raw"]], dtype=np.object_)
    inputs = [clients.make_input("http", "INPUT0", data, "BYTES", True)]
    with pytest.raises(InferenceServerException) as info:
        c.infer("simple_identity", inputs, outputs=_requested("http", ["OUTPUT0"], False))
    assert info.value.status() == "400"
    assert "unable to return output 'OUTPUT0' as JSON" in str(info.value)
    result = c.infer("simple_identity", inputs, outputs=_requested("http", ["OUTPUT0"], True))
    assert _as_bytes(result.as_numpy("OUTPUT0")) == list(data.flatten())


# ----------------------------------------------------------------------------------
# Every datatype through identity_<dtype>
# ----------------------------------------------------------------------------------


def _dtype_data(datatype: str, n: int, json_safe: bool) -> np.ndarray:
    rng = np.random.default_rng(zlib.crc32(datatype.encode()))
    if n == 0:
        if datatype == "BYTES":
            return np.array([], dtype=np.object_)
        return np.zeros(0, dtype=NP_DTYPES[datatype])
    if datatype == "BOOL":
        data = rng.integers(0, 2, size=n).astype(np.bool_)
        data[:2] = [True, False]
        return data
    if datatype == "BYTES":
        pool = SPECIAL_BYTES_JSON if json_safe else SPECIAL_BYTES_BINARY
        return np.array(
            [pool[i % len(pool)] + str(i).encode() * (i % 3) for i in range(n)], dtype=np.object_
        )
    dtype = NP_DTYPES[datatype]
    if datatype.startswith(("INT", "UINT")):
        info = np.iinfo(dtype)
        data = rng.integers(info.min, info.max, size=n, dtype=dtype, endpoint=True)
        data[:3] = [info.min, info.max, 0]
        return data
    data = (rng.standard_normal(n) * 1000).astype(dtype)
    specials = [0.0, -0.0, 1.5, -2.25]
    if not json_safe:
        specials += [np.inf, -np.inf, np.nan]
    data[: len(specials)] = np.array(specials, dtype=np.float64).astype(dtype)
    return data


def _assert_identical(out: np.ndarray, expected: np.ndarray, datatype: str) -> None:
    assert out.shape == expected.shape
    if datatype == "BYTES":
        assert _as_bytes(out) == list(expected.flatten())
        return
    assert out.dtype == expected.dtype, (out.dtype, expected.dtype)
    assert out.tobytes() == expected.tobytes()  # bit-exact, NaN and -0.0 included


IDENTITY_CASES = [
    pytest.param(dt, proto, binary, id=f"{dt}-{mode}")
    for dt in IDENTITY_MODELS
    for proto, binary, mode in (
        ("http", True, "http-binary"),
        ("http", False, "http-json"),
        ("grpc", True, "grpc"),
    )
    if binary or dt not in BINARY_ONLY
]


@pytest.mark.parametrize(("datatype", "protocol", "binary"), IDENTITY_CASES)
# n5000: 20-40 KB of a 4- or 8-byte type, past the gRPC answer's OUTPUT_VIEWS_FROM (16 KiB):
# the output goes out as a view of its array (frontends/grpc/wire.py:Pieces)
@pytest.mark.parametrize("n", [37, 0, 5000], ids=["n37", "empty", "n5000"])
def test_identity_every_datatype(
    client: Any, protocol: str, datatype: str, binary: bool, n: int
) -> None:
    data = _dtype_data(datatype, n, json_safe=not binary)
    result = client.infer(
        IDENTITY_MODELS[datatype],
        [clients.make_input(protocol, "INPUT0", data, datatype, binary)],
        outputs=_requested(protocol, ["OUTPUT0"], binary),
    )
    out = result.as_numpy("OUTPUT0")
    _assert_identical(out, data, datatype)
    assert _output_meta(result, protocol, "OUTPUT0") == (datatype, [n])
    _check_http_output_encoding(result, protocol, ["OUTPUT0"], binary)


def test_bf16_uses_ml_dtypes(client: Any, protocol: str) -> None:
    data = np.array([1.0, -2.5, 3.140625, 65280.0, 1e-3], dtype=ml_dtypes.bfloat16)
    result = client.infer("identity_bf16", [clients.make_input(protocol, "INPUT0", data, "BF16")])
    out = result.as_numpy("OUTPUT0")
    assert out.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(out.view(np.uint16), data.view(np.uint16))


@pytest.mark.parametrize("n", [0, 1, 1000])
@transports
def test_onnx_identity(
    client: Any, protocol: str, binary_in: bool, binary_out: bool, n: int
) -> None:
    data = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    result = client.infer(
        "identity_onnx_fp32",
        [clients.make_input(protocol, "INPUT0", data, "FP32", binary_in)],
        outputs=_requested(protocol, ["OUTPUT0"], binary_out),
    )
    _assert_identical(result.as_numpy("OUTPUT0"), data, "FP32")
    assert _output_meta(result, protocol, "OUTPUT0") == ("FP32", [n])


# ----------------------------------------------------------------------------------
# Compression
# ----------------------------------------------------------------------------------


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
@pytest.mark.parametrize("direction", ["request", "response", "both"])
def test_compression(client: Any, protocol: str, algorithm: str, direction: str) -> None:
    inputs, a, b = _add_sub_request(protocol, 8, True, seed=21)
    if protocol == "http":
        kwargs = {}
        if direction in ("request", "both"):
            kwargs["request_compression_algorithm"] = algorithm
        if direction in ("response", "both"):
            kwargs["response_compression_algorithm"] = algorithm
    else:
        kwargs = {"compression_algorithm": algorithm}
    result = client.infer("simple", inputs, **kwargs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def _decompress(algorithm: str, data: bytes) -> bytes:
    if algorithm == "gzip":
        return gzip.decompress(data)
    try:
        return zlib.decompress(data)  # zlib-wrapped deflate, what Triton and tritonclient use
    except zlib.error:
        return zlib.decompress(data, -zlib.MAX_WBITS)  # raw deflate


def _compress(algorithm: str, data: bytes) -> bytes:
    return gzip.compress(data) if algorithm == "gzip" else zlib.compress(data)


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
@pytest.mark.parametrize("batch", [1, 8], ids=["small-body", "large-body"])
def test_http_raw_compression(server: ServerProcess, algorithm: str, batch: int) -> None:
    """The server reads compressed bodies and compresses responses the client accepts.

    tritium leaves bodies under 1 KiB uncompressed (Triton compresses every body): the
    aiohttp-based clients always send Accept-Encoding, and compressing a few hundred bytes
    costs more than it saves. Either form decodes to the same answer."""
    a = (np.arange(16 * batch, dtype=np.int32).reshape(batch, 16) - 8) * 123_457
    b = np.full((batch, 16), 5, dtype=np.int32)
    request = {
        "inputs": [
            {
                "name": "INPUT0",
                "shape": [batch, 16],
                "datatype": "INT32",
                "data": a.flatten().tolist(),
            },
            {
                "name": "INPUT1",
                "shape": [batch, 16],
                "datatype": "INT32",
                "data": b.flatten().tolist(),
            },
        ]
    }
    body = _compress(algorithm, json.dumps(request).encode())
    host, port = server.http_url.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request(
            "POST",
            "/v2/models/simple/infer",
            body=body,
            headers={
                "Content-Type": "application/json",
                "Content-Encoding": algorithm,
                "Accept-Encoding": algorithm,
            },
        )
        response = conn.getresponse()
        data = response.read()
        status = response.status
        encoding = response.getheader("Content-Encoding")
    finally:
        conn.close()
    assert status == 200, data
    if batch == 1:  # a ~600-byte body: sent as it is
        assert encoding is None
        reply = json.loads(data)
    else:
        assert encoding == algorithm
        reply = json.loads(_decompress(algorithm, data))
    outputs = {
        o["name"]: np.array(o["data"], dtype=np.int32).reshape(o["shape"]) for o in reply["outputs"]
    }
    np.testing.assert_array_equal(outputs["OUTPUT0"], a + b)
    np.testing.assert_array_equal(outputs["OUTPUT1"], a - b)


# ----------------------------------------------------------------------------------
# Large tensors
# ----------------------------------------------------------------------------------


def test_large_tensor_64mib(server: ServerProcess, protocol: str) -> None:
    n = 64 * 1024 * 1024 // 4
    data = np.random.default_rng(64).standard_normal(n, dtype=np.float32)
    if protocol == "http":
        c = httpclient.InferenceServerClient(server.http_url, network_timeout=120.0)
        timeout: dict[str, Any] = {}
    else:
        c = grpcclient.InferenceServerClient(server.grpc_url)
        timeout = {"client_timeout": 120.0}
    try:
        result = c.infer(
            "identity_fp32",
            [clients.make_input(protocol, "INPUT0", data, "FP32", True)],
            outputs=_requested(protocol, ["OUTPUT0"], True),
            **timeout,
        )
    finally:
        c.close()
    out = result.as_numpy("OUTPUT0")
    assert out.shape == (n,) and out.dtype == np.float32
    assert np.array_equal(out, data)


# ----------------------------------------------------------------------------------
# Concurrency: sync async_infer and the asyncio clients
# ----------------------------------------------------------------------------------

N_CONCURRENT = 100


def _concurrent_request(module: Any, i: int) -> tuple[str, list[Any], np.ndarray, np.ndarray]:
    model = ADD_SUB_MODELS[i % len(ADD_SUB_MODELS)]
    batch = 1 + i % 4
    a = (np.arange(16 * batch, dtype=np.int32).reshape(batch, 16) * (i + 1)) - i
    b = np.full((batch, 16), i, dtype=np.int32)
    inputs = []
    for name, arr in (("INPUT0", a), ("INPUT1", b)):
        inp = module.InferInput(name, list(arr.shape), "INT32")
        inp.set_data_from_numpy(arr)
        inputs.append(inp)
    return model, inputs, a, b


def _check_concurrent(result: Any, protocol: str, i: int, a: np.ndarray, b: np.ndarray) -> None:
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    assert _response_dict(result, protocol)["id"] == f"r{i}"


def _on_done(done: queue.Queue, index: int, result: Any, error: Any) -> None:
    done.put((index, result, error))


def test_async_infer_sync_client(server: ServerProcess, protocol: str) -> None:
    module = clients.module(protocol)
    if protocol == "http":
        c = httpclient.InferenceServerClient(server.http_url, concurrency=16)
        try:
            pending = []
            for i in range(N_CONCURRENT):
                model, inputs, a, b = _concurrent_request(module, i)
                pending.append((i, a, b, c.async_infer(model, inputs, request_id=f"r{i}")))
            for i, a, b, handle in pending:
                _check_concurrent(handle.get_result(timeout=60), protocol, i, a, b)
        finally:
            c.close()
        return

    c = grpcclient.InferenceServerClient(server.grpc_url)
    done: queue.Queue = queue.Queue()
    try:
        expected = {}
        for i in range(N_CONCURRENT):
            model, inputs, a, b = _concurrent_request(module, i)
            expected[i] = (a, b)
            c.async_infer(model, inputs, partial(_on_done, done, i), request_id=f"r{i}")
        for _ in range(N_CONCURRENT):
            i, result, error = done.get(timeout=60)
            assert error is None, error
            _check_concurrent(result, protocol, i, *expected.pop(i))
        assert not expected
    finally:
        c.close()


async def _asyncio_many(protocol: str, url: str) -> None:
    module = httpaio if protocol == "http" else grpcaio
    c = module.InferenceServerClient(url)
    try:
        requests = [_concurrent_request(clients.module(protocol), i) for i in range(N_CONCURRENT)]
        results = await asyncio.gather(
            *(
                c.infer(model, inputs, request_id=f"r{i}")
                for i, (model, inputs, _, _) in enumerate(requests)
            )
        )
    finally:
        await c.close()
    for i, (result, (_, _, a, b)) in enumerate(zip(results, requests, strict=True)):
        _check_concurrent(result, protocol, i, a, b)


def test_asyncio_clients_concurrent(server: ServerProcess, protocol: str) -> None:
    asyncio.run(_asyncio_many(protocol, server.url(protocol)))


# ----------------------------------------------------------------------------------
# gRPC typed contents
# ----------------------------------------------------------------------------------


def _grpc_simple_request(
    a: np.ndarray, b: np.ndarray, typed: bool
) -> service_pb2.ModelInferRequest:
    request = service_pb2.ModelInferRequest(model_name="simple", id="typed" if typed else "raw")
    for name, arr in (("INPUT0", a), ("INPUT1", b)):
        tensor = request.inputs.add(name=name, datatype="INT32", shape=list(arr.shape))
        if typed:
            tensor.contents.int_contents.extend(arr.flatten().tolist())
        else:
            request.raw_input_contents.append(arr.tobytes())
    for name in ("OUTPUT0", "OUTPUT1"):
        request.outputs.add(name=name)
    return request


def _grpc_outputs(response: service_pb2.ModelInferResponse) -> dict[str, np.ndarray]:
    assert len(response.raw_output_contents) == len(response.outputs)
    return {
        o.name: np.frombuffer(raw, dtype=np.int32).reshape(list(o.shape))
        for o, raw in zip(response.outputs, response.raw_output_contents, strict=True)
    }


def test_grpc_typed_contents_matches_raw(server: ServerProcess) -> None:
    rng = np.random.default_rng(99)
    a = rng.integers(-50_000, 50_000, size=(3, 16)).astype(np.int32)
    b = rng.integers(-50_000, 50_000, size=(3, 16)).astype(np.int32)
    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        typed = stub.ModelInfer(_grpc_simple_request(a, b, typed=True), timeout=30)
        raw = stub.ModelInfer(_grpc_simple_request(a, b, typed=False), timeout=30)
    assert typed.id == "typed" and raw.id == "raw"
    assert typed.model_name == raw.model_name == "simple"
    assert typed.model_version == raw.model_version == "1"
    t_out, r_out = _grpc_outputs(typed), _grpc_outputs(raw)
    assert set(t_out) == set(r_out) == {"OUTPUT0", "OUTPUT1"}
    for name in t_out:
        np.testing.assert_array_equal(t_out[name], r_out[name])
    np.testing.assert_array_equal(t_out["OUTPUT0"], a + b)
    np.testing.assert_array_equal(t_out["OUTPUT1"], a - b)


def test_grpc_typed_contents_mixed_with_raw_rejected(server: ServerProcess) -> None:
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    request = _grpc_simple_request(a, a, typed=True)
    request.raw_input_contents.append(a.tobytes())
    request.raw_input_contents.append(a.tobytes())
    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        with pytest.raises(grpc.RpcError) as info:
            stub.ModelInfer(request, timeout=30)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT


TYPED_FIELDS = {
    "BOOL": "bool_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}


@pytest.mark.parametrize("datatype", list(TYPED_FIELDS))
def test_grpc_typed_contents_every_datatype(server: ServerProcess, datatype: str) -> None:
    data = _dtype_data(datatype, 23, json_safe=False)
    request = service_pb2.ModelInferRequest(model_name=IDENTITY_MODELS[datatype])
    tensor = request.inputs.add(name="INPUT0", datatype=datatype, shape=[data.size])
    getattr(tensor.contents, TYPED_FIELDS[datatype]).extend(data.tolist())
    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        response = stub.ModelInfer(request, timeout=30)
    assert [o.name for o in response.outputs] == ["OUTPUT0"]
    assert response.outputs[0].datatype == datatype
    assert list(response.outputs[0].shape) == [data.size]
    # Triton answers in raw_output_contents, never in typed contents.
    assert len(response.raw_output_contents) == 1
    raw = response.raw_output_contents[0]
    if datatype == "BYTES":
        out = deserialize_bytes_tensor(raw)
    else:
        out = np.frombuffer(raw, dtype=NP_DTYPES[datatype])
    _assert_identical(out, data, datatype)


def test_http_raw_binary_request_and_response(server: ServerProcess) -> None:
    """Binary tensor extension by hand: JSON header + raw bytes, response header set."""
    a = np.arange(32, dtype=np.int32).reshape(2, 16) * -7
    b = np.arange(32, dtype=np.int32).reshape(2, 16)
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "shape": [2, 16],
                    "datatype": "INT32",
                    "parameters": {"binary_data_size": a.nbytes},
                },
                {
                    "name": "INPUT1",
                    "shape": [2, 16],
                    "datatype": "INT32",
                    "parameters": {"binary_data_size": b.nbytes},
                },
            ],
            "outputs": [
                {"name": "OUTPUT1", "parameters": {"binary_data": True}},
                {"name": "OUTPUT0", "parameters": {"binary_data": False}},
            ],
        }
    ).encode()
    host, port = server.http_url.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request(
            "POST",
            "/v2/models/simple/infer",
            body=header + a.tobytes() + b.tobytes(),
            headers={
                "Inference-Header-Content-Length": str(len(header)),
                "Content-Type": "application/octet-stream",
            },
        )
        response = conn.getresponse()
        body = response.read()
        status = response.status
        json_length = response.getheader("Inference-Header-Content-Length")
    finally:
        conn.close()
    assert status == 200, body
    assert json_length is not None
    reply = json.loads(body[: int(json_length)])
    binary = body[int(json_length) :]
    outputs = {o["name"]: o for o in reply["outputs"]}
    assert sorted(outputs) == ["OUTPUT0", "OUTPUT1"]
    assert outputs["OUTPUT1"]["parameters"]["binary_data_size"] == a.nbytes == len(binary)
    np.testing.assert_array_equal(
        np.frombuffer(binary, dtype=np.int32).reshape(outputs["OUTPUT1"]["shape"]), a - b
    )
    assert "data" not in outputs["OUTPUT1"]
    np.testing.assert_array_equal(
        np.array(outputs["OUTPUT0"]["data"], dtype=np.int32).reshape(2, 16), a + b
    )
    assert reply["model_name"] == "simple" and reply["model_version"] == "1"


def test_infer_unknown_model(client: Any, protocol: str) -> None:
    inputs, _, _ = _add_sub_request(protocol, 1, True, seed=0)
    with pytest.raises(InferenceServerException, match="no_such_model"):
        client.infer("no_such_model", inputs)


def test_scalar_through_reshape(server: ServerProcess, protocol: str) -> None:
    """dims [1] with reshape [] : clients send shape [1], the model sees a true scalar, and the
    response is shaped back to the config's dims."""
    client = clients.client(protocol, server.url(protocol))
    x = np.array([3.25], dtype=np.float32)
    result = client.infer("scalar_reshape", [clients.make_input(protocol, "INPUT0", x, "FP32")])
    out = result.as_numpy("OUTPUT0")
    assert out.shape == (1,)
    np.testing.assert_array_equal(out, x * 2)


def test_non_decoupled_model_answering_through_its_sender(
    server: ServerProcess, protocol: str
) -> None:
    """A response sent through the sender, then a flag-only final: unary calls and streams
    both get that response."""
    x = np.array([1.5, -2.0, 4.0], dtype=np.float32)
    client = clients.client(protocol, server.url(protocol))
    result = client.infer("sender_two_step", [clients.make_input(protocol, "INPUT0", x, "FP32")])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x * 3)
    if protocol == "grpc":
        answers: queue.Queue = queue.Queue()
        client.start_stream(lambda result, error: answers.put((result, error)))
        for i in range(3):
            inputs = [clients.make_input(protocol, "INPUT0", x + i, "FP32")]
            client.async_stream_infer("sender_two_step", inputs, request_id=str(i))
        for i in range(3):
            result, error = answers.get(timeout=30)
            assert error is None
            assert result.get_response().id == str(i)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), (x + i) * 3)
        client.stop_stream()
