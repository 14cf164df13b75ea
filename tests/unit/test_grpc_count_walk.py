"""The bounds on how many entries one inference request carries (issue 44 C1): the first walk
over a large ModelInferRequest's bytes (``wire._Census``) refuses before protobuf builds the
entries, a small message gets the same refusal from ``codec.decode_request``, HTTP's JSON the
same bounds on its inputs, outputs and shapes; and the loops of a long decode on a worker
thread give the other threads a turn (``tensor_codec.let_threads_run``)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable

import numpy as np
import pytest
from tritonclient.grpc import service_pb2 as pb

from tritium import tensor_codec
from tritium.errors import ErrorKind, ServerError
from tritium.frontends.grpc import codec as grpc_codec
from tritium.frontends.grpc import wire
from tritium.frontends.http import codec as http_codec
from tritium.frontends.tensors import MAX_PARAMETERS, MAX_RANK, MAX_TENSORS, check_shape


def _refused(call: Callable[[], object], phrase: str) -> None:
    with pytest.raises(ServerError) as info:
        call()
    assert info.value.kind is ErrorKind.INVALID_ARG, info.value
    assert phrase in info.value.message, info.value.message


def _request(inputs: int, rank: int = 1, params: int = 0, outputs: int = 0) -> pb.ModelInferRequest:
    message = pb.ModelInferRequest(model_name="m")
    for index in range(inputs):
        tensor = message.inputs.add(name=f"I{index}", datatype="UINT8", shape=[1] * rank)
        for key in range(params):
            tensor.parameters[f"p{key}"].int64_param = key
        message.raw_input_contents.append(b"\x07")
    for index in range(outputs):
        message.outputs.add(name=f"O{index}")
    return message


def _padded(message: pb.ModelInferRequest, large: bool) -> bytes:
    """The message, past ``RAW_VIEWS_FROM`` bytes (the walk's path) when ``large`` (an id of
    padding: one field)."""
    raw = message.SerializeToString()
    if large and len(raw) < wire.RAW_VIEWS_FROM:
        message.id = "x" * wire.RAW_VIEWS_FROM
        raw = message.SerializeToString()
    assert (len(raw) >= wire.RAW_VIEWS_FROM) is large
    return raw


def _field(number: int, payload: bytes) -> bytes:
    return wire._key(number, len(payload)) + payload


HEAD = _field(1, b"m")
INPUT = _field(1, b"I") + _field(2, b"FP32")
FIELDS = wire.MAX_FIELDS


def _params(number: int, n: int) -> bytes:
    """``n`` parameters map entries (field ``number``): empty ones (2 bytes each, one key
    protobuf keeps once) when many, of distinct keys when few (protobuf keeps them all)."""
    if n > 1000:
        return _field(number, b"") * n
    return b"".join(_field(number, _field(1, b"k%d" % i)) for i in range(n))


# What a hostile message repeats (kind -> its message of n entries, the refusal, the bound):
# 2 bytes an entry, 500k of them in 976 KiB.
HOSTILE: dict[str, tuple[Callable[[int], bytes], str, int]] = {
    "inputs": (lambda n: HEAD + b"\x2a\x00" * n, "more than 1024 inputs", MAX_TENSORS),
    "outputs": (lambda n: HEAD + b"\x32\x00" * n, "more than 1024 outputs", MAX_TENSORS),
    "raw": (lambda n: HEAD + b"\x3a\x00" * n, "1024 raw_input_contents", MAX_TENSORS),
    "parameters": (lambda n: HEAD + _params(4, n), "more than 128 parameters", MAX_PARAMETERS),
    "unknown": (lambda n: HEAD + b"\x7a\x00" * n, "more than 8192 fields", FIELDS),
    "model_name": (lambda n: HEAD + b"\x0a\x00" * n, "more than 8192 fields", FIELDS),
    "input_parameters": (
        lambda n: HEAD + _field(5, INPUT + _params(4, n)),
        "more than 128 parameters for input 'I'",
        MAX_PARAMETERS,
    ),
    "unpacked_rank": (
        lambda n: HEAD + _field(5, INPUT + b"\x18\x00" * n),
        "'shape' for input 'I': more than 32 dimensions",
        MAX_RANK,
    ),
    "packed_rank": (
        lambda n: HEAD + _field(5, INPUT + _field(3, bytes(n))),
        "'shape' for input 'I': more than 32 dimensions",
        MAX_RANK,
    ),
    "output_parameters": (
        lambda n: HEAD + _field(6, _field(1, b"O") + _params(2, n)),
        "more than 128 parameters for output 'O'",
        MAX_PARAMETERS,
    ),
}


@pytest.mark.parametrize("size", ["976KiB", "small"])
@pytest.mark.parametrize("kind", list(HOSTILE))
def test_hostile_counts_refused(kind: str, size: str) -> None:
    """500k entries (976 KiB: the walk's path), and one past the bound in a message under
    RAW_VIEWS_FROM (protobuf's path: where one fits), refused with the same words."""
    build, phrase, bound = HOSTILE[kind]
    raw = build(500_000 if size == "976KiB" else bound + 1)
    if size == "small" and len(raw) >= wire.RAW_VIEWS_FROM:
        pytest.skip("a message under RAW_VIEWS_FROM bytes cannot hold this many fields")
    _refused(lambda: grpc_codec.decode_message(raw), phrase)
    _refused(lambda: grpc_codec.decode_infer(raw), phrase)


def test_the_walk_stops_at_the_bound() -> None:
    """24M empty inputs (48 MiB) followed by bytes no walk could read: the refusal is the
    count's, so neither the walk nor protobuf went past the bound."""
    raw = HEAD + b"\x2a\x00" * (24 << 20) + b"\x0f" * 64  # wire type 7: malformed
    _refused(lambda: wire.parse_request(raw), "more than 1024 inputs")
    with pytest.raises(ServerError, match="wire type"):
        wire.parse_request(HEAD + b"\x2a\x00" * MAX_TENSORS + b"\x0f" * wire.RAW_VIEWS_FROM)


def test_at_the_bounds_accepted() -> None:
    """MAX_TENSORS inputs of MAX_RANK dimensions with their raw contents, MAX_PARAMETERS
    parameters on the request and one input, MAX_TENSORS requested outputs: a message within
    every bound (MAX_FIELDS included) decodes."""
    large = True
    message = _request(MAX_TENSORS, rank=MAX_RANK, outputs=MAX_TENSORS)
    for key in range(MAX_PARAMETERS):
        message.inputs[0].parameters[f"p{key}"].int64_param = key
        message.parameters[f"r{key}"].int64_param = key
    request = grpc_codec.decode_message(_padded(message, large))[1]
    assert len(request.inputs) == MAX_TENSORS
    assert request.inputs[-1].shape == (1,) * MAX_RANK
    assert request.inputs[-1].data.reshape(-1).tolist() == [7]
    assert len(request.outputs) == MAX_TENSORS
    assert len(request.parameters) == MAX_PARAMETERS


def test_one_past_each_bound() -> None:
    """Well-formed messages one past a bound (large: the walk's path)."""
    large = True

    def decode(message: pb.ModelInferRequest) -> Callable[[], object]:
        return lambda: grpc_codec.decode_message(_padded(message, large))

    _refused(decode(_request(MAX_TENSORS + 1)), f"more than {MAX_TENSORS} inputs")
    _refused(decode(_request(1, outputs=MAX_TENSORS + 1)), f"more than {MAX_TENSORS} outputs")
    _refused(decode(_request(1, rank=MAX_RANK + 1)), "input 'I0': more than 32 dimensions")
    _refused(decode(_request(1, params=MAX_PARAMETERS + 1)), "parameters for input 'I0'")
    message = _request(1)
    for key in range(MAX_PARAMETERS + 1):
        message.parameters[f"r{key}"].int64_param = key
    _refused(decode(message), f"more than {MAX_PARAMETERS} parameters in one request")


def test_check_shape_rank() -> None:
    assert check_shape((1,) * MAX_RANK, "x") == (1,) * MAX_RANK
    _refused(lambda: check_shape((1,) * (MAX_RANK + 1), "x"), "more than 32 dimensions")


def _http(doc: object) -> Callable[[], object]:
    return lambda: http_codec.decode_request(json.dumps(doc).encode(), None, "m", 1)


def test_http_counts() -> None:
    """The same bounds on HTTP's JSON: inputs, outputs, a shape's rank (a 33-dimension shape
    was numpy's ValueError, a 500)."""
    one = {"name": "I", "datatype": "FP32", "shape": [1], "data": [1.0]}
    many = [dict(one, name=f"I{i}") for i in range(MAX_TENSORS + 1)]
    _refused(_http({"inputs": many}), f"more than {MAX_TENSORS} inputs")
    outputs = [{"name": f"O{i}"} for i in range(MAX_TENSORS + 1)]
    _refused(_http({"inputs": [one], "outputs": outputs}), f"more than {MAX_TENSORS} outputs")
    deep = dict(one, shape=[1] * (MAX_RANK + 1))
    _refused(_http({"inputs": [deep]}), "input 'I': more than 32 dimensions")
    request, _ = http_codec.decode_request(
        json.dumps({"inputs": [dict(one, shape=[1] * MAX_RANK)]}).encode(), None, "m", 1
    )
    assert request.inputs[0].shape == (1,) * MAX_RANK


def test_walk_gives_other_threads_a_turn(monkeypatch: pytest.MonkeyPatch) -> None:
    """Compiled loops never let the GIL go by themselves: the field walk (which reads the
    typed contents of a large input on a worker thread) gives the other threads a turn
    (``let_threads_run``: ``time.sleep(0)``) every ``_FIELDS_PER_TURN`` fields, the BYTES scan
    every chunk of elements. Counted through ``time.sleep``, which both builds look up on the
    ``time`` module when they call it (a compiled caller of ``let_threads_run`` calls it
    directly, so patching that name would count nothing there)."""
    me, real_sleep = threading.get_ident(), time.sleep
    turns: list[int] = []

    def counting_sleep(seconds: float) -> None:
        if seconds == 0 and threading.get_ident() == me:
            turns.append(1)
        real_sleep(seconds)

    monkeypatch.setattr(time, "sleep", counting_sleep)
    fields = 10 * wire._FIELDS_PER_TURN
    assert sum(1 for _ in wire._fields(memoryview(b"\x42\x00" * fields))) == fields
    assert len(turns) == 10

    turns.clear()
    values = [b"", b"a"] * (2 * tensor_codec.CHUNK)
    wire_bytes = b"".join(len(v).to_bytes(4, "little") + v for v in values)
    assert tensor_codec.bytes_array(wire_bytes, "x").tolist() == values
    assert len(turns) == 3  # between the 4 chunks
    data = np.zeros((4 * tensor_codec.CHUNK, 3), np.uint8).tobytes()
    items = tensor_codec.strided_items(memoryview(data), 4 * tensor_codec.CHUNK, 0, 3, 3)
    assert len(items) == 4 * tensor_codec.CHUNK
    assert len(turns) == 6
