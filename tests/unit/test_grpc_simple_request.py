"""wire.simple_request, the ModelInferRequest reader for the common shape of message: for
every message it takes, ``decode_infer`` gives what protobuf's path (``decode_message``) gives;
every other message (or one that is wrong in any way) goes to protobuf's path, whose error is
the answer. Checked on hand-made messages and on mutations of a valid one."""

from __future__ import annotations

import random
import struct
from typing import Any

import numpy as np
import pytest
from tritonclient.grpc import service_pb2 as pb

from tritium.errors import ServerError
from tritium.frontends.grpc import codec, wire
from tritium.types import ClientRequest


def _request(**fields: Any) -> pb.ModelInferRequest:
    msg = pb.ModelInferRequest(model_name=fields.pop("model", "simple"), **fields)
    return msg


def _with_inputs(msg: pb.ModelInferRequest, count: int = 2, dtype: str = "INT32") -> bytes:
    for i in range(count):
        tensor = msg.inputs.add(name=f"INPUT{i}", datatype=dtype)
        tensor.shape.extend([1, 4])
        msg.raw_input_contents.append(struct.pack("<4i", i, i + 1, i + 2, i + 3))
    return msg.SerializeToString()


def _outcome(decode: Any, raw: bytes, forwarded: dict[str, str] | None) -> Any:
    try:
        client = decode(raw, forwarded)
    except ServerError as exc:
        return ("error", exc.kind, str(exc))
    return _summary(client)


def _summary(client: ClientRequest) -> Any:
    return (
        client.model_name,
        client.model_version,
        client.id,
        [(t.name, t.datatype, t.shape, np.asarray(t.data).tobytes()) for t in client.inputs],
        [(o.name, o.parameters) for o in client.outputs],
        dict(client.parameters),
        client.uses_shm,
    )


def _same(raw: bytes, forwarded: dict[str, str] | None = None) -> Any:
    full = _outcome(lambda r, f: codec.decode_message(r, f)[1], raw, forwarded)
    assert _outcome(codec.decode_infer, raw, forwarded) == full
    return full


def test_the_common_message_is_read_from_its_bytes() -> None:
    msg = _request(model_version="3", id="req-1")
    msg.outputs.add(name="OUTPUT0")
    raw = _with_inputs(msg)
    fields = wire.simple_request(raw)
    assert fields is not None
    model, version, rid, specs, outputs, raws = fields
    assert (model, version, rid, outputs) == ("simple", "3", "req-1", ["OUTPUT0"])
    assert specs == [("INPUT0", "INT32", (1, 4)), ("INPUT1", "INT32", (1, 4))]
    assert [bytes(r) for r in raws] == list(msg.raw_input_contents)
    summary = _same(raw, {"forwarded-header": "x"})
    assert summary[0:3] == ("simple", 3, "req-1")


def _request_parameter(msg: pb.ModelInferRequest) -> None:
    msg.parameters["sequence_id"].int64_param = 5


def _input_parameter(msg: pb.ModelInferRequest) -> None:
    msg.inputs[0].parameters["shared_memory_region"].string_param = "region"


def _output_parameter(msg: pb.ModelInferRequest) -> None:
    msg.outputs.add(name="OUTPUT0").parameters["classification"].int64_param = 2


def _typed_contents(msg: pb.ModelInferRequest) -> None:
    msg.inputs[0].contents.int_contents.extend([1])


@pytest.mark.parametrize(
    "change", [_request_parameter, _input_parameter, _output_parameter, _typed_contents]
)
def test_other_messages_go_to_protobuf(change: Any) -> None:
    msg = _request()
    _with_inputs(msg)
    change(msg)
    raw = msg.SerializeToString()
    assert wire.simple_request(raw) is None
    _same(raw)


def test_unknown_fields_bad_text_and_bad_bytes_go_to_protobuf() -> None:
    raw = _with_inputs(_request())
    unknown = raw + bytes([15 << 3 | 0, 1])  # field 15, a varint
    bad_text = bytes([1 << 3 | 2, 2, 0xFF, 0xFE]) + raw  # model_name not UTF-8
    truncated = raw[:-3]
    for message in (unknown, bad_text, truncated, b"\x00", bytes([1 << 3 | 0, 1])):
        assert wire.simple_request(message) is None
        _same(message)


def test_what_protobuf_refuses_after_parsing_is_refused_alike() -> None:
    cases = []
    msg = _request()
    tensor = msg.inputs.add(name="INPUT0", datatype="INT32")
    tensor.shape.extend([-1, 4])  # a negative dimension: ten bytes a varint
    msg.raw_input_contents.append(bytes(16))
    cases.append(msg)
    cases.append(_request(model_version="x1"))  # no version
    wrong = _request()
    _with_inputs(wrong, dtype="INT33")  # no datatype
    cases.append(wrong)
    short = _request()
    _with_inputs(short)
    short.raw_input_contents[1] = b"\0"  # wrong size
    cases.append(short)
    missing = _request()
    _with_inputs(missing)
    del missing.raw_input_contents[1]
    cases.append(missing)
    for case in cases:
        if not case.inputs:
            _with_inputs(case)
        outcome = _same(case.SerializeToString())
        assert outcome[0] == "error"


def test_singular_fields_keep_the_last_and_dimensions_come_packed_or_not() -> None:
    raw = _with_inputs(_request())
    again = raw + _request(model="other", id="x").SerializeToString()
    assert _same(again)[0:3] == ("other", -1, "x")
    msg = _request()
    tensor = msg.inputs.add(name="INPUT0", datatype="FP32")
    tensor.shape.append(2)
    msg.raw_input_contents.append(struct.pack("<2f", 1.5, 2.5))
    packed = msg.SerializeToString()
    # the same message with its shape as an unpacked varint (protobuf accepts both): the
    # input's field one byte shorter
    size = len(msg.inputs[0].SerializeToString())
    unpacked = packed.replace(
        bytes([5 << 3 | 2, size]) + msg.inputs[0].SerializeToString(),
        bytes([5 << 3 | 2, size - 1])
        + msg.inputs[0].SerializeToString().replace(bytes([3 << 3 | 2, 1, 2]), bytes([3 << 3, 2])),
    )
    assert unpacked != packed and wire.simple_request(unpacked) is not None
    assert _same(unpacked) == _same(packed)


def test_mutated_messages_decode_as_protobuf_decodes_them() -> None:
    msg = _request(model_version="1", id="abc")
    msg.outputs.add(name="OUTPUT0")
    raw = _with_inputs(msg)
    rng = random.Random(24)
    taken = 0
    for _ in range(3000):
        data = bytearray(raw)
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(data) or 1)
            choice = rng.random()
            if choice < 0.6 and data:
                data[at] = rng.randrange(256)
            elif choice < 0.8:
                del data[at:]
            else:
                data.insert(at, rng.randrange(256))
        mutated = bytes(data)
        taken += wire.simple_request(mutated) is not None
        _same(mutated)
    assert taken > 0  # some mutations still are messages of the common shape


def test_the_reader_runs_in_both_builds() -> None:
    """One ModelInfer parser whatever the build (docs/compiled-code.md): the common message's
    tensors are views of the request's own bytes (protobuf's path copies each raw content)."""
    raw = _with_inputs(_request())
    whole = np.frombuffer(raw, np.uint8)
    client = codec.decode_infer(raw)
    assert all(np.shares_memory(t.data, whole) for t in client.inputs)
    copied = codec.decode_message(raw)[1]
    assert not any(np.shares_memory(t.data, whole) for t in copied.inputs)
