"""The ensemble scheduler's walk of one request, without sockets: the composing models are
played by the test, which answers each step's request by hand, so the order of events and
the lifetime of each tensor can be observed exactly."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import numpy as np
from test_ensemble_plan import ensemble, ident, plan_of, step

from tritium.errors import ErrorKind, internal
from tritium.scheduling.ensemble import EnsembleScheduler
from tritium.metrics.stats import ModelStats
from tritium.request import InferenceRequest, ResponseSender
from tritium.types import ClientRequest, DataType, InferenceResponse, RequestedOutput, Tensor


class Collector:
    """The ensemble request's callback, behind a real ResponseSender: what it was sent."""

    def __init__(self) -> None:
        self.sent: list[tuple[InferenceResponse | None, bool]] = []

    def __call__(self, response: InferenceResponse | None, final: bool) -> None:
        self.sent.append((response, final))


class Models:
    """Stands in for the server's dispatch: keeps each step's request and callback."""

    def __init__(self) -> None:
        self.waiting: list[tuple[InferenceRequest, Any]] = []

    def request(self, client: ClientRequest, parent: InferenceRequest | None = None) -> Any:
        assert parent is not None  # a step's request carries its ensemble request's options
        return InferenceRequest(client, parent.options, parent.parameters, parent)

    def submit(self, request: InferenceRequest, sender: Any) -> None:
        self.waiting.append((request, sender.callback))

    def take(self, model: str) -> tuple[InferenceRequest, Any]:
        for i, (request, _callback) in enumerate(self.waiting):
            if request.model_name == model:
                return self.waiting.pop(i)
        raise AssertionError(f"no request for {model}: {[r.model_name for r, _ in self.waiting]}")

    def answer(self, model: str, fn: Any, final: bool = True) -> InferenceRequest:
        """Answer ``model``'s oldest request with OUTPUT0 = fn(INPUT0)."""
        request, callback = self.take(model)
        data = fn(request.inputs[0].data)
        out = Tensor("OUTPUT0", DataType.INT32, data.shape, data)
        callback(InferenceResponse(model, "1", request.id, [out]), final)
        return request


def _int32(name: str, values: list[int]) -> Tensor:
    data = np.array(values, dtype=np.int32)
    return Tensor(name, DataType.INT32, data.shape, data)


def _ensemble_request(client: ClientRequest) -> tuple[InferenceRequest, Collector]:
    request = InferenceRequest(client)
    collector = Collector()
    ResponseSender(collector).bind(request, lambda _request, _error, _last: None)
    request.queued(ModelStats("ens", "1"))
    return request, collector


def _start(plan: Any, inputs: list[Tensor], outputs: tuple[str, ...] = ()) -> Any:
    models = Models()
    scheduler = EnsembleScheduler(plan, models, "1")
    outs = tuple(RequestedOutput(name) for name in outputs)
    client = ClientRequest("ens", inputs=tuple(inputs), id="r1", outputs=outs)
    request, collector = _ensemble_request(client)
    scheduler.submit(request)
    return models, collector, request


def test_independent_steps_start_together_and_join() -> None:
    plan = plan_of(
        ensemble(
            ident("a", "X", "ax"),
            ident("b", "X", "bx"),
            step("pair", {"INPUT0": "ax", "INPUT1": "bx"}, {"OUTPUT0": "Y"}),
        )
    )
    models, collector, _ = _start(plan, [_int32("X", [1, 2])])
    assert sorted(r.model_name for r, _ in models.waiting) == ["a", "b"]  # both at once
    models.answer("a", lambda x: x + 10)
    assert [r.model_name for r, _ in models.waiting] == ["b"]  # the join waits for b
    models.answer("b", lambda x: x * 3)
    join, callback = models.take("pair")
    assert [t.name for t in join.inputs] == ["INPUT0", "INPUT1"]
    total = join.inputs[0].data + join.inputs[1].data
    callback(InferenceResponse("pair", "1", "r1", [_int32("OUTPUT0", total.tolist())]), True)
    [(response, final)] = collector.sent
    assert final and response is not None and response.error is None
    assert [t.name for t in response.outputs] == ["Y"]
    np.testing.assert_array_equal(response.outputs[0].data, (np.array([1, 2]) + 10) + [3, 6])


def _without_inputs(client: ClientRequest) -> ClientRequest:
    fields = (client.model_name, client.model_version, client.id, (), client.outputs)
    return ClientRequest(*fields, client.parameters, client.uses_shm)


