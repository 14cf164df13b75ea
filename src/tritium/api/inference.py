"""The one inference call: every door (HTTP infer and generate, gRPC unary and stream
messages, BLS calls from Python models, ensemble steps, a forwarded request from another
worker, an in-process caller) goes through ``Inference``.

``Inference`` owns, once, what surrounds an inference: the model lookup, shared memory, the
response cache, cross-worker forwarding, statistics and the in-flight count, the decoupled
refusal, cancellation, and (through ``InferenceCall``, call.py) tracing and the access log. Its
public face is typed Python:

- ``await inference.infer(client)`` -> one ``InferenceResponse``; errors raise
  ``ServerError`` (``.kind``: Triton's status kind);
- ``inference.stream(client)`` -> an async iterator of responses (0..N for a decoupled model);
  leaving it early cancels the request;
- ``inference.start(client, callback, call)`` -> the request, its responses delivered to
  ``callback`` on the loop without a task (the front-ends' fast path);
- ``inference.request`` + ``inference.submit``: the two steps under them (Triton's
  InferenceRequestNew and InferAsync), for ensembles, BLS and forwarded requests.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Final

from ..errors import ServerError, unavailable, unsupported
from ..extensions.cache import ResponseCache, cache_key
from ..extensions.classification import classifier_for
from ..extensions.parameters import parse_parameters
from ..extensions.raw_input import raw_tensor
from ..extensions.redis_cache import RedisResponseCache
from ..extensions.shm import SharedMemoryManager
from ..logs.access_log import AccessEntry, AccessLog
from ..loop_spin import ACTIVE
from ..repository.model import Model
from ..repository.manager import ModelRepositoryManager
from ..repository.names import check_model_name
from ..request import (
    FinalAnswer,
    InferenceRequest,
    ResponseCallback,
    ResponseSender,
    ServedModel,
    TracedRequest,
)
from ..tracing import Trace, TraceManager
from ..types import ClientRequest, InferenceResponse
from .caching import answer_remote, from_cache
from .call import Door, InferenceCall
from .cluster import Cluster
from .stream import ResponseStream

log = logging.getLogger("tritium")

# The door of an in-process caller: no transport stamps, decoupled models through stream().
IN_PROCESS: Final = Door(
    "in-process",
    "infer() doesn't support models with decoupled transaction policy: use stream()",
    ("", ""),
    ("", ""),
)
_NOT_ACCEPTING: Final = "Server is not ready to accept inference requests"


class Inference:
    """The server's data plane: the one way an inference enters it (see the module's doc)."""

    def __init__(
        self,
        repository: ModelRepositoryManager,
        shm: SharedMemoryManager,
        tracer: TraceManager,
        access_log: AccessLog | None,
        caches: tuple[ResponseCache | None, RedisResponseCache | None],
    ) -> None:
        self._repository = repository
        self.shm = shm
        self.tracer = tracer  # its ``active`` decides the fast path (``inline``)
        self.access_log = access_log  # --access-log-file (None: off)
        self._cache, self._remote = caches
        self._lookups: set[asyncio.Task[None]] = set()  # Redis lookups in flight
        self.accepting = False  # set by the server: new requests are taken
        self.cluster: Cluster | None = None  # --workers N: set by the worker's member
        self.inflight = 0  # inferences submitted and not finished (also in loop_spin.ACTIVE)
        # the same per model version, for Triton's shutdown lines
        self.inflight_by: dict[tuple[str, str], int] = {}

    # -- the public API ------------------------------------------------------------------------
    def call(
        self,
        door: Door,
        peer: str,
        bytes_in: int,
        identity: tuple[str | None, str | None] = (None, None),
        stream: bool = False,
    ) -> InferenceCall:
        """A new inference's trace and access-log line (``identity``: the bearer token's
        name and the restricted-API key that admitted it, never their values)."""
        log_ = self.access_log
        entry = None
        if log_ is not None:
            entry = AccessEntry.begin(
                door.protocol, peer, bytes_in, identity[0], identity[1], stream
            )
        return InferenceCall(door, self.tracer, log_, entry)

    def inline(self) -> bool:
        """Whether a front-end may start a request without a task (the fast path: decoded on
        the loop when small, answered from the response callback): nothing can be traced or
        access-logged, so nothing surrounds the inference but its answer."""
        return not self.tracer.active and self.access_log is None

    async def infer(
        self, client: ClientRequest, call: InferenceCall | None = None
    ) -> InferenceResponse:
        """One inference, its single response awaited. Errors raise ``ServerError`` (a
        decoupled model is refused with the call's door's message: use ``stream``);
        cancelling the awaiting task cancels the request."""
        request = self.prepare(client, call if call is not None else IN_PROCESS)
        future: asyncio.Future[InferenceResponse] = asyncio.get_running_loop().create_future()
        self.submit(request, ResponseSender(_Resolve(request, future)))
        try:
            response = await future
        except asyncio.CancelledError:
            request.cancel()  # the caller went away
            raise
        if response.error is not None:
            raise response.error
        return response

    def stream(self, client: ClientRequest, call: InferenceCall | None = None) -> ResponseStream:
        """One inference whose responses (0..N for a decoupled model) are iterated as they
        come; errors before scheduling raise here."""
        stream = ResponseStream()
        stream.request = self.start(client, stream, call)
        return stream

    def start(
        self, client: ClientRequest, callback: ResponseCallback, call: InferenceCall | None = None
    ) -> InferenceRequest:
        """One inference whose responses go to ``callback(response_or_None, final)`` on the
        loop, the last one flagged final; errors before scheduling raise (a decoupled model
        is refused when the call's door refuses them)."""
        request = self.prepare(client, call)
        self.submit(request, ResponseSender(callback))
        return request

    def prepare(
        self, client: ClientRequest, call: InferenceCall | Door | None = None
    ) -> InferenceRequest:
        """The request of a call, before ``submit``: its model looked up, its trace and
        access line attached, a decoupled model refused when the call's door refuses them.
        For a front-end whose callback needs the request (``FinalAnswer``)."""
        if isinstance(call, InferenceCall):
            request = self.request(client, None, call.trace, call.entry)
            door: Door | None = call.door
        else:
            request = self.request(client)
            door = call
        if request.decoupled and door is not None and door.decoupled_error is not None:
            raise unsupported(door.decoupled_error)
        return request

    def raw_request(self, name: str, version: int, body: bytes | bytearray) -> ClientRequest:
        """A raw binary request (the binary extension's ``Inference-Header-Content-Length:
        0``): the body is the model's one input; name, datatype and shape from its config."""
        spec = self.model(name, version).spec
        inputs = [(s.name, s.datatype, s.dims) for s in spec.inputs.values()]
        tensor = raw_tensor(name, inputs, spec.max_batch_size > 0, body)
        return ClientRequest(name, version, inputs=(tensor,))

    # -- the two steps -------------------------------------------------------------------------
    def model(self, name: str, version: int, near: str | None = None) -> Model:
        """The ready model version a request names (``near``: an ensemble step's namespace,
        looked in first). A name that can never be loaded (not one safe path component: see
        repository/names.py) is INVALID_ARG rather than NOT_FOUND; checked only on a miss, so
        served names cost nothing."""
        try:
            return self._repository.get(name, version, near)
        except ServerError:
            check_model_name(name)
            raise

    def request(
        self,
        client: ClientRequest,
        parent: InferenceRequest | None = None,
        trace: Trace | None = None,
        access: AccessEntry | None = None,
    ) -> InferenceRequest:
        """The server's state for one inference (Triton's InferenceRequestNew): its model
        version resolved (the one lookup of the request) and its parameters parsed. An
        ensemble step's or BLS call's request (``parent``) carries its parent's options and
        parameters, and a child of its trace. ``trace``: the front-end sampled this request
        for tracing. ``access``: its access-log line, which reads the request's times when it
        ends. Errors raise; once shutdown began, a new request is UNAVAILABLE before its model is
        looked up (the models may already be unloaded while the listeners still answer, and a
        balancer retries a 503 elsewhere, not a 404)."""
        if not self.accepting and parent is None:
            raise unavailable(_NOT_ACCEPTING)
        near = parent.model.namespace if parent is not None and parent.model else None
        model = self.model(client.model_name, client.model_version, near)
        if parent is None:
            options, parameters = parse_parameters(client.parameters)
        else:
            options, parameters = parent.options, parent.parameters
            if parent.trace is not None:
                trace = parent.trace.child()
        if trace is None:
            request = InferenceRequest(client, options, parameters, parent)
        else:
            request = TracedRequest(client, options, parameters, parent)
            request.traced(trace, model.version)
        if access is not None:
            access.request = request
        request.model = model.served
        request.model_version = model.version  # the version that serves it, from now on
        request.decoupled = model.spec.decoupled
        request.stats = model.stats
        if client.outputs:
            spec = model.spec
            request.classify = classifier_for(client.outputs, spec.labels, spec.max_batch_size > 0)
        return request

    def submit(self, request: InferenceRequest, sender: ResponseSender) -> None:
        """The one way in (Triton's InferAsync): map shared memory, validate against the
        model's config, then hand the request to the model's scheduler (or answer it from the
        response cache, or forward it to the worker that owns its sequence or cache entry).
        Every response, errors included, goes to ``sender``; an error before scheduling raises
        instead."""
        if not self.accepting and request.parent is None:  # an ensemble's steps go on
            raise unavailable(_NOT_ACCEPTING)
        model = request.model
        assert model is not None  # resolved by request()
        cluster = self.cluster
        if cluster is not None and model.sequence and request.parent is None:
            owner = cluster.sequence_owner(request.options.correlation_id)
            if owner is not None:  # --workers: another worker keeps this sequence's state
                self._forward(cluster, owner, request, sender)
                return
        if request.uses_shm:
            self._map_shm(request)
        try:
            request.batch_size = model.validate(request)
        except ServerError:
            self.shm.release(request)
            raise
        owner = None if cluster is None else self._cache_owner(cluster, model, request)
        if owner is not None:  # --workers: another worker holds this key's cache entry
            assert cluster is not None
            self.shm.release(request)  # the owner maps the regions itself
            self._forward(cluster, owner, request, sender)
            return
        sender.bind(request, self._finished)
        request.queued(model.stats)
        self._began(request)
        if model.response_cache and not request.decoupled:
            if self._remote is not None:
                self._remote_lookup(self._remote, model, request)
                return
            if self._cache is not None and from_cache(self._cache, model, request):
                return
        model.submit(request)

    # -- cache and forwarding ------------------------------------------------------------------
    def _cache_owner(
        self, cluster: Cluster, model: ServedModel, request: InferenceRequest
    ) -> int | None:
        """The worker whose local cache holds a cacheable request's key, when it is another
        one (a local cache's key has one owner worker; Redis is one cache for every worker)."""
        local = self._cache if self._remote is None else None
        if local is None or not model.response_cache or request.decoupled:
            return None
        if request.parent is not None:
            return None
        return cluster.cache_owner(cache_key(request))

    def _forward(
        self, cluster: Cluster, owner: int, request: InferenceRequest, sender: ResponseSender
    ) -> None:
        """A sequence request whose state another worker keeps, or a cacheable request whose
        cache entry another worker holds: that worker runs it (shared memory, validation,
        cache, classification, statistics and all); here its responses only pass through
        (``_forwarded``)."""
        request.stats = None
        request.classify = None
        sender.bind(request, self._forwarded)
        self._began(request)
        cluster.forward(owner, request, sender)

    def _remote_lookup(
        self, cache: RedisResponseCache, model: ServedModel, request: InferenceRequest
    ) -> None:
        """Look the request up in Redis in a task; the answer or the scheduler follows."""
        task = asyncio.get_running_loop().create_task(answer_remote(cache, model, request))
        self._lookups.add(task)
        task.add_done_callback(self._lookups.discard)

    def _map_shm(self, request: InferenceRequest) -> None:
        try:
            self.shm.resolve_inputs(request)
            self.shm.check_outputs(request)
        except ServerError:
            self.shm.release(request)
            raise

    # -- in flight -----------------------------------------------------------------------------
    def _began(self, request: InferenceRequest) -> None:
        """An inference is in flight (submitted or forwarded) until ``_ended``."""
        self.inflight += 1
        ACTIVE.requests += 1
        key = _version_key(request)
        self.inflight_by[key] = self.inflight_by.get(key, 0) + 1

    def _ended(self, request: InferenceRequest) -> None:
        self.inflight -= 1
        ACTIVE.requests -= 1
        key = _version_key(request)
        left = self.inflight_by.get(key, 1) - 1
        if left > 0:
            self.inflight_by[key] = left
        else:
            self.inflight_by.pop(key, None)

    def _forwarded(
        self, request: InferenceRequest, error: Exception | None, response: InferenceResponse | None
    ) -> None:
        request.finish(error)  # no statistics here: the owner recorded them
        self._ended(request)

    def _finished(
        self, request: InferenceRequest, error: Exception | None, response: InferenceResponse | None
    ) -> None:
        """A request's final response is going out: store it in the cache, copy outputs into
        shared memory, and end the request's lifecycle (statistics)."""
        if request.cache_key is not None and error is None and response is not None:
            if self._remote is not None:
                self._remote.put(request.cache_key, request, list(response.outputs))
            else:
                assert self._cache is not None
                self._cache.put(request.cache_key, list(response.outputs))
        if request.shm_held is not None:
            if error is None and response is not None:
                try:
                    self.shm.write_outputs(request, response)
                except ServerError as exc:
                    response.error = error = exc
            self.shm.release(request)
        request.finish(error)
        self._ended(request)


def _version_key(request: InferenceRequest) -> tuple[str, str]:
    model = request.model
    return (model.name, model.version_str) if model is not None else ("", "")


class _Resolve(FinalAnswer):
    """The callback of ``Inference.infer``: the answer resolves the future it awaits,
    unless the caller has gone away."""

    __slots__ = ("future",)

    def __init__(
        self, request: InferenceRequest, future: asyncio.Future[InferenceResponse]
    ) -> None:
        self.request = request
        self.future = future

    def answer(self, response: InferenceResponse) -> None:
        if not self.future.done():
            self.future.set_result(response)
