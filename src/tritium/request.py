"""One inference inside the server: its state, its timestamps and its responses.

A front-end decodes a ``types.ClientRequest`` (immutable: what the client sent). The server
turns it into an ``InferenceRequest``, the server's state for that one inference, which moves
through explicit states::

    RECEIVED ──queued()──▶ QUEUED ──executing()──▶ EXECUTING ──responding()──▶ RESPONDING
        │                    │                        │                          │
        └────────────────────┴──── finish(): DONE, CANCELLED or FAILED ◀─────────┘

Each transition is a method here, and these methods are the one place where a request's own
statistics (queue and request durations, pending count, success or failure) and, for a
traced request (``TracedRequest``), its trace timestamps are recorded. What is per execution
rather than per request (``ModelStats.executed``:
execution count, batch sizes, compute times) is recorded by the scheduler that ran it.
Every inference answers through one ``ResponseSender``: 0..N responses, then the final flag
(Triton's response sender). A call answered once (a unary call, a non-decoupled request on a
gRPC stream) gives it a ``FinalAnswer``: the last response, on the final flag.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Protocol

from mypy_extensions import mypyc_attr

from .datatypes import DataType
from .errors import ErrorKind, ServerError, internal
from .metrics.stats import ModelStats
from .types import ClientRequest, InferenceResponse, RequestedOutput, RequestOptions, Tensor
from .validation import Validator

if TYPE_CHECKING:
    from .tracing import Trace

ResponseCallback = Callable[[InferenceResponse | None, bool], None]


class Classify(Protocol):
    """The classification extension's view of a response (extensions/classification.py's
    ``Classifier``): applied by the sender to what the client receives."""

    def apply(self, response: InferenceResponse) -> None: ...


class HeldRegion(Protocol):
    """A shared-memory region a request holds while it uses it (extensions/shm.py's
    ``ShmRegion``): released when the request is done."""

    @property
    def name(self) -> str: ...

    def release(self) -> None: ...


@dataclass(frozen=True, slots=True, eq=False)
class ServedModel:
    """What a request reads of the model version that serves it (``InferenceRequest.model``),
    made once when the version loads (``repository/model.py``): its names, statistics, the
    checks of its config, its scheduler's entry, and the few config values read per request.
    Nothing here points up to the repository."""

    name: str
    version: int
    version_str: str
    stats: ModelStats
    checks: Validator  # the config's per-input tables (validation.py)
    submit: Callable[[InferenceRequest], None]  # its scheduler's entry
    namespace: str = ""  # its repository's path under --model-namespacing
    generation: bytes = b""  # what its response cache keys begin with (generation.py)
    decoupled: bool = False
    sequence: bool = False  # served by the sequence batcher
    ensemble: bool = False
    response_cache: bool = False  # the config's response_cache.enable
    max_batch_size: int = 0
    # output name -> (datatype, dims without the batch dimension), from the config
    outputs: Mapping[str, tuple[DataType, tuple[int, ...]]] = field(default_factory=dict)

    def validate(self, request: InferenceRequest) -> int:
        """Check ``request`` against the config (``reshape`` applied); its batch size."""
        return self.checks.validate(request.inputs, request.outputs)


class RequestState(enum.Enum):
    RECEIVED = "received"  # resolved and validated, not yet scheduled
    QUEUED = "queued"  # handed to the model's scheduler, waiting for an instance
    EXECUTING = "executing"  # an instance runs it
    RESPONDING = "responding"  # a decoupled model sent a response, more may follow
    DONE = "done"
    CANCELLED = "cancelled"
    FAILED = "failed"


_ENDED: Final = (RequestState.DONE, RequestState.CANCELLED, RequestState.FAILED)


# ``InferenceRequest.timing`` of a request a backend answered without running it (the
# Python stub skips an execution whose requests were all cancelled while it waited): not an
# execution in the statistics.
NOT_EXECUTED: Final = (-1, -1, -1)


class InferenceRequest:
    """The server's state for one inference (Triton core's InferenceRequest).

    The client's values come from ``client`` and never change; what the server works out
    lives here: the version that serves it, the inputs as validated (reshaped, mapped from
    shared memory), the parsed options, the sender, the state and its timestamps."""

    __slots__ = (
        "client",
        "model",
        "model_name",
        "model_version",
        "inputs",
        "parameters",
        "options",
        "parent",
        "decoupled",
        "sender",
        "state",
        "arrival_ns",
        "start_ns",
        "batch_size",
        "timing",
        "stats",
        "cache_key",
        "cached",
        "shm_held",
        "on_cancel",
        "reschedule",
        "cancelled",
        "extra_outputs",
        "classify",
    )
    # Its trace when it is traced (then it is a TracedRequest, whose slot this is): what its
    # children's traces (ensemble steps, BLS calls) hang from. A class default, so an
    # untraced request spends nothing on it.
    trace: Trace | None = None

    def __init__(
        self,
        client: ClientRequest,
        options: RequestOptions | None = None,
        parameters: dict[str, Any] | None = None,
        parent: InferenceRequest | None = None,
    ) -> None:
        self.client = client
        self.model: ServedModel | None = None  # the version that serves it, once resolved
        self.model_name = client.model_name
        self.model_version = client.model_version  # the serving version once resolved
        self.inputs: list[Tensor] = list(client.inputs)
        self.parameters: dict[str, Any] = {} if parameters is None else parameters
        self.options = options if options is not None else RequestOptions()
        self.parent = parent  # an ensemble step's request: the ensemble request it serves
        self.decoupled = False
        self.sender: ResponseSender | None = None
        self.state = RequestState.RECEIVED
        self.arrival_ns = time.perf_counter_ns()
        self.start_ns = 0
        self.batch_size = 1  # elements in the batch dimension (1 without batching)
        # The backend's (compute_input, compute_infer, compute_output) ns of its execution.
        self.timing: tuple[int, int, int] | None = None
        self.stats: ModelStats | None = None
        self.cache_key: bytes | None = None  # set on a cache miss: the response is stored
        self.cached = False  # answered from the response cache
        self.shm_held: list[HeldRegion] | None = None  # regions in use until it is done
        # Set by a backend while the request runs: tells the model (pb_utils is_cancelled()).
        self.on_cancel: Callable[[], None] | None = None
        # Set by a scheduler that takes a request back to run it again (the sequence batcher
        # with iterative_sequence): a backend whose model released the request with
        # TRITONSERVER_REQUEST_RELEASE_RESCHEDULE calls it; None: the model may not.
        self.reschedule: Callable[[InferenceRequest], None] | None = None
        self.cancelled = False  # the client went away
        # Outputs the server needs from the model beyond what the client asked for (the
        # implicit state outputs of a sequence model); backends add them to the requested.
        self.extra_outputs: tuple[str, ...] = ()
        # The classification extension: set when the client asked for classes of an output;
        # applied by the sender to what the client receives (not to the cache or a capture).
        self.classify: Classify | None = None

    # -- the client's values -----------------------------------------------------------------
    @property
    def id(self) -> str:
        return self.client.id

    @property
    def outputs(self) -> tuple[RequestedOutput, ...]:
        return self.client.outputs

    @property
    def uses_shm(self) -> bool:
        return self.client.uses_shm

    @property
    def priority(self) -> int:
        return self.options.priority

    @property
    def timeout_us(self) -> int:
        return self.options.timeout_us

    @property
    def correlation_id(self) -> int | str:
        return self.options.correlation_id

    @property
    def flags(self) -> int:
        return self.options.flags

    # -- transitions ---------------------------------------------------------------------------
    def queued(self, stats: ModelStats) -> None:
        """Handed to the model's scheduler (or its response cache)."""
        self.state = RequestState.QUEUED
        self.stats = stats
        stats.pending += 1

    def executing(self, now_ns: int) -> None:
        """An instance starts on it: its queue time ends."""
        if self.state is RequestState.QUEUED:
            self.state = RequestState.EXECUTING
            self.start_ns = now_ns
            if self.stats is not None:
                self.stats.pending -= 1

    def responding(self) -> None:
        """A response that is not the last one went out (decoupled models)."""
        if self.state is RequestState.EXECUTING:
            self.state = RequestState.RESPONDING

    def finish(self, error: Exception | None) -> None:
        """The final response went out: the request is over, and its statistics recorded."""
        if self.state in _ENDED:
            return
        stats = self.stats
        if stats is not None and self.state is RequestState.QUEUED:
            stats.pending -= 1  # never reached an instance (rejected, cancelled, cached)
        if error is None:
            self.state = RequestState.DONE
        elif isinstance(error, ServerError) and error.kind is ErrorKind.CANCELLED:
            self.state = RequestState.CANCELLED
        else:
            self.state = RequestState.FAILED
        if stats is not None:
            _record(stats, self, error)

    def cancel(self) -> None:
        """The client is gone: drop the request if it still waits, tell the model if it runs."""
        if not self.cancelled:
            self.cancelled = True
            if self.on_cancel is not None:
                self.on_cancel()

    def fail(self, version: str, error: Exception) -> None:
        """Answer the request with ``error`` as its final response."""
        assert self.sender is not None
        response = InferenceResponse(self.model_name, version, self.id, error=error)
        self.sender.send(response, True)


