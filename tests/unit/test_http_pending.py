"""``messages.py:PendingResponse``: the answer of an HTTP inference given by the server's
response callback instead of a task (``app.py:HttpApp._infer_now``)."""

from __future__ import annotations

from tritium.errors import invalid_arg
from tritium.frontends.http.messages import HttpResponse, PendingResponse


def test_an_answer_given_before_the_cycle_attaches_is_delivered_on_attach() -> None:
    pending = PendingResponse()
    answer = HttpResponse(200, [b"{}"])
    pending.resolve(answer)  # e.g. answered from the response cache inside submit
    got: list[object] = []
    pending.attach(got.append)
    assert got == [answer]


def test_an_answer_given_after_attach_is_delivered_once() -> None:
    pending = PendingResponse()
    got: list[object] = []
    pending.attach(got.append)
    assert got == []
    error = invalid_arg("bad input")
    pending.resolve(error)
    pending.resolve(HttpResponse(200, [b"{}"]))  # nothing after the first
    assert got == [error]


def test_cancel_forgets_the_writer_and_cancels_the_request() -> None:
    pending = PendingResponse()
    cancelled: list[bool] = []
    pending.on_cancel = lambda: cancelled.append(True)
    got: list[object] = []
    pending.attach(got.append)
    pending.cancel()
    pending.cancel()  # the request is cancelled once
    pending.resolve(HttpResponse(200, [b"{}"]))  # the client is gone: nobody writes it
    assert cancelled == [True]
    assert got == []


def test_an_answered_request_is_not_cancelled() -> None:
    pending = PendingResponse()
    cancelled: list[bool] = []
    pending.on_cancel = lambda: cancelled.append(True)
    pending.attach(lambda result: None)
    pending.resolve(HttpResponse(200, [b"{}"]))
    pending.cancel()
    assert cancelled == []
