"""The short-step decoders of large requests give exactly what the one-call decoders give
(tritium.tensor_codec.bytes_array, frontends.http.json_data, frontends.grpc.wire), with their
thresholds made tiny so every path is taken; and the shared parameter and value rules."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from tritonclient.grpc import service_pb2 as pb

from tritium import tensor_codec
from tritium.errors import ErrorKind, ServerError

from tritium.frontends.grpc import codec as grpc_codec
from tritium.frontends.grpc import wire
from tritium.frontends.http import codec as http_codec
from tritium.frontends.http import json_data
from tritium.frontends.tensors import MAX_TENSORS, numeric_array
from tritium.extensions.parameters import parse_parameters
from tritium.types import DataType, RequestFlag


def _invalid(call, *phrases: str) -> ServerError:
    with pytest.raises(ServerError) as info:
        call()
    assert info.value.kind is ErrorKind.INVALID_ARG, info.value
    for phrase in phrases:
        assert phrase in info.value.message, info.value.message
    return info.value


def _wire(values: list[bytes]) -> bytes:
    return b"".join(len(v).to_bytes(4, "little") + v for v in values)


# ------------------------------------------------------------------------------ BYTES


@pytest.mark.parametrize(
    "values",
    [[b""] * 10, [b"ab\x00"] * 7, [b"a", b"bc", b"", b"d\x00"] * 5, [b"\xff" * 300, b"x"]],
)
def test_bytes_array_in_small_chunks(monkeypatch: pytest.MonkeyPatch, values: list[bytes]) -> None:
    monkeypatch.setattr(tensor_codec, "CHUNK", 3)
    array = tensor_codec.bytes_array(_wire(values), "x", len(values))
    assert array.dtype == object and array.tolist() == values


def test_bytes_array_refuses_a_wrong_count_before_building() -> None:
    _invalid(lambda: tensor_codec.bytes_array(bytes(4 * 1000), "IN", 16), "'IN'", "1000")
    _invalid(lambda: tensor_codec.bytes_array(_wire([b"a", b"bc"] * 9), "IN", 4), "more than 4")
    _invalid(lambda: tensor_codec.bytes_array(b"\x05\x00\x00\x00ab", "IN"), "incomplete")


# ------------------------------------------------------------------------------ JSON


def _decode(body: bytes):
    try:
        request, _ = http_codec.decode_request(body, None, "m", 1)
    except ServerError as exc:
        assert exc.kind is ErrorKind.INVALID_ARG, exc
        return "refused"
    return [(t.name, t.datatype, t.shape, t.data.tolist()) for t in request.inputs]


def _random_bodies(count: int) -> list[bytes]:
    rng = random.Random(7)
    texts = ["a", "", 'x"y', "b\\", "[],", '\\"', '"data": [1]', "\u00e9"]
    bodies = []
    for _ in range(count):
        n = rng.randint(0, 30)
        kind = rng.choice(["INT32", "FP32", "BYTES", "BOOL", "INT8", "UINT64"])
        if kind == "BYTES":
            values: list = [rng.choice(texts) for _ in range(n)]
        elif kind == "BOOL":
            values = [rng.random() < 0.5 for _ in range(n)]
        elif kind == "FP32":
            values = [rng.random() * 100 for _ in range(n)]
        else:
            values = [rng.randint(-200, 200) for _ in range(n)]
        data = [values[i : i + 2] for i in range(0, n, 2)] if n % 2 == 0 and n else values
        doc = {"id": rng.choice(texts), "inputs": [{"name": "I", "datatype": kind, "shape": [n]}]}
        doc["inputs"][0]["data"] = data
        text = json.dumps(doc, separators=rng.choice([(",", ":"), (", ", ": ")]))
        if rng.random() < 0.3:  # damage one character
            pos = rng.randrange(len(text))
            text = text[:pos] + rng.choice([",", "]", "[", '"', " ", "\\", "1"]) + text[pos + 1 :]
        bodies.append(text.encode())
    return bodies


def test_json_large_path_matches_small_path(monkeypatch: pytest.MonkeyPatch) -> None:
    bodies = _random_bodies(250)
    expected = [_decode(body) for body in bodies]
    assert 0 < expected.count("refused") < len(bodies)
    monkeypatch.setattr(http_codec, "OFFLOAD_BYTES", 0)
    monkeypatch.setattr(json_data, "SPAN_MIN", 0)
    for window in (1, 2, 3, 7, 64):
        monkeypatch.setattr(json_data, "WINDOW", window)
        for body, want in zip(bodies, expected, strict=True):
            assert _decode(body) == want, (window, body)


def test_json_large_path_refusals(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http_codec, "OFFLOAD_BYTES", 0)
    monkeypatch.setattr(json_data, "SPAN_MIN", 0)
    monkeypatch.setattr(json_data, "WINDOW", 4)

    def body(data: str, shape: int = 3, extra: str = "") -> bytes:
        doc = '{"inputs":[{"name":"I","datatype":"INT8","shape":[%d],"data":%s}]%s}'
        return (doc % (shape, data, extra)).encode()

    decode = http_codec.decode_request
    _invalid(lambda: decode(body("[1,1000,2]"), None, "m", 1), "out of range")
    _invalid(lambda: decode(body("[1,2.5,2]"), None, "m", 1), "expected integers")
    _invalid(lambda: decode(body("[1,true,2]"), None, "m", 1), "expected numbers")
    _invalid(lambda: decode(body("[1,,2]"), None, "m", 1), "'I'")
    _invalid(lambda: decode(body("[1,2,]"), None, "m", 1), "'I'")
    _invalid(lambda: decode(body("[1,2,3]", 10**12), None, "m", 1), "elements count")
    _invalid(lambda: decode(body("[1,2,3]", 2), None, "m", 1), "elements count")
    extra = ',"parameters":{"data":[1,2,3]}'
    _invalid(lambda: decode(body("[1,2,3]", 3, extra), None, "m", 1), "'data' outside")


# ------------------------------------------------------------------------------ gRPC


def _grpc_message(datatype: str, field: str, values: list) -> pb.ModelInferRequest:
    message = pb.ModelInferRequest(model_name="m", id="r")
    message.parameters["priority"].uint64_param = 2
    tensor = message.inputs.add(name="IN", datatype=datatype, shape=[len(values)])
    getattr(tensor.contents, field).extend(values)
    message.inputs.add(name="RAW", datatype="INT32", shape=[2])
    message.outputs.add(name="OUT")
    return message


GRPC_CASES = [
    ("INT8", "int_contents", [1, -128, 127, 0] * 9),
    ("UINT64", "uint64_contents", [0, 2**64 - 1, 300] * 9),
    ("INT64", "int64_contents", [-(2**63), 2**63 - 1] * 9),
    ("FP32", "fp32_contents", [1.5, -0.25, 3.0] * 9),
    ("FP64", "fp64_contents", [1e300, -2.5] * 9),
    ("BOOL", "bool_contents", [True, False, True] * 9),
    ("BYTES", "bytes_contents", [b"", b"a", b"bcd"] * 9),
    ("BYTES", "bytes_contents", [b""] * 30),
    ("BYTES", "bytes_contents", [b"xy"] * 30),
]


@pytest.mark.parametrize(("datatype", "field", "values"), GRPC_CASES)
def test_grpc_pieces_match_one_parse(
    monkeypatch: pytest.MonkeyPatch, datatype: str, field: str, values: list
) -> None:
    message = _grpc_message(datatype, field, values)
    message.inputs[1].contents.int_contents.extend([5, 6])
    raw = message.SerializeToString()
    want = grpc_codec.decode_request(pb.ModelInferRequest.FromString(raw), -1)
    monkeypatch.setattr(wire, "PIECE", 5)
    monkeypatch.setattr(tensor_codec, "CHUNK", 4)
    monkeypatch.setattr(wire, "CHUNK", 4)
    parsed, got = grpc_codec.decode_message(raw)
    assert parsed.id == "r" and got.parameters["priority"] == 2
    assert [t.name for t in got.inputs] == ["IN", "RAW"]
    for a, b in zip(got.inputs, want.inputs, strict=True):
        assert a.datatype is b.datatype and a.shape == b.shape
        assert a.data.dtype == b.data.dtype and a.data.tolist() == b.data.tolist()


@pytest.mark.parametrize("piece", [7, 1 << 20])
def test_grpc_raw_contents_are_views_of_the_request(
    monkeypatch: pytest.MonkeyPatch, piece: int
) -> None:
    """From RAW_VIEWS_FROM bytes, raw_input_contents become tensors over the request's own
    bytes (no copy), equal to what protobuf's parse gives; their count is still checked."""
    monkeypatch.setattr(wire, "RAW_VIEWS_FROM", 1)
    monkeypatch.setattr(wire, "PIECE", piece)
    a, b = np.arange(12, dtype=np.float32).reshape(3, 4), np.arange(5, dtype=np.int64)
    message = pb.ModelInferRequest(model_name="m", id="r")
    message.inputs.add(name="A", datatype="FP32", shape=[3, 4])
    message.inputs.add(name="B", datatype="INT64", shape=[5])
    message.raw_input_contents.extend([a.tobytes(), b.tobytes()])
    raw = message.SerializeToString()
    parsed, got = grpc_codec.decode_message(raw)
    assert parsed.id == "r" and parsed.model_name == "m" and not parsed.raw_input_contents
    want = grpc_codec.decode_request(pb.ModelInferRequest.FromString(raw), -1)
    for tensor, expected in zip(got.inputs, want.inputs, strict=True):
        assert (tensor.name, tensor.datatype, tensor.shape) == (
            expected.name, expected.datatype, expected.shape,
        )  # fmt: skip
        assert tensor.data.dtype == expected.data.dtype
        assert tensor.data.tolist() == expected.data.tolist()
        assert np.shares_memory(tensor.data, np.frombuffer(raw, dtype=np.uint8))
    message.raw_input_contents.append(b"\0" * 8)
    _invalid(lambda: grpc_codec.decode_message(message.SerializeToString()), "raw_input_contents")


