"""The gRPC answer written by hand (frontends/grpc/wire.infer_response, codec.encode_answer) is
byte for byte what protobuf serializes for the same response (codec.encode_response), for
many shapes, datatypes, BYTES, shared-memory outputs, parameters and sizes on both sides of
``OUTPUT_VIEWS_FROM``; large outputs are views of the arrays, not copies."""

from __future__ import annotations

import random

import numpy as np
import pytest
from tritonclient.grpc import service_pb2 as pb

from tritium.frontends.grpc import codec, wire
from tritium.tensor_codec import object_array
from tritium.types import DataType, InferenceResponse, ShmRef, Tensor

_NUMERIC = [d for d in DataType if d is not DataType.BYTES]


def _joined(answer: bytes | wire.Pieces) -> bytes:
    if isinstance(answer, bytes):
        return answer
    assert isinstance(answer.parts[0], bytes)
    joined = answer.join()
    assert len(joined) == len(answer)
    return joined


def _same(response: InferenceResponse) -> bytes | wire.Pieces:
    answer = codec.encode_answer(response)
    expected = codec.encode_response(response).SerializeToString()
    assert _joined(answer) == expected
    assert pb.ModelInferResponse.FromString(_joined(answer)) == codec.encode_response(response)
    return answer


def _tensor(rng: random.Random, name: str, datatype: DataType, shape: tuple[int, ...]) -> Tensor:
    count = int(np.prod(shape)) if shape else 1
    if datatype is DataType.BYTES:
        items = [bytes(rng.randrange(256) for _ in range(rng.randrange(40))) for _ in range(count)]
        return Tensor(name, datatype, shape, object_array(items, shape))
    raw = bytes(rng.randrange(256) for _ in range(count * datatype.dtype.itemsize))
    array = np.frombuffer(raw, dtype=datatype.dtype).reshape(shape)
    if datatype is DataType.BOOL:
        array = array.astype(bool)
    return Tensor(name, datatype, shape, array)


@pytest.mark.parametrize("seed", range(40))
def test_random_responses_match_protobuf(seed: int) -> None:
    rng = random.Random(seed)
    outputs = []
    for i in range(rng.randrange(5)):
        datatype = rng.choice(list(DataType))
        shape = tuple(rng.choice([0, 1, 2, 3, 7, 130, 300]) for _ in range(rng.randrange(4)))
        if int(np.prod(shape)) > 5000:
            shape = shape[:1]
        name = rng.choice(["OUTPUT__0", "out", "ü名", "", "x" * 200])
        outputs.append(_tensor(rng, f"{name}{i}", datatype, shape))
    parameters = rng.choice(
        [{}, {"sequence_id": 7}, {"a": True, "b": -3, "c": 1.5, "d": "text", "e": 2**40}]
    )
    response = InferenceResponse(
        rng.choice(["simple", "m" * 300, "é"]),
        rng.choice(["1", "", "12345678901"]),
        rng.choice(["", "req-1", "i" * 150]),
        outputs,
        parameters,
    )
    _same(response)


@pytest.mark.parametrize("datatype", list(DataType))
@pytest.mark.parametrize("rows", [0, 1, 255, 256, 4096, 70000])
def test_sizes_around_the_view_threshold(datatype: DataType, rows: int) -> None:
    rng = random.Random(rows)
    if datatype is DataType.BYTES:
        rows = min(rows, 3000)
    tensor = _tensor(rng, "OUTPUT__0", datatype, (rows, 1) if rows < 70000 else (1, rows))
    _same(InferenceResponse("m", "1", "", [tensor, _tensor(rng, "small", datatype, (2,))]))


def test_large_outputs_are_views_of_their_arrays() -> None:
    first = np.arange(65536, dtype=np.float32).reshape(1024, 64)
    second = np.arange(8192, dtype=np.int64).reshape(8192)
    tiny = np.arange(4, dtype=np.int32)
    response = InferenceResponse(
        "m",
        "1",
        "x",
        [
            Tensor("A", DataType.FP32, first.shape, first),
            Tensor("T", DataType.INT32, tiny.shape, tiny),
            Tensor("B", DataType.INT64, second.shape, second),
        ],
    )
    answer = _same(response)
    assert isinstance(answer, wire.Pieces)
    views = [p for p in answer.parts if isinstance(p, memoryview)]
    assert len(views) == 2
    for view, array in zip(views, [first, second], strict=True):
        assert np.shares_memory(np.frombuffer(view, np.uint8), array)
        assert view.format == "B" and view.nbytes == array.nbytes


def test_shared_memory_outputs_keep_an_empty_entry() -> None:
    data = np.zeros((4096,), dtype=np.float32)
    shm = ShmRef("region", 0, data.nbytes)
    response = InferenceResponse(
        "m",
        "1",
        "",
        [
            Tensor("S", DataType.FP32, data.shape, data, shm=shm),
            Tensor("R", DataType.FP32, data.shape, data),
        ],
    )
    _same(response)


def test_non_contiguous_and_other_byte_orders_match() -> None:
    base = np.arange(40000, dtype=np.float64).reshape(200, 200)
    response = InferenceResponse(
        "m",
        "1",
        "",
        [
            Tensor("T", DataType.FP64, (200, 200), base.T),
            Tensor("BE", DataType.FP32, (200, 200), base.astype(">f4")),
            Tensor("W", DataType.INT16, (200, 200), base.astype(np.int64)),
        ],
    )
    _same(response)


def test_varints_and_negative_dims_match() -> None:
    for value in (0, 1, 127, 128, 300, 2**31, 2**63 - 1, -1, -(2**63)):
        out = bytearray()
        wire._put_varint(out, value)
        expected = pb.ModelInferResponse.InferOutputTensor(shape=[value]).SerializeToString()
        assert wire.output_tensor("", "", (value,))[2:] == expected
        assert len(out) + 2 == len(expected)