class TracedRequest(InferenceRequest):
    """A request whose transitions also stamp its trace (Triton core's REQUEST_START,
    QUEUE_START, COMPUTE_START, COMPUTE_INPUT_END, COMPUTE_OUTPUT_START, COMPUTE_END,
    REQUEST_END; at level TENSORS its QUEUE_INPUT and BACKEND_OUTPUT tensors). Only a traced
    request is of this class, so an untraced one pays nothing for tracing. The compute stamps
    come from the backend's ``timing`` measured from the start of the execution; an ensemble
    request has none (its steps compute, each in its own child trace)."""

    __slots__ = ("trace",)

    def traced(self, trace: Trace, version: int) -> None:
        """Named and stamped once its model version is resolved (by InferenceServer)."""
        self.trace = trace
        trace.model_name = self.model_name
        trace.model_version = version
        trace.request_id = self.client.id
        trace.stamp("REQUEST_START", self.arrival_ns)

    def queued(self, stats: ModelStats) -> None:
        super().queued(stats)
        trace = self.trace
        assert trace is not None
        trace.group.hold()  # let go in finish()
        trace.stamp("QUEUE_START", time.perf_counter_ns())
        if trace.group.tensors:
            for tensor in self.inputs:
                trace.tensor("QUEUE_INPUT", tensor)

    def finish(self, error: Exception | None) -> None:
        if self.state in _ENDED or self.state is RequestState.RECEIVED:
            super().finish(error)
            return
        super().finish(error)
        trace = self.trace
        assert trace is not None
        end = time.perf_counter_ns()
        start, timing, model = self.start_ns, self.timing, self.model
        if start and timing is not None and model is not None and not model.ensemble:
            compute_input = start + timing[0]
            compute_output = min(compute_input + timing[1], end)
            trace.stamp("COMPUTE_START", start)
            trace.stamp("COMPUTE_INPUT_END", min(compute_input, end))
            trace.stamp("COMPUTE_OUTPUT_START", compute_output)
            trace.stamp("COMPUTE_END", min(compute_output + timing[2], end))
        last = self.sender.last if self.sender is not None else None
        if error is None and last is not None and trace.group.tensors:
            for tensor in last.outputs:
                trace.tensor("BACKEND_OUTPUT", tensor)
        trace.stamp("REQUEST_END", end)
        trace.group.release()


