"""Triton's ensemble scheduler: runs an ensemble request as a DAG of composing-model requests.

A step starts as soon as every tensor it reads exists, so independent steps run at once; each
step's request goes through the composing model's own scheduler (its batching, instances,
statistics and cache). A tensor is dropped as soon as no step still to start reads it. Each
response of a decoupled step starts a flow of its own (the plan guarantees a step never mixes
two flows), and a decoupled ensemble answers once per flow that yields every output.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import Protocol

import numpy as np

from ..backends.base import send_error
from ..errors import ErrorKind, ServerError, cancelled, invalid_arg
from ..config.ensemble import EnsemblePlan, Route, Step
from ..request import InferenceRequest, ResponseSender
from ..types import ClientRequest, InferenceResponse, RequestedOutput, RequestFlag, Tensor


class Dispatch(Protocol):
    """How a step's request reaches its composing model: the server's own two steps."""

    def request(
        self, client: ClientRequest, parent: InferenceRequest | None = None
    ) -> InferenceRequest:
        """Resolve and validate (raises ServerError when it cannot)."""

    def submit(self, request: InferenceRequest, sender: ResponseSender) -> None:
        """Schedule; the responses go to the sender."""


class EnsembleScheduler:
    def __init__(self, plan: EnsemblePlan, dispatch: Dispatch, version: str) -> None:
        self.plan = plan
        self.dispatch = dispatch
        self.version = version
        self._active = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._all_outputs = plan.outputs
        # ensemble_scheduling.max_inflight_requests: one gate per step, shared by every
        # ensemble request (None: no limit, and no cost).
        limit = plan.max_inflight
        self.gates = [_Gate(limit) for _ in plan.steps] if limit > 0 else None

    def submit(self, request: InferenceRequest) -> None:
        request.executing(time.perf_counter_ns())
        wanted = tuple(dict.fromkeys(o.name for o in request.outputs)) or self._all_outputs
        self._active += 1
        self._idle.clear()
        _Run(self, request, self.plan.route(wanted)).start()

    def done(self) -> None:
        self._active -= 1
        if not self._active:
            self._idle.set()

    async def close(self) -> None:
        """Unloading: let the ensemble requests in flight finish."""
        await self._idle.wait()


class _Gate:
    """At most ``limit`` requests of one step in flight across all ensemble requests; the
    others wait, in order, for one to finish (Triton's max_inflight_requests)."""

    __slots__ = ("limit", "busy", "waiting")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.busy = 0
        self.waiting: deque[tuple[_Run, Step, _Flow]] = deque()


class _Flow:
    """The tensors of one flow, and the reads each still has before it can be dropped."""

    __slots__ = ("values", "refs", "started")

    def __init__(self, route: Route, values: dict[str, Tensor | None]) -> None:
        self.values = values
        self.refs = dict(route.refs)
        self.started: set[int] = set()

    def read(self, tensor: str) -> Tensor | None:
        value = self.values[tensor]
        left = self.refs[tensor] - 1
        self.refs[tensor] = left
        if not left:
            del self.values[tensor]  # nothing later reads it: let it go
        return value


class _Run:
    """One ensemble request in flight."""

    __slots__ = (
        "owner",
        "request",
        "route",
        "inflight",
        "live",
        "error",
        "timing",
        "root",
    )

    def __init__(self, owner: EnsembleScheduler, request: InferenceRequest, route: Route) -> None:
        self.owner = owner
        self.request = request
        self.route = route
        self.inflight = 0
        self.live: set[InferenceRequest] = set()
        self.error: ServerError | None = None
        self.timing = [0, 0, 0]  # the steps' compute input/infer/output, summed
        self.root: _Flow | None = None

    def start(self) -> None:
        request = self.request
        values: dict[str, Tensor | None] = dict.fromkeys(self.owner.plan.inputs)
        for tensor in request.inputs:
            values[tensor.name] = tensor
        self.root = flow = _Flow(self.route, values)
        request.on_cancel = self.cancel
        # A step can be answered before dispatch returns (a cache hit, a cheap ONNX model run
        # inline): hold the run open until every first step is launched.
        self.inflight += 1
        for index in self.route.start:
            if self.error is None:
                self.launch(self.route.steps[index], flow)
        self.inflight -= 1
        if not self.inflight:
            self.finish()

    # -- steps -------------------------------------------------------------------------------
    def launch(self, step: Step, flow: _Flow) -> None:
        flow.started.add(step.index)
        gates = self.owner.gates
        if gates is not None:
            gate = gates[step.index]
            if gate.busy >= gate.limit:
                self.inflight += 1  # the run stays open while the step waits at its gate
                gate.waiting.append((self, step, flow))
                return
            gate.busy += 1
        self.send(step, flow)

    def send(self, step: Step, flow: _Flow) -> None:
        inputs = []
        for (key, tensor), rank in zip(step.inputs, step.ranks, strict=True):
            value = flow.read(tensor)
            if value is not None:  # None: an optional ensemble input the client left out
                data = value.data if len(value.shape) == rank else _fit(value.data, rank)
                inputs.append(Tensor(key, value.datatype, data.shape, data))
        parent = self.request
        client = ClientRequest(
            step.model_name,
            step.model_version,
            parent.id,
            tuple(inputs),
            tuple(RequestedOutput(name) for name in self.route.requested[step.index]),
        )
        dispatch = self.owner.dispatch
        try:  # the step's request carries the ensemble request's options and parameters
            sub = dispatch.request(client, parent)
        except ServerError as exc:
            self.fail(step, exc)
            self.release(step)
            return
        self.inflight += 1
        self.live.add(sub)

        def on_response(response: InferenceResponse | None, final: bool) -> None:
            self.on_response(step, flow, sub, response, final)

        try:
            dispatch.submit(sub, ResponseSender(on_response))
        except ServerError as exc:
            self.inflight -= 1
            self.live.discard(sub)
            self.fail(step, exc)
            self.release(step)

    def release(self, step: Step) -> None:
        """A request of ``step`` is over: let the next one waiting at its gate go."""
        gates = self.owner.gates
        if gates is None:
            return
        gate = gates[step.index]
        gate.busy -= 1
        while gate.waiting and gate.busy < gate.limit:
            run, waiting, flow = gate.waiting.popleft()
            run.inflight -= 1
            if run.error is not None:  # failed or cancelled while it waited
                if not run.inflight:
                    run.finish()
                continue
            gate.busy += 1
            run.send(waiting, flow)

    def on_response(
        self,
        step: Step,
        flow: _Flow,
        sub: InferenceRequest,
        response: InferenceResponse | None,
        final: bool,
    ) -> None:
        if response is not None:
            if response.error is not None:
                self.fail(step, response.error)
            elif self.error is None and (response.outputs or not step.decoupled):
                self.collect(step, flow, response)
        if final:
            self.inflight -= 1
            self.live.discard(sub)
            self.release(step)
            if sub.timing is not None:
                for i, ns in enumerate(sub.timing):
                    self.timing[i] += ns
            if not self.inflight:
                self.finish()

    def collect(self, step: Step, flow: _Flow, response: InferenceResponse) -> None:
        """File a step's outputs under their ensemble names (a decoupled step's response
        starts a new flow), then start what they complete."""
        if step.decoupled:
            flow = _Flow(self.route, {})
        names = dict(step.outputs)
        added = []
        for tensor in response.outputs:
            target = names.get(tensor.name)
            if target is not None and target in flow.refs:
                flow.values[target] = Tensor(target, tensor.datatype, tensor.shape, tensor.data)
                added.append(target)
        # Triton: an output the step did not produce is an empty placeholder, so a later step
        # that takes it as an optional input still runs (without it), and the ensemble's
        # answer leaves it out.
        for _, target in step.outputs:
            if target in flow.refs and target not in flow.values:
                flow.values[target] = None
                added.append(target)
        consumers = self.route.consumers
        steps = self.route.steps
        for name in added:
            for index in consumers.get(name, ()):
                if index not in flow.started and self.error is None:
                    if all(t in flow.values for _, t in steps[index].inputs):
                        self.launch(steps[index], flow)
        if self.owner.plan.decoupled and any(t in self.route.wanted for t in added):
            self.answer_flow(flow)

    def fail(self, step: Step, error: Exception) -> None:
        if self.error is not None:
            return
        kind = error.kind if isinstance(error, ServerError) else ErrorKind.INTERNAL
        message = error.message if isinstance(error, ServerError) else str(error)
        # Triton (EnsembleContext::FinishEnsemble): "in ensemble 'E', " + the step's own
        # error, without the step's model name (qa/L0_sequence_batcher checks the prefix).
        self.error = ServerError(kind, f"in ensemble '{self.owner.plan.name}', {message}")
        for sub in list(self.live):  # what still runs or waits is no longer needed
            sub.cancel()

    def cancel(self) -> None:
        """The client went away: start nothing more, and cancel what runs or waits."""
        if self.error is None:
            self.error = cancelled("the request was cancelled")
        for sub in list(self.live):
            sub.cancel()

    # -- answers -----------------------------------------------------------------------------
    def response(self, flow: _Flow) -> InferenceResponse | None:
        values = flow.values
        if not all(t in values for t in self.route.wanted):
            return None
        ranks = self.owner.plan.output_ranks
        outputs = []
        for name in self.route.wanted:
            tensor = values.pop(name)
            if tensor is not None and len(tensor.shape) != ranks[name]:
                data = _fit(tensor.data, ranks[name])
                tensor = Tensor(name, tensor.datatype, data.shape, data)
            outputs.append(tensor)
        request = self.request
        tensors = [t for t in outputs if t is not None]
        return InferenceResponse(
            request.model_name,
            self.owner.version,
            request.id,
            tensors,
            _sequence_parameters(request) if tensors else {},
        )

    def answer_flow(self, flow: _Flow) -> None:
        response = self.response(flow)
        if response is not None:
            assert self.request.sender is not None
            self.request.sender.send(response, False)

    def finish(self) -> None:
        request = self.request
        owner = self.owner
        request.on_cancel = None
        owner.done()
        if self.error is not None:
            send_error(request, owner.version, self.error)
            return
        compute_input, compute_infer, compute_output = self.timing
        timing = (compute_input, compute_infer, compute_output)
        request.timing = timing
        assert request.stats is not None  # set when it was queued
        request.stats.executed(request.batch_size, timing)
        assert request.sender is not None
        if owner.plan.decoupled:
            request.sender.send(None, True)
            return
        assert self.root is not None
        response = self.response(self.root)
        if response is None:
            send_error(request, owner.version, _deadlock(owner.plan.name))
        else:
            request.sender.send(response, True)


def _sequence_parameters(request: InferenceRequest) -> dict[str, int | str | bool]:
    """Triton's ensemble answers carry the sequence id and flags its output tensors were made
    under (the request's: 0 and false outside a sequence); Triton repeats them once per
    output, tritium gives them once."""
    flags = request.flags
    return {
        "sequence_id": request.correlation_id,
        "sequence_start": bool(flags & RequestFlag.SEQUENCE_START),
        "sequence_end": bool(flags & RequestFlag.SEQUENCE_END),
    }


def _fit(data: np.ndarray, rank: int) -> np.ndarray:
    """Triton's ReshapeTensorDims between a model that batches and one that does not: add a
    leading batch of 1, or drop one; any other difference is left to the model's checks."""
    shape = data.shape
    if len(shape) + 1 == rank:
        return data.reshape((1, *shape))
    if len(shape) == rank + 1 and shape[0] == 1:
        return data.reshape(shape[1:])
    return data


def _deadlock(name: str) -> ServerError:
    return invalid_arg(
        f"in ensemble '{name}', unexpected deadlock, at least one output is not set while no "
        "more ensemble steps can be made"
    )
