"""The value objects --workers forwards between processes (workers/forward.py pickles them)
survive a pickle round trip, on the compiled build too: each pickles by its fields
(``__reduce__``: mypyc's own unpickling would set a ``Final`` field, which a compiled class
refuses)."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

from tritium.types import (
    ClientRequest,
    DataType,
    InferenceResponse,
    RequestedOutput,
    RequestOptions,
    ShmRef,
    Tensor,
)


def _tensor(name: str) -> Tensor:
    data = np.arange(4, dtype=np.int32).reshape(1, 4)
    return Tensor(name, DataType.INT32, (1, 4), data, {"k": 1}, ShmRef("region", 8, 16))


def test_a_client_request_round_trips() -> None:
    request = ClientRequest(
        "m",
        2,
        "id-1",
        (_tensor("IN"),),
        (RequestedOutput("OUT", {"x": True}),),
        {"sequence_id": 7},
        True,
    )
    back = pickle.loads(pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL))
    assert (back.model_name, back.model_version, back.id, back.uses_shm) == ("m", 2, "id-1", True)
    assert dict(back.parameters) == {"sequence_id": 7}
    assert back.outputs == request.outputs
    (tensor,) = back.inputs
    assert tensor.datatype is DataType.INT32 and tensor.shape == (1, 4)
    assert tensor.shm == ShmRef("region", 8, 16) and tensor.parameters == {"k": 1}
    np.testing.assert_array_equal(tensor.data, request.inputs[0].data)
    assert copy.copy(request).inputs is request.inputs


def test_a_response_and_the_options_round_trip() -> None:
    response = InferenceResponse("m", "1", "r", [_tensor("OUT")], {"p": "v"})
    back = pickle.loads(pickle.dumps(response))
    assert (back.model_name, back.model_version, back.id, back.parameters) == (
        "m",
        "1",
        "r",
        {"p": "v"},
    )
    assert back.outputs[0].name == "OUT" and back.error is None
    options = RequestOptions(3, 100, "seq", 1)
    assert pickle.loads(pickle.dumps(options)) == options


def test_the_value_classes_constructors() -> None:
    """types.py's value classes are slotted classes with one constructor each (compiled
    alike in both builds, docs/compiled-code.md): defaults are fresh per instance, a copy
    with other data or parameters keeps the rest, no attribute outside the fields."""
    first, second = _tensor("A"), Tensor("B", DataType.INT32, (1,), np.zeros(1, np.int32))
    assert second.parameters == {} and second.shm is None
    assert Tensor("C", DataType.INT32, (1,), second.data).parameters is not second.parameters
    reshaped = first.with_data(first.data.reshape(4), (4,))
    assert (reshaped.name, reshaped.shape, reshaped.shm) == ("A", (4,), first.shm)
    assert first.with_data(second.data).shape == first.shape
    assert RequestedOutput("O").parameters == {} and RequestedOutput("O") == RequestedOutput("O")
    assert RequestedOutput("O") != RequestedOutput("O", {"x": 1})
    request = ClientRequest("m", inputs=(first,))
    assert (request.model_version, request.id, request.outputs, dict(request.parameters)) == (
        -1,
        "",
        (),
        {},
    )
    other = request.with_parameters({"p": 1})
    assert dict(other.parameters) == {"p": 1} and other.inputs is request.inputs
    with pytest.raises(AttributeError):
        request.extra = 1  # type: ignore[attr-defined]
    response = InferenceResponse("m", "1")
    assert response.outputs == [] and response.parameters == {} and response.error is None
    assert InferenceResponse("m", "1").outputs is not response.outputs


def test_a_datatype_comes_back_as_the_same_member_and_key() -> None:
    """DataType hashes by identity (each member is one object): a member that went through
    pickle is the same object, so it finds what the other process's keys hold."""
    by_type = {member: member.wire for member in DataType}
    for member in DataType:
        back = pickle.loads(pickle.dumps(member))
        assert back is member and by_type[back] == member.wire
    assert len(DataType) == 14 and len({hash(m) for m in DataType}) == 14