FinishHook = Callable[[InferenceRequest, Exception | None, InferenceResponse | None], None]


class ResponseSender:
    """Where a request's responses go: every inference is a stream of 0..N responses ending
    with the final flag. The one sender type: unary calls, streams, generate and ensemble
    steps differ only in the ``callback`` they give it."""

    __slots__ = ("callback", "request", "on_final", "finished", "error", "last", "capture")

    def __init__(self, callback: ResponseCallback) -> None:
        self.callback = callback
        self.request: InferenceRequest | None = None
        self.on_final: FinishHook | None = None
        self.finished = False
        self.error: Exception | None = None
        self.last: InferenceResponse | None = None
        # Sees each successful response first (the sequence batcher takes the implicit state
        # outputs out of it here).
        self.capture: Callable[[InferenceResponse], None] | None = None

    def bind(self, request: InferenceRequest, on_final: FinishHook) -> None:
        self.request = request
        self.on_final = on_final
        request.sender = self

    def send(self, response: InferenceResponse | None, final: bool) -> None:
        if self.finished:
            return  # nothing goes out after the final flag (a second one is a backend bug)
        request = self.request
        assert request is not None and self.on_final is not None
        if response is not None:
            if self.last is None:
                _first_response(request)
            self.last = response
            if self.capture is not None and response.error is None:
                self.capture(response)
            if response.error is not None:
                self.error = response.error
            elif not final:
                request.responding()
        if final:
            self.finished = True
            if self.last is None and not request.decoupled:
                self.error = internal("the model sent no response")
            self.on_final(request, self.error, self.last)  # even if the caller has gone away
        if request.classify is not None and response is not None and response.error is None:
            _classify(request.classify, response)
        self.callback(response, final)
        if final:
            # The request and its sender refer to each other, and the callback (a front-end's
            # answer) to the request: let go of all three here, so the request and what it
            # holds are freed as soon as the last of them is (by reference counting, not by
            # the cyclic garbage collector: it found ~19 objects per HTTP inference, and its
            # collections took ~10% of the server's CPU). Nothing is sent after the final.
            self.last = None
            self.request = None
            self.callback = _after_final


