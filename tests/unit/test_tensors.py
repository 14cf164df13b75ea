"""Tensor bytes (``tritium.tensor_codec``: BYTES length prefixes; ``tritium.frontends.tensors``:
raw buffers) and the HTTP codec (JSON + binary tensor extension), checked against tritonclient's
own serialisation where it has one (no sockets)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from tritonclient.utils import deserialize_bytes_tensor, serialize_byte_tensor

from tritium.errors import ErrorKind, ServerError
from tritium.frontends.http.codec import OutputPlan, decode_request, encode_response
from tritium.frontends.tensors import parse_shape, tensor_bytes, tensor_from_buffer
from tritium.tensor_codec import deserialize_bytes, serialize_bytes
from tritium.extensions.parameters import parse_parameters
from tritium.types import DataType, InferenceResponse, Tensor

BYTES_CASES = [
    [b"ab", b"", b"xyz"],
    [b""],
    [b"", b"", b""],
    [b"a\x00b", b"\x00", b"\x00\x00\x00\x00"],
    [b"\xff" * 300, "héllo".encode()],
]


def client_bytes(values: list[bytes]) -> bytes:
    """What tritonclient puts on the wire for a BYTES tensor."""
    serialized = serialize_byte_tensor(np.array(values, dtype=np.object_))
    return serialized.item() if serialized.size else b""


def invalid(call, *phrases: str) -> ServerError:
    with pytest.raises(ServerError) as info:
        call()
    assert info.value.kind is ErrorKind.INVALID_ARG, info.value
    for phrase in phrases:
        assert phrase in info.value.message, info.value.message
    return info.value


# ------------------------------------------------------------------------ BYTES wire format


def test_bytes_wire_format_known_layout() -> None:
    wire = bytes.fromhex("020000006162000000000300000078797a")
    assert deserialize_bytes(wire, "x") == [b"ab", b"", b"xyz"]
    assert serialize_bytes(np.array([b"ab", b"", b"xyz"], dtype=object)) == wire


@pytest.mark.parametrize("values", BYTES_CASES)
def test_bytes_decode_matches_tritonclient(values: list[bytes]) -> None:
    assert deserialize_bytes(client_bytes(values), "x") == values


@pytest.mark.parametrize("values", BYTES_CASES)
def test_bytes_encode_matches_tritonclient(values: list[bytes]) -> None:
    wire = serialize_bytes(np.array(values, dtype=object))
    assert wire == client_bytes(values)
    assert list(deserialize_bytes_tensor(wire)) == values


def test_bytes_encode_str_and_2d() -> None:
    array = np.array([["a", "bc"], ["", "d\x00"]], dtype=object)
    wire = serialize_bytes(array)
    assert deserialize_bytes(wire, "x") == [b"a", b"bc", b"", b"d\x00"]


def test_bytes_empty_buffer_is_no_elements() -> None:
    assert deserialize_bytes(b"", "x") == []


@pytest.mark.parametrize("wire", [b"\x02", b"\x02\x00\x00", b"\x01\x00\x00\x00a\x05\x00"])
def test_bytes_truncated_length_prefix(wire: bytes) -> None:
    invalid(lambda: deserialize_bytes(wire, "IN"), "'IN'")


def test_bytes_truncated_data() -> None:
    wire = b"\x05\x00\x00\x00ab"
    invalid(lambda: deserialize_bytes(wire, "IN"), "'IN'", "5")


# ---------------------------------------------------------------------- raw tensor buffers


def test_tensor_from_buffer_zero_copy() -> None:
    source = np.arange(6, dtype=np.int32)
    buf = memoryview(source.tobytes())
    tensor = tensor_from_buffer("IN", DataType.INT32, (2, 3), buf, "m")
    assert tensor.shape == (2, 3)
    np.testing.assert_array_equal(tensor.data, source.reshape(2, 3))
    assert tensor.data.dtype == np.int32
    assert np.shares_memory(tensor.data, np.frombuffer(buf, dtype=np.uint8))


def test_tensor_from_buffer_byte_size_mismatch() -> None:
    buf = np.arange(15, dtype=np.int32).tobytes()  # 60 bytes for a 64-byte [1, 16]
    invalid(
        lambda: tensor_from_buffer("INPUT0", DataType.INT32, (1, 16), buf, "simple"),
        "input byte size mismatch for input 'INPUT0' for model 'simple'",
        "64",
        "60",
    )


def test_tensor_from_buffer_bytes_element_count() -> None:
    wire = client_bytes([b"a", b"b"])
    tensor = tensor_from_buffer("IN", DataType.BYTES, (2,), wire, "m")
    assert tensor.data.dtype == object
    assert list(tensor.data) == [b"a", b"b"]
    invalid(lambda: tensor_from_buffer("IN", DataType.BYTES, (3,), wire, "m"), "'IN'", "3")


def test_tensor_from_buffer_bool_and_fp16() -> None:
    flags = np.array([True, False, True])
    tensor = tensor_from_buffer("B", DataType.BOOL, (3,), flags.tobytes(), "m")
    np.testing.assert_array_equal(tensor.data, flags)
    halves = np.array([1.5, -2.0], dtype=np.float16)
    tensor = tensor_from_buffer("H", DataType.FP16, (2,), halves.tobytes(), "m")
    np.testing.assert_array_equal(tensor.data, halves)


def test_tensor_from_buffer_empty_shape() -> None:
    tensor = tensor_from_buffer("E", DataType.FP32, (0, 4), b"", "m")
    assert tensor.data.shape == (0, 4)


@pytest.mark.parametrize("rows", [2, 1 << 14])  # copied when small, a view when large
def test_tensor_bytes_fixed_size_little_endian_row_major(rows: int) -> None:
    data = np.arange(3 * rows, dtype=np.int32).reshape(rows, 3)
    tensor = Tensor("O", DataType.INT32, (3, rows), np.ascontiguousarray(data.T))
    assert bytes(tensor_bytes(tensor)) == np.ascontiguousarray(data.T).astype("<i4").tobytes()
    # A non-contiguous view is written row-major all the same.
    view = Tensor("O", DataType.INT32, (3, rows), data.T)
    assert bytes(tensor_bytes(view)) == np.ascontiguousarray(data.T).tobytes()


def test_tensor_bytes_casts_to_declared_datatype() -> None:
    tensor = Tensor("O", DataType.FP32, (2,), np.array([1.0, 2.0], dtype=np.float64))
    assert bytes(tensor_bytes(tensor)) == np.array([1.0, 2.0], dtype=np.float32).tobytes()


def test_tensor_bytes_bytes_and_empty() -> None:
    values = [b"q", b"", b"\x00r"]
    tensor = Tensor("O", DataType.BYTES, (3,), np.array(values, dtype=object))
    assert bytes(tensor_bytes(tensor)) == client_bytes(values)
    empty = Tensor("O", DataType.FP32, (0,), np.zeros(0, dtype=np.float32))
    assert bytes(tensor_bytes(empty)) == b""


@pytest.mark.parametrize("shape", [[1, 2], [], [0], (3,)])
def test_parse_shape_good(shape: list[int]) -> None:
    assert parse_shape(shape, "x") == tuple(shape)


@pytest.mark.parametrize("shape", [None, "1,2", [1, -1], [1.5], [True], [[1]]])
def test_parse_shape_bad(shape: object) -> None:
    invalid(lambda: parse_shape(shape, "IN"), "'IN'")


# --------------------------------------------------------------------------- HTTP decoding


def decode(doc: dict | bytes, binary: bytes = b"", model: str = "m"):
    head = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    length = len(head) if binary else None
    return decode_request(head + binary, length, model, -1)


def test_decode_json_nested_data_is_flattened() -> None:
    doc = {
        "inputs": [
            {
                "name": "A",
                "datatype": "INT32",
                "shape": [2, 2, 2],
                "data": [[[1, 2], [3, 4]], [[5, 6], [7, 8]]],
            }
        ]
    }
    request, _ = decode(doc)
    (tensor,) = request.inputs
    assert tensor.shape == (2, 2, 2)
    assert tensor.data.dtype == np.int32
    np.testing.assert_array_equal(tensor.data.ravel(), np.arange(1, 9))


def test_decode_json_flat_data_reshaped() -> None:
    doc = {
        "inputs": [{"name": "A", "datatype": "FP32", "shape": [2, 3], "data": [0, 1, 2, 3, 4, 5]}]
    }
    request, _ = decode(doc)
    expected = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(request.inputs[0].data, expected)


@pytest.mark.parametrize("data", [[1, 2, 3], [[1, 2], [3]], [1, 2, 3, 4, 5], []])
def test_decode_json_element_count_errors(data: list) -> None:
    doc = {"inputs": [{"name": "A", "datatype": "INT32", "shape": [2, 2], "data": data}]}
    invalid(lambda: decode(doc), "'A'")


def test_decode_json_bool_bytes_and_type_errors() -> None:
    doc = {
        "inputs": [
            {"name": "B", "datatype": "BOOL", "shape": [2], "data": [True, False]},
            {"name": "S", "datatype": "BYTES", "shape": [2], "data": ["hi", ""]},
        ]
    }
    request, _ = decode(doc)
    np.testing.assert_array_equal(request.inputs[0].data, [True, False])
    assert list(request.inputs[1].data) == [b"hi", b""]
    bad = {"inputs": [{"name": "B", "datatype": "BOOL", "shape": [1], "data": [1]}]}
    invalid(lambda: decode(bad), "'B'")
    bad = {"inputs": [{"name": "N", "datatype": "INT32", "shape": [1], "data": ["x"]}]}
    invalid(lambda: decode(bad), "'N'")
    bad = {"inputs": [{"name": "S", "datatype": "BYTES", "shape": [1], "data": [5]}]}
    invalid(lambda: decode(bad), "'S'")


@pytest.mark.parametrize("datatype", ["FP16", "BF16"])
def test_decode_fp16_bf16_as_json_refused(datatype: str) -> None:
    doc = {"inputs": [{"name": "H", "datatype": datatype, "shape": [1], "data": [1.0]}]}
    invalid(lambda: decode(doc), datatype, "JSON")


def test_decode_unknown_datatype() -> None:
    doc = {"inputs": [{"name": "X", "datatype": "FP128", "shape": [1], "data": [1]}]}
    invalid(lambda: decode(doc), "FP128")


def test_decode_binary_inputs() -> None:
    a = np.arange(16, dtype=np.int32)
    s = client_bytes([b"x", b""])
    doc = {
        "inputs": [
            {
                "name": "A",
                "datatype": "INT32",
                "shape": [1, 16],
                "parameters": {"binary_data_size": a.nbytes},
            },
            {
                "name": "S",
                "datatype": "BYTES",
                "shape": [2],
                "parameters": {"binary_data_size": len(s)},
            },
        ]
    }
    request, _ = decode(doc, a.tobytes() + s)
    np.testing.assert_array_equal(request.inputs[0].data, a.reshape(1, 16))
    assert list(request.inputs[1].data) == [b"x", b""]


def test_decode_binary_truncated_and_extra() -> None:
    a = np.arange(4, dtype=np.int32).tobytes()
    doc = {
        "inputs": [
            {"name": "A", "datatype": "INT32", "shape": [4], "parameters": {"binary_data_size": 16}}
        ]
    }
    invalid(lambda: decode(doc, a[:12]), "unexpected size for input 'A'")
    invalid(lambda: decode(doc, a + b"\x00"), "unexpected additional input data for model 'm'")


def test_decode_binary_size_mismatch_with_shape() -> None:
    doc = {
        "inputs": [
            {"name": "A", "datatype": "INT32", "shape": [4], "parameters": {"binary_data_size": 12}}
        ]
    }
    invalid(lambda: decode(doc, b"\x00" * 12), "input byte size mismatch for input 'A'")


@pytest.mark.parametrize("length", [-1, 10_000])
def test_decode_header_length_out_of_range(length: int) -> None:
    body = json.dumps({"inputs": []}).encode()
    invalid(lambda: decode_request(body, length, "m", -1), "inference header size")


@pytest.mark.parametrize("body", [b"{", b"[1, 2]", b'"str"', b"{}", b'{"inputs": {}}'])
def test_decode_malformed_request(body: bytes) -> None:
    invalid(lambda: decode_request(body, None, "m", -1))


def test_decode_parameters() -> None:
    doc = {
        "id": "r1",
        "parameters": {"binary_data_output": True, "custom": "v", "n": 3, "priority": 2},
        "inputs": [{"name": "A", "datatype": "INT32", "shape": [1], "data": [1]}],
        "outputs": [{"name": "O", "parameters": {"binary_data": False}}, {"name": "P"}],
    }
    request, plan = decode(doc)
    assert request.id == "r1"
    # The codec keeps only what the HTTP front-end reads (binary_data_output); the core
    # parses the reserved parameters, with the same rules for every protocol.
    assert request.parameters == {"custom": "v", "n": 3, "priority": 2}
    options, custom = parse_parameters(request.parameters)
    assert options.priority == 2 and custom == {"custom": "v", "n": 3}
    assert plan.binary_default is True
    assert plan.binary == {"O": False}
    assert [o.name for o in request.outputs] == ["O", "P"]


def test_decode_triton_prefixed_parameter_refused() -> None:
    doc = {
        "parameters": {"triton_anything": 1},
        "inputs": [{"name": "A", "datatype": "INT32", "shape": [1], "data": [1]}],
    }
    request, _ = decode(doc)
    invalid(lambda: parse_parameters(request.parameters), "triton_")


# --------------------------------------------------------------------------- HTTP encoding


def response_with(*tensors: Tensor, rid: str = "") -> InferenceResponse:
    return InferenceResponse("m", "1", rid, list(tensors))


def test_encode_json_response() -> None:
    out = Tensor("O", DataType.INT32, (2, 2), np.arange(4, dtype=np.int32).reshape(2, 2))
    strings = Tensor("S", DataType.BYTES, (2,), np.array([b"ab", b""], dtype=object))
    head, parts, length = encode_response(response_with(out, strings), OutputPlan())
    assert parts == []
    assert length == -1
    doc = json.loads(head)
    assert "id" not in doc  # echoed only when non-empty
    assert doc["model_name"] == "m"
    assert doc["model_version"] == "1"
    o, s = doc["outputs"]
    assert o == {"name": "O", "datatype": "INT32", "shape": [2, 2], "data": [0, 1, 2, 3]}
    assert s["data"] == ["ab", ""]
    assert s["datatype"] == "BYTES"


def test_encode_binary_response_and_header_length() -> None:
    out = Tensor("O", DataType.FP32, (3,), np.array([1.0, 2.0, 3.0], dtype=np.float32))
    strings = Tensor("S", DataType.BYTES, (2,), np.array([b"x", b"\x00y"], dtype=object))
    head, parts, length = encode_response(
        response_with(out, strings, rid="abc"), OutputPlan(binary_default=True)
    )
    assert length == len(head)
    doc = json.loads(head)
    assert doc["id"] == "abc"
    payload = [bytes(p) for p in parts]
    assert payload[0] == out.data.tobytes()
    assert payload[1] == client_bytes([b"x", b"\x00y"])
    for entry, raw in zip(doc["outputs"], payload, strict=True):
        assert entry["parameters"]["binary_data_size"] == len(raw)
        assert "data" not in entry
    # What the client sees: JSON header, then the binary parts in output order.
    body = head + b"".join(payload)
    assert json.loads(body[:length]) == doc


def test_encode_mixed_per_output_choice() -> None:
    a = Tensor("A", DataType.INT32, (1,), np.array([7], dtype=np.int32))
    b = Tensor("B", DataType.INT32, (1,), np.array([8], dtype=np.int32))
    head, parts, length = encode_response(
        response_with(a, b), OutputPlan(binary_default=False, binary={"B": True})
    )
    doc = json.loads(head)
    assert doc["outputs"][0]["data"] == [7]
    assert doc["outputs"][1]["parameters"] == {"binary_data_size": 4}
    assert [bytes(p) for p in parts] == [np.array([8], dtype=np.int32).tobytes()]
    assert length == len(head)


def test_encode_fp16_json_values() -> None:
    halves = Tensor("H", DataType.FP16, (2,), np.array([0.5, -1.25], dtype=np.float16))
    head, _, _ = encode_response(response_with(halves), OutputPlan())
    assert json.loads(head)["outputs"][0]["data"] == [0.5, -1.25]