def test_a_tensor_is_dropped_once_its_last_reader_has_started() -> None:
    plan = plan_of(ensemble(ident("a", "X", "t"), ident("b", "t", "Y")))
    source = np.arange(1000, dtype=np.int32)
    models, collector, request = _start(plan, [Tensor("X", DataType.INT32, source.shape, source)])
    request.inputs.clear()  # the caller lets go of what it sent (the client value too)
    request.client = _without_inputs(request.client)
    first, callback = models.take("a")
    intermediate = source * 2
    watch_input, watch_mid = weakref.ref(source), weakref.ref(intermediate)
    first.inputs.clear()
    first.client = _without_inputs(first.client)
    del source
    callback(
        InferenceResponse(
            "a", "1", "r1", [Tensor("OUTPUT0", DataType.INT32, (1000,), intermediate)]
        ),
        True,
    )
    del intermediate, first, callback
    gc.collect()
    # Step b runs now: nothing later reads X, so the ensemble holds it no longer.
    assert watch_input() is None
    second, callback = models.take("b")
    second.inputs.clear()
    second.client = _without_inputs(second.client)
    del second
    gc.collect()
    assert watch_mid() is None  # b was its last reader: only b's request held it
    callback(InferenceResponse("b", "1", "r1", [_int32("OUTPUT0", [7])]), True)
    assert collector.sent[-1][1] is True


def test_only_the_steps_for_the_requested_outputs_run() -> None:
    plan = plan_of(
        ensemble(
            ident("a", "X", "Y"),
            ident("b", "X", "Z"),
            outputs=[("Y", "TYPE_INT32", [-1]), ("Z", "TYPE_INT32", [-1])],
        )
    )
    models, collector, _ = _start(plan, [_int32("X", [5])], outputs=("Z",))
    assert [r.model_name for r, _ in models.waiting] == ["b"]
    request = models.answer("b", lambda x: x - 1)
    assert [o.name for o in request.outputs] == ["OUTPUT0"]
    [(response, _)] = collector.sent
    assert response is not None and [t.name for t in response.outputs] == ["Z"]


def test_a_failing_step_cancels_the_others_and_names_its_model() -> None:
    plan = plan_of(
        ensemble(
            ident("a", "X", "ax"),
            ident("b", "X", "bx"),
            step("pair", {"INPUT0": "ax", "INPUT1": "bx"}, {"OUTPUT0": "Y"}),
        )
    )
    models, collector, _ = _start(plan, [_int32("X", [1])])
    failing, callback = models.take("a")
    other, other_callback = models.take("b")
    callback(InferenceResponse("a", "1", "r1", error=internal("boom")), True)
    assert other.cancelled  # no longer needed
    assert collector.sent == []  # the answer waits for the step still out
    other_callback(InferenceResponse("b", "1", "r1", [_int32("OUTPUT0", [2])]), True)
    [(response, final)] = collector.sent
    assert final and response is not None and response.error is not None
    assert response.error.kind is ErrorKind.INTERNAL
    assert response.error.message == "in ensemble 'ens', boom"
    assert models.waiting == []  # the join never started


def test_each_response_of_a_decoupled_step_flows_on_alone() -> None:
    plan = plan_of(ensemble(ident("dec", "X", "t"), ident("a", "t", "Y")))
    assert plan.decoupled
    models, collector, _ = _start(plan, [_int32("X", [3])])
    request, callback = models.take("dec")
    for i in range(3):
        callback(InferenceResponse("dec", "1", "r1", [_int32("OUTPUT0", [i])]), False)
    for _ in range(3):
        models.answer("a", lambda x: x * 100)
    callback(None, True)
    values = [r.outputs[0].data.tolist() for r, final in collector.sent if r is not None]
    assert values == [[0], [100], [200]]
    assert [final for _, final in collector.sent] == [False, False, False, True]


def test_max_inflight_requests_holds_a_step_across_requests() -> None:
    config = ensemble(ident("a", "X", "t"), ident("b", "t", "Y"))
    config.ensemble_scheduling.max_inflight_requests = 1
    plan = plan_of(config)
    assert plan.max_inflight == 1
    models = Models()
    scheduler = EnsembleScheduler(plan, models, "1")
    collectors = []
    for i in range(3):
        client = ClientRequest("ens", inputs=(_int32("X", [i]),), id=f"r{i}")
        request, collector = _ensemble_request(client)
        collectors.append(collector)
        scheduler.submit(request)
    # Step a takes one request at a time, whoever sent it; the others wait their turn.
    assert [(r.model_name, r.id) for r, _ in models.waiting] == [("a", "r0")]
    models.answer("a", lambda x: x + 1)
    assert [(r.model_name, r.id) for r, _ in models.waiting] == [("b", "r0"), ("a", "r1")]
    models.answer("a", lambda x: x + 1)
    models.answer("a", lambda x: x + 1)
    for _ in range(3):
        models.answer("b", lambda x: x * 10)
    answers = [c.sent[-1][0].outputs[0].data.tolist() for c in collectors]
    assert answers == [[10], [20], [30]]