def test_grpc_raw_contents_past_the_bound_are_refused() -> None:
    """Empty raw_input_contents cost 2 bytes each on the wire and a view each here: a request
    with more than MAX_TENSORS of them is INVALID_ARG, not gigabytes of views."""
    message = pb.ModelInferRequest(model_name="m")
    message.raw_input_contents.extend([b""] * (10 * MAX_TENSORS))
    raw = message.SerializeToString()
    assert len(raw) >= wire.RAW_VIEWS_FROM
    _invalid(lambda: grpc_codec.decode_message(raw), f"more than {MAX_TENSORS}")


def test_grpc_invalid_utf8_and_out_of_range() -> None:
    raw = pb.ModelInferRequest(model_name="\x01").SerializeToString().replace(b"\x01", b"\xff")
    _invalid(lambda: grpc_codec.decode_message(raw), "UTF-8")
    _invalid(lambda: grpc_codec.decode_message(b"\x0a\xff"), "ModelInferRequest")
    bad = _grpc_message("INT8", "int_contents", [1000]).SerializeToString()
    _invalid(lambda: grpc_codec.decode_message(bad), "out of range")


# ------------------------------------------------------------------ parameters and values


def test_reserved_parameters() -> None:
    given = {
        "priority": 3,
        "timeout": 10,
        "sequence_id": "s",
        "sequence_start": True,
        "sequence_end": True,
        "custom": 1,
    }
    options, custom = parse_parameters(given)
    assert (options.priority, options.timeout_us, options.correlation_id) == (3, 10, "s")
    assert options.flags == RequestFlag.SEQUENCE_START | RequestFlag.SEQUENCE_END
    assert custom == {"custom": 1}
    options, _ = parse_parameters({"sequence_start": True, "sequence_end": False})
    assert options.flags == RequestFlag.SEQUENCE_START
    for key, value in [("priority", "abc"), ("timeout", True), ("sequence_id", 1.0)]:
        _invalid(lambda k=key, v=value: parse_parameters({k: v}), f"'{key}'")
    _invalid(lambda: parse_parameters({"priority": -1}), "'priority'")
    _invalid(lambda: parse_parameters({"sequence_id": 2**64}), "'sequence_id'")
    _invalid(lambda: parse_parameters({"triton_x": 1}), "'triton_x'")