def _after_final(response: InferenceResponse | None, final: bool) -> None:
    """A sender's callback once its final response went out: none comes (``send``)."""


# Subclassed by front-ends that may run uncompiled (frontends/grpc/service.py; see setup.py).
@mypyc_attr(allow_interpreted_subclasses=True)
class FinalAnswer:
    """The sender's callback of a call answered once, on the final flag: a unary call
    (``InferenceServer.infer``, gRPC ModelInfer's fast path) or a non-decoupled request on a
    gRPC stream. The answer is the final response, else the last one sent
    (``ResponseSender.last``: a model may send its answer, then a flag-only final), else an
    error: the sender's (a non-decoupled model that sent nothing is INTERNAL). A subclass
    says what to do with it (``answer``); responses before the final are only kept."""

    __slots__ = ("request",)

    def __init__(self, request: InferenceRequest) -> None:
        self.request = request

    def __call__(self, response: InferenceResponse | None, final: bool) -> None:
        if final:
            self.answer(response if response is not None else _last(self.request))

    def answer(self, response: InferenceResponse) -> None:
        raise NotImplementedError


def _last(request: InferenceRequest) -> InferenceResponse:
    sender = request.sender
    if sender is not None and sender.last is not None:
        return sender.last
    error = sender.error if sender is not None else None
    return InferenceResponse(
        request.model_name, "", request.id, error=error or internal("the model sent no response")
    )


def _first_response(request: InferenceRequest) -> None:
    """nv_inference_first_response_histogram_ms (``histogram_latencies=true``): the time from
    arrival to the request's first response, in whole ms as Triton's InferenceResponse::Send
    observes it (errors included)."""
    stats = request.stats
    if stats is not None and stats.first_response is not None:
        stats.first_response.observe((time.perf_counter_ns() - request.arrival_ns) // 1_000_000)


def _classify(classifier: Classify, response: InferenceResponse) -> None:
    """The client's view of a response (Triton's front-ends classify when they serialize):
    an output that cannot be classified turns the response into its error."""
    try:
        classifier.apply(response)
    except ServerError as exc:
        response.error = exc


def _record(stats: ModelStats, request: InferenceRequest, error: Exception | None) -> None:
    """The request's statistics once it is over (Triton's InferenceStatsAggregator)."""
    end = time.perf_counter_ns()
    total = end - request.arrival_ns
    if error is not None:
        stats.failed(total, _failure_reason(error))
        return
    cached = request.cached
    stats.succeeded(total, end, cached)
    if not cached:
        start = request.start_ns
        queue = start - request.arrival_ns if start else -1
        stats.inferred(request.batch_size, queue, request.timing, end)


def _failure_reason(error: Exception | None) -> str:
    """Triton's ``reason`` label of nv_inference_request_failure."""
    if isinstance(error, ServerError):
        if error.kind is ErrorKind.CANCELLED:
            return "CANCELED"
        if error.kind is ErrorKind.UNAVAILABLE:
            return "REJECTED"
    return "BACKEND"
