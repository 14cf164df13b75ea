"""request.py:FinalAnswer, the callback of every call answered once (unary HTTP and gRPC, a
non-decoupled request on a gRPC stream), driven through the real ResponseSender."""

from __future__ import annotations

import gc

import numpy as np

from tritium.errors import ErrorKind, ServerError, invalid_arg
from tritium.request import FinalAnswer, InferenceRequest, ResponseSender
from tritium.types import ClientRequest, DataType, InferenceResponse, Tensor


class _Kept(FinalAnswer):
    __slots__ = ("answers",)

    def __init__(self, request: InferenceRequest) -> None:
        super().__init__(request)
        self.answers: list[InferenceResponse] = []

    def answer(self, response: InferenceResponse) -> None:
        self.answers.append(response)


def _bound(decoupled: bool = False) -> tuple[InferenceRequest, ResponseSender, _Kept]:
    request = InferenceRequest(ClientRequest("m", 1, id="r7"))
    request.decoupled = decoupled
    callback = _Kept(request)
    sender = ResponseSender(callback)
    sender.bind(request, lambda _request, _error, _last: None)
    return request, sender, callback


def _response(value: int) -> InferenceResponse:
    data = np.array([value], dtype=np.int32)
    return InferenceResponse("m", "1", "r7", [Tensor("OUT", DataType.INT32, (1,), data)])


def test_the_final_response_is_the_answer() -> None:
    _, sender, callback = _bound()
    final = _response(1)
    sender.send(final, True)
    assert callback.answers == [final]


def test_a_response_before_a_flag_only_final_is_the_answer() -> None:
    _, sender, callback = _bound()
    first, second = _response(1), _response(2)
    sender.send(first, False)
    sender.send(second, False)
    assert callback.answers == []  # nothing is answered before the final flag
    sender.send(None, True)
    assert callback.answers == [second]


def test_an_error_response_is_answered_as_it_is() -> None:
    _, sender, callback = _bound()
    failed = InferenceResponse("m", "1", "r7", error=invalid_arg("bad input"))
    sender.send(failed, True)
    assert callback.answers == [failed]


def test_no_response_at_all_answers_internal() -> None:
    _, sender, callback = _bound()
    sender.send(None, True)
    (answer,) = callback.answers
    assert isinstance(answer.error, ServerError)
    assert answer.error.kind is ErrorKind.INTERNAL
    assert str(answer.error) == "the model sent no response"
    assert (answer.model_name, answer.id, answer.outputs) == ("m", "r7", [])


def test_an_unbound_request_answers_what_it_is_given() -> None:
    """A request refused before submit bound a sender (the stream answers it directly)."""
    request = InferenceRequest(ClientRequest("m", 1, id="r7"))
    callback = _Kept(request)
    callback(None, True)
    (answer,) = callback.answers
    assert isinstance(answer.error, ServerError) and answer.error.kind is ErrorKind.INTERNAL
    refused = InferenceResponse("m", "", "r7", error=invalid_arg("refused"))
    callback(refused, True)
    assert callback.answers[1] is refused


def test_a_finished_request_is_freed_without_the_cycle_collector() -> None:
    """The request refers to its sender, the sender to the request and to its callback (which
    refers to the request): once the final response is sent, the sender lets go of both, so
    that no reference cycle is left for the garbage collector (whose collections cost a busy
    server tens of µs per request)."""
    request, sender, callback = _bound()
    sender.send(_response(1), False)
    sender.send(_response(2), True)
    referents = gc.get_referents(sender)
    assert not any(r is request or r is callback for r in referents)
    assert request.sender is sender  # still readable: a late response is dropped by it
    sender.send(_response(3), True)  # a second final (a backend bug): nothing goes out
    assert len(callback.answers) == 1


def test_a_finished_request_leaves_no_garbage() -> None:
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(10):
            _, sender, _ = _bound()
            sender.send(_response(1), True)
        del sender
        assert gc.collect() == 0
    finally:
        if enabled:
            gc.enable()