def test_flags_kept_by_http_codec() -> None:
    """The codec passes sequence parameters on; the core reads them as Triton's flags."""
    doc = {"parameters": {"sequence_id": 5, "sequence_start": True}, "inputs": []}
    request, _ = http_codec.decode_request(json.dumps(doc).encode(), None, "m", 1)
    options, _ = parse_parameters(request.parameters)
    assert options.correlation_id == 5 and options.flags == RequestFlag.SEQUENCE_START


@pytest.mark.parametrize(
    ("datatype", "values", "phrase"),
    [
        (DataType.INT8, [1000], "out of range"),
        (DataType.UINT8, [-1], "out of range"),
        (DataType.UINT64, [2**64], "out of range"),
        (DataType.INT32, [1.5], "expected integers"),
        (DataType.INT32, ["1"], "expected integers"),
        (DataType.FP32, ["1"], "expected numbers"),
        (DataType.BOOL, [1], "expected booleans"),
        (DataType.INT16, np.array([40000]), "out of range"),
    ],
)
def test_numeric_array_refusals(datatype: DataType, values, phrase: str) -> None:
    _invalid(lambda: numeric_array(values, datatype, "IN"), "'IN'", datatype.wire, phrase)


def test_numeric_array_accepts_full_range() -> None:
    assert numeric_array([0, 2**64 - 1], DataType.UINT64, "x").tolist() == [0, 2**64 - 1]
    assert numeric_array([-128, 127], DataType.INT8, "x").dtype == np.int8
    assert numeric_array([1, 2.5], DataType.FP32, "x").tolist() == [1.0, 2.5]
    assert numeric_array([], DataType.BOOL, "x").dtype == np.bool_


def test_large_json_padded_with_whitespace_decodes() -> None:
    """Whitespace is valid JSON anywhere: a body padded past the large-body threshold with
    spaces is decoded (orjson skips them), not refused as an oversized document skeleton."""
    doc = {"inputs": [{"name": "A", "datatype": "INT32", "shape": [2], "data": [1, 2]}]}
    body = json.dumps(doc).encode() + b" \n" * (2 << 20)
    request, _ = http_codec.decode_request(body, None, "m", 1)
    assert request.inputs[0].data.tolist() == [1, 2]
    crowded = {**doc, "id": "x" * (2 << 20)}  # a skeleton that really is large: refused
    _invalid(
        lambda: http_codec.decode_request(json.dumps(crowded).encode(), None, "m", 1),
        "besides the inputs",
    )
