"""InferenceServer: the one facade both front-ends call.

Front-ends decode bytes into a ``types.ClientRequest`` and hand it to ``infer`` (unary) or
``stream``; both are thin adapters over ``request`` + ``submit``, the one way in. Everything
about models, versions, validation and scheduling happens behind this class.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from typing import Any, Protocol

from . import TRITON_VERSION
from .logs.access_log import AccessEntry, AccessLog
from .backends import BackendRegistry
from .backends.python.observer import ModelLogLevels, Observability
from .backends.python.supervisor import RestartPolicy
from .extensions.classification import classifier_for
from .extensions.cache import ResponseCache, cache_key
from .extensions.redis_cache import RedisResponseCache
from .metrics.custom import CustomMetrics
from .metrics.stats import ModelStats
from .errors import (
    ErrorKind,
    ServerError,
    invalid_arg,
    not_found,
    unavailable,
    unsupported,
)
from .logs.settings import (
    LogSettings,
    LogUpdate,
    grpc_update,
    http_update,
    installed,
    raw_message,
)
from .logs.table import model_table, terminal_width
from .countdown import ExitCountdown
from .loop_spin import ACTIVE
from .metrics.render import FAMILY_NAMES
from .repository.model import Model
from .options import ServerOptions
from .extensions.shm import CUDA_UNSUPPORTED, SharedMemoryManager
from .config.model_config import ModelConfig
from .repository.control import ModelControl
from .repository.layout import repository_problem
from .repository.manager import ModelRepositoryManager, RepositoryLayout, VersionSettings
from .repository.names import check_load_keys, check_model_name
from .repository.names import version_from_string as parse_version
from .scheduling.rate_limiter import RateLimiter
from .extensions.parameters import parse_parameters
from .extensions.raw_input import raw_tensor
from .request import (
    FinalAnswer,
    InferenceRequest,
    ResponseCallback,
    ResponseSender,
    ServedModel,
    TracedRequest,
)
from .tracing import Trace, TraceManager, parse_update
from .types import ClientRequest, InferenceResponse

# The facade front-ends import: the server, and the request/sender/trace types and version
# parsing they hand to it.
__all__ = [
    "EXTENSIONS",
    "Cluster",
    "AccessEntry",
    "AccessLog",
    "FinalAnswer",
    "InferenceRequest",
    "InferenceServer",
    "LogUpdate",
    "ResponseCallback",
    "ResponseSender",
    "Trace",
    "TraceManager",
    "check_load_keys",
    "grpc_update",
    "http_update",
    "parse_version",
]

log = logging.getLogger("tritium")

# At shutdown, models get at least this long to finalize once in-flight requests are done
# (or the exit timeout ran out), before their instances are killed.
_FINALIZE_GRACE_S = 1.0

# The Triton extensions tritium implements, in Triton's order.
EXTENSIONS = (
    "classification",
    "sequence",
    "model_repository",
    "model_repository(unload_dependents)",
    "schedule_policy",
    "model_configuration",
    "system_shared_memory",
    "binary_tensor_data",
    "parameters",
    "statistics",
    "trace",
    "logging",
)


def _log_settings(options: ServerOptions) -> LogSettings:
    """The process's log settings (installed by the CLI), or this server's own from its options
    (a server built in-process, without the CLI)."""
    return installed() or LogSettings(
        options.logging.file,
        (options.logging.info, options.logging.warning, options.logging.error),
        options.logging.verbose,
        options.logging.format,
    )


def _check_repositories(options: ServerOptions) -> None:
    for path in options.repository.paths:
        problem = repository_problem(path)
        if problem:
            raise RuntimeError(f"--model-repository {path}: {problem}")


class Readiness:
    """The server's readiness for watchers (gRPC ``Health.Watch``): the server and the
    repository call ``changed`` wherever readiness may flip, and ``wait`` sleeps until it
    differs from what a watcher last saw, so a watcher costs nothing while it waits (no
    polling, no timer)."""

    def __init__(self, probe: Callable[[], bool]) -> None:
        self._probe = probe
        self._seen = False  # the server starts not ready
        self._flipped = asyncio.Event()  # a new one after each flip

    def changed(self) -> None:
        ready = self._probe()
        if ready != self._seen:
            self._seen = ready
            flipped, self._flipped = self._flipped, asyncio.Event()
            flipped.set()  # wakes every watcher waiting on this generation

    async def wait(self, seen: bool) -> bool:
        """The readiness once it is no longer ``seen``."""
        while (ready := self._probe()) == seen:
            await self._flipped.wait()
        return ready


class Cluster(Protocol):
    """The other workers of ``tritium serve --workers N`` (workers/member.py): what must be
    the whole server's goes through it. None in a single process."""

    async def load(
        self, name: str, config_json: str | None, files: dict[str, bytes] | None
    ) -> None: ...

    async def unload(self, name: str, unload_dependents: bool) -> None: ...

    def ready(self) -> bool: ...

    async def statistics(self, name: str, version: str) -> dict[str, Any]: ...

    async def metrics(self) -> bytes: ...

    def sequence_owner(self, correlation_id: int | str) -> int | None:
        """The worker that keeps this sequence's state, when it is another one."""

    def cache_owner(self, key: bytes) -> int | None:
        """The worker whose response cache holds this key, when it is another one."""

    def forward(self, owner: int, request: InferenceRequest, sender: ResponseSender) -> None:
        """Run ``request`` on worker ``owner``; its responses come to ``sender``."""

    async def broadcast(self, action: str, args: dict[str, Any]) -> None:
        """Apply a setting change on every other worker (``apply_setting``): this one
        applied it first."""


class InferenceServer:
    def __init__(self, options: ServerOptions) -> None:
        """Raises RuntimeError when a repository path cannot be read (Triton's ServerNew
        fails the same way, before any model loads)."""
        self.options = options
        _check_repositories(options)
        backends = options.backends
        restarts = RestartPolicy(
            backends.instance_max_restarts, backends.instance_restart_window_secs
        )
        # Python models' pb_utils.MetricFamily values (shown on /metrics) and log levels.
        self.custom_metrics = CustomMetrics(reserved=FAMILY_NAMES)
        self.logging = _log_settings(options)
        self._model_levels = ModelLogLevels(self.logging.model_levels())
        observability = Observability(self.custom_metrics, self._model_levels)
        self.readiness = Readiness(self.is_ready)  # Health.Watch waits on it
        self.repository = ModelRepositoryManager(
            list(options.repository.paths),
            # python: BLS requests come back to self
            BackendRegistry(
                {
                    "python": (restarts, backends.python_env_cache_dir, observability, self),
                    "onnxruntime": (backends.onnxruntime_default_max_batch_size,),
                }
            ),
            layout=RepositoryLayout(
                auto_complete=options.repository.auto_complete_config,
                load_threads=options.repository.load_thread_count,
                config_name=options.repository.config_name,
                load_retries=options.repository.load_retry_count,
                namespacing=options.repository.namespacing,
            ),
            settings=VersionSettings(
                dispatch=self,  # an ensemble's steps come back through request() and submit()
                limiter=RateLimiter(options.rate_limit.resources)
                if options.rate_limit.mode == "execution_count"
                else None,
                sequence_backlog=options.repository.sequence_backlog_limit,
                metrics=replace(
                    options.metrics.settings,
                    response_cache=options.response_cache_size > 0
                    or options.response_cache_redis is not None,
                ),
                unload_timeout=options.exit_timeout_secs,
            ),
            on_change=self.readiness.changed,
        )
        self.control = ModelControl(
            self.repository,
            options.repository.control_mode,
            options.repository.poll_secs,
            options.repository.load_models,
        )
        cache_size = options.response_cache_size
        ttl = options.response_cache_ttl
        self._cache = ResponseCache(cache_size, ttl) if cache_size > 0 else None
        redis = options.response_cache_redis
        # The shared cache in Redis (its lookups are awaited in tasks, held in _lookups).
        self._remote = RedisResponseCache(redis) if redis is not None else None
        self._lookups: set[asyncio.Task[None]] = set()
        self.shm = SharedMemoryManager(options.allow_client_shm)
        # The trace extension; front-ends read ``tracer.active`` once per request.
        self.tracer = TraceManager(options.tracing)
        # --access-log-file; front-ends read it once per inference request (None: off).
        self.access_log = _access_log(options)
        self._live = False
        self._accepting = False
        self._draining = False  # a signal came: not ready, requests still served (begin_shutdown)
        self.cluster: Cluster | None = None  # --workers N: set by the worker's member
        self._inflight = 0  # inferences submitted and not finished (also in loop_spin.ACTIVE)
        # the same per model version, for Triton's shutdown lines ("Model 'm' (version 1) has
        # N in-flight inferences")
        self._inflight_by: dict[tuple[str, str], int] = {}
        self._metadata = {
            "name": options.server_id,
            "version": TRITON_VERSION,
            "extensions": list(EXTENSIONS),
        }

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        self._live = True
        if self._remote is not None:
            await self._remote.start()
        await self.control.start()
        table = model_table(self.repository.index(), terminal_width())
        log.info("%s", table, extra=raw_message())  # as Triton: tables unescaped
        failures = self.repository.failures()
        if failures and self.options.exit_on_error:
            await self.repository.unload_all()
            raise RuntimeError("failed to load all models:\n  " + "\n  ".join(failures))
        self._accepting = True
        self.readiness.changed()

    def begin_shutdown(self) -> None:
        """A signal came: the server turns not ready (a balancer stops sending), while the
        front-ends drain their connections, whose requests are still served (Triton)."""
        self._draining = True
        self.readiness.changed()

    async def stop(self, countdown: ExitCountdown | None = None) -> None:
        """Stop taking requests, let in-flight ones finish, unload every model: all within
        what is left of ``--exit-timeout-secs`` (``countdown``; plus a short grace for models
        to finalize), after which executions still running are failed and their stub
        processes killed. A model load in progress finishes first, and is unloaded too. Logs
        Triton's lines (``InferenceServer::Stop``)."""
        self._accepting = False
        self.readiness.changed()
        if countdown is None:
            countdown = ExitCountdown(self.options.exit_timeout_secs)
        if self._live:  # started (a server that failed to bind has nothing to wait for)
            await self._drain(countdown)
        else:
            await self._unload_all(countdown)
        await asyncio.to_thread(self.tracer.close)  # trace file closed, spans exported
        if self.access_log is not None:
            await asyncio.to_thread(self.access_log.close)  # what waits is written
        if self._remote is not None:
            await self._remote.close()
        self._live = False

    async def _drain(self, countdown: ExitCountdown) -> None:
        log.info("Waiting for in-flight requests to complete.")
        if not await countdown.wait(lambda: len(self._inflight_by), self._inflight_line, True):
            log.warning("%d requests still in flight at shutdown timeout", self._inflight)
        log.info("All models are stopped, unloading models")
        unload = asyncio.ensure_future(self._unload_all(countdown))
        await countdown.wait(
            lambda: self._live_models() + self.control.in_flight() + (not unload.done()),
            self._live_line,
            True,
        )
        await unload

    def _inflight_line(self, left: int, count: int) -> str:
        lines = [f"Timeout {left}: Found {count} model versions that have in-flight inferences"]
        for (name, version), n in sorted(self._inflight_by.items()):
            lines.append(f"Model '{name}' (version {version}) has {n} in-flight inferences")
        return "\n".join(lines)

    def _live_line(self, left: int, count: int) -> str:
        return (
            f"Timeout {left}: Found {self._live_models()} live models and "
            f"{self.control.in_flight()} in-flight non-inference requests"
        )

    def _live_models(self) -> int:
        return self.repository.live_models()

    async def _unload_all(self, countdown: ExitCountdown) -> None:
        """Loads and unloads clients asked for finish (within the timeout; then they are
        cancelled), then every model is unloaded, those just loaded included."""
        await self.control.stop(countdown.remaining())
        remaining = max(countdown.remaining(), _FINALIZE_GRACE_S)
        await self.repository.unload_all(timeout=remaining)

    # -- health and metadata -----------------------------------------------------------------
    def is_live(self) -> bool:
        return self._live

    def is_ready(self) -> bool:
        """The server's readiness: with ``--workers N``, every worker's (``Cluster.ready``)."""
        if not self.is_ready_here():
            return False
        return self.cluster is None or self.cluster.ready()

    def is_ready_here(self) -> bool:
        """This process's own readiness."""
        if not (self._live and self._accepting) or self._draining:
            return False
        return self.repository.all_ready() if self.options.strict_readiness else True

    def metadata(self) -> dict[str, Any]:
        return self._metadata

    async def model_ready(self, name: str, version: str = "") -> bool:
        """Triton's ModelIsReady: false (not an error) for a model or version that is not
        loaded, unknown or not."""
        number = parse_version(version)
        try:
            model = self._model(name, number)
        except ServerError as exc:
            if exc.kind is ErrorKind.INVALID_ARG:  # a malformed version string or name
                raise
            if log.isEnabledFor(logging.DEBUG):  # a loaded version that is down: say why
                for down, reason in self.repository.down(name, number):
                    log.debug("Model '%s' version %d is not ready: %s", name, down, reason)
            return False
        return await model.is_ready()

    def model_metadata(self, name: str, version: str = "") -> dict[str, Any]:
        number = parse_version(version)
        model = self._model(name, number)
        spec = model.spec
        batch = (-1,) if spec.max_batch_size > 0 else ()
        if number > 0:
            versions = [str(number)]
        else:
            versions = [str(v) for v in self.repository.ready_versions(name)]
        return {
            "name": name,
            "versions": versions,
            "platform": spec.platform,
            "inputs": [
                {"name": s.name, "datatype": s.datatype.wire, "shape": [*batch, *s.dims]}
                for s in spec.inputs.values()
            ],
            "outputs": [
                {"name": s.name, "datatype": s.datatype.wire, "shape": [*batch, *s.dims]}
                for s in spec.outputs.values()
            ],
        }

    def statistics(self, name: str = "", version: str = "") -> dict[str, Any]:
        """The statistics extension: every ready model version, one model's, or one version's."""
        number = parse_version(version)
        models = self.repository.loaded(name, number)
        if name and not models:
            check_model_name(name)
            raise invalid_arg(f"requested model '{name}' is not available")
        return {"model_stats": [m.stats.as_dict() for m in models]}

    async def statistics_total(self, name: str = "", version: str = "") -> dict[str, Any]:
        """``statistics`` over the whole server: with ``--workers N``, summed over every
        worker (the errors are this worker's, the same everywhere)."""
        here = self.statistics(name, version)
        if self.cluster is None:
            return here
        return await self.cluster.statistics(name, version)

    def stats_snapshot(self) -> list[ModelStats]:
        """Every loaded model version's ModelStats (for the metrics endpoint)."""
        return [m.stats for m in self.repository.loaded("", -1)]

    # -- logging extension -------------------------------------------------------------------
    def log_settings(self) -> dict[str, Any]:
        return self.logging.as_dict()

    def update_log_settings(self, update: LogUpdate) -> dict[str, Any]:
        """Apply a client's change (checked by ``http_update``/``grpc_update``); the running
        Python stubs learn the new model log levels; answers every setting."""
        self.logging.apply(update)
        self._model_levels.set(self.logging.model_levels())
        return self.logging.as_dict()

    async def update_log_settings_total(self, update: LogUpdate) -> dict[str, Any]:
        """``update_log_settings`` here, then on every other worker of the server."""
        settings = self.update_log_settings(update)
        if self.cluster is not None:
            changed = {k: v for k, v in asdict(update).items() if v is not None}
            await self.cluster.broadcast("log", {"update": changed})
        return settings

    # -- every worker's settings (--workers N) --------------------------------------------------
    def apply_setting(self, action: str, args: dict[str, Any]) -> None:
        """A setting change the supervisor applies on every worker (``Cluster.broadcast``):
        the log settings, a trace setting, a system shared-memory registration."""
        if action == "log":
            self.update_log_settings(LogUpdate(**args["update"]))
        elif action == "trace":
            self.trace_setting(str(args["model"]), args["update"])
        elif action == "shm_register":
            self.register_system_shm(
                str(args["name"]), str(args["key"]), int(args["offset"]), int(args["size"])
            )
        elif action == "shm_unregister":
            self.unregister_system_shm(str(args["name"]))
        else:
            raise invalid_arg(f"unknown setting action '{action}'")

    # -- model repository extension ------------------------------------------------------------
    async def load_model(
        self, name: str, config_json: str | None = None, files: dict[str, bytes] | None = None
    ) -> None:
        """Triton's load: with ``--workers N``, answered once every worker serves it."""
        if self.cluster is not None:
            await self.cluster.load(name, config_json, files)
        else:
            await self.control.load(name, config_json, files)

    async def unload_model(self, name: str, unload_dependents: bool = False) -> None:
        if self.cluster is not None:
            await self.cluster.unload(name, unload_dependents)
        else:
            await self.control.unload(name, unload_dependents)

    # -- shared memory (system; CUDA needs a GPU this server does not have) -------------------
    async def register_system_shm_total(
        self, name: str, key: str, offset: int, byte_size: int
    ) -> None:
        """``register_system_shm`` on every worker: here first (the errors are this
        worker's, and no other worker maps a region this one refused), then on the others
        (if one of them fails, the region is unregistered everywhere)."""
        self.register_system_shm(name, key, offset, byte_size)
        if self.cluster is None:
            return
        await self.cluster.broadcast(
            "shm_register", {"name": name, "key": key, "offset": offset, "size": byte_size}
        )

    async def unregister_system_shm_total(self, name: str = "") -> None:
        self.unregister_system_shm(name)
        if self.cluster is not None:
            await self.cluster.broadcast("shm_unregister", {"name": name})

    def register_system_shm(self, name: str, key: str, offset: int, byte_size: int) -> None:
        self.shm.register(name, key, offset, byte_size)

    def unregister_system_shm(self, name: str = "") -> None:
        self.shm.unregister(name)

    def system_shm_status(self, name: str = "") -> list[dict[str, Any]]:
        return self.shm.status(name)

    def register_cuda_shm(self, name: str) -> None:
        self.shm.require_allowed()
        raise invalid_arg(CUDA_UNSUPPORTED)

    def unregister_cuda_shm(self, name: str = "") -> None:
        self.shm.require_allowed()  # no CUDA region is ever registered: nothing to drop

    def cuda_shm_status(self, name: str = "") -> list[dict[str, Any]]:
        self.shm.require_allowed()
        if name:
            raise not_found(f"Unable to find cuda shared memory region: '{name}'")
        return []

    def model_config(self, name: str, version: str = "") -> ModelConfig:
        return self._model(name, parse_version(version)).spec.config

    def model_config_json(self, name: str, version: str = "") -> dict[str, Any]:
        return self._model(name, parse_version(version)).spec.config_json

    def _model(self, name: str, version: int, near: str | None = None) -> Model:
        """The ready model version a request names (``near``: an ensemble step's namespace,
        looked in first). A name that can never be loaded (not one safe path component: see
        repository/names.py) is INVALID_ARG rather than NOT_FOUND; checked only on a miss, so
        served names cost nothing."""
        try:
            return self.repository.get(name, version, near)
        except ServerError:
            check_model_name(name)
            raise

    def repository_index(self, ready_only: bool = False) -> list[dict[str, str]]:
        return self.repository.index(ready_only)

    # -- trace extension -----------------------------------------------------------------------
    def trace_setting(
        self, model_name: str = "", update: dict[str, list[str] | None] | None = None
    ) -> dict[str, list[str]]:
        """The trace extension: a model's (or the global) trace setting, after ``update``
        (setting name -> its values; None or an empty list clears a model's own value)."""
        if model_name and not self.repository.loaded(model_name, -1):
            raise invalid_arg(f"Request for unknown model : {model_name}")
        if update:
            self.tracer.update(model_name, parse_update(update))
        return self.tracer.settings(model_name)

    async def trace_setting_total(
        self, model_name: str = "", update: dict[str, list[str] | None] | None = None
    ) -> dict[str, list[str]]:
        """``trace_setting`` here (Triton's errors), then the change on every other worker."""
        shown = self.trace_setting(model_name, update)
        if self.cluster is not None and update:
            await self.cluster.broadcast("trace", {"model": model_name, "update": update})
        return shown

    # -- inference ---------------------------------------------------------------------------
    def raw_request(self, name: str, version: int, body: bytes | bytearray) -> ClientRequest:
        """A raw binary request (the binary extension's ``Inference-Header-Content-Length:
        0``): the body is the model's one input; name, datatype and shape from its config."""
        spec = self._model(name, version).spec
        inputs = [(s.name, s.datatype, s.dims) for s in spec.inputs.values()]
        tensor = raw_tensor(name, inputs, spec.max_batch_size > 0, body)
        return ClientRequest(name, version, inputs=(tensor,))

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
        if not self._accepting and parent is None:
            raise unavailable("Server is not ready to accept inference requests")
        near = parent.model.namespace if parent is not None and parent.model else None
        model = self._model(client.model_name, client.model_version, near)
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
        response cache). Every response, errors included, goes to ``sender``; an error before
        scheduling raises instead. Unary calls, streams, generate and ensemble steps are
        adapters over this."""
        if not self._accepting and request.parent is None:  # an ensemble's steps go on
            raise unavailable("Server is not ready to accept inference requests")
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
        # a local cache's key has one owner worker (Redis is one cache for every worker)
        local = self._cache if self._remote is None else None
        cache = local if model.response_cache else None
        if cluster is not None and cache is not None and not request.decoupled:
            owner = None if request.parent is not None else cluster.cache_owner(cache_key(request))
            if owner is not None:  # --workers: another worker holds this key's cache entry
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
            if self._cache is not None and self._from_cache(self._cache, model, request):
                return
        model.submit(request)

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

    def _began(self, request: InferenceRequest) -> None:
        """An inference is in flight (submitted or forwarded) until ``_ended``."""
        self._inflight += 1
        ACTIVE.requests += 1
        key = _version_key(request)
        self._inflight_by[key] = self._inflight_by.get(key, 0) + 1

    def _ended(self, request: InferenceRequest) -> None:
        self._inflight -= 1
        ACTIVE.requests -= 1
        key = _version_key(request)
        left = self._inflight_by.get(key, 1) - 1
        if left > 0:
            self._inflight_by[key] = left
        else:
            self._inflight_by.pop(key, None)

    def _forwarded(
        self, request: InferenceRequest, error: Exception | None, response: InferenceResponse | None
    ) -> None:
        request.finish(error)  # no statistics here: the owner recorded them
        self._ended(request)

    async def infer(
        self,
        client: ClientRequest,
        decoupled_error: str,
        trace: Trace | None = None,
        access: AccessEntry | None = None,
    ) -> InferenceResponse:
        """A unary call: one non-decoupled inference awaited on the event loop; errors raise
        (``decoupled_error``: the front-end's message for a decoupled model)."""
        request = self.request(client, None, trace, access)
        if request.decoupled:
            raise unsupported(decoupled_error)
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

    def stream(
        self,
        client: ClientRequest,
        callback: ResponseCallback,
        trace: Trace | None = None,
        access: AccessEntry | None = None,
    ) -> InferenceRequest:
        """A streamed call: responses (0..N for a decoupled model, then the final flag) go to
        ``callback(response_or_None, final)`` on the loop; errors before scheduling raise."""
        request = self.request(client, None, trace, access)
        self.submit(request, ResponseSender(callback))
        return request

    def _map_shm(self, request: InferenceRequest) -> None:
        try:
            self.shm.resolve_inputs(request)
            self.shm.check_outputs(request)
        except ServerError:
            self.shm.release(request)
            raise

    @staticmethod
    def _from_cache(cache: ResponseCache, model: ServedModel, request: InferenceRequest) -> bool:
        """Answer from the response cache when the same request was answered before;
        otherwise remember the key, so the response is stored when it comes."""
        started = time.perf_counter_ns()
        key = cache_key(request)
        outputs = cache.get(key)
        stats = model.stats
        if outputs is None:
            stats.cache_lookup(False, time.perf_counter_ns() - started)
            request.cache_key = key
            return False
        stats.cache_lookup(True, time.perf_counter_ns() - started)
        request.cached = True
        response = InferenceResponse(
            request.model_name, model.version_str, request.id, list(outputs)
        )
        assert request.sender is not None
        request.sender.send(response, True)
        return True

    def _remote_lookup(
        self, cache: RedisResponseCache, model: ServedModel, request: InferenceRequest
    ) -> None:
        """Look the request up in Redis in a task; the answer or the scheduler follows."""
        task = asyncio.get_running_loop().create_task(self._answer_remote(cache, model, request))
        self._lookups.add(task)
        task.add_done_callback(self._lookups.discard)

    @staticmethod
    async def _answer_remote(
        cache: RedisResponseCache, model: ServedModel, request: InferenceRequest
    ) -> None:
        started = time.perf_counter_ns()
        key = cache_key(request)
        outputs = await cache.get(key, request)  # bounded; a failure is a miss
        model.stats.cache_lookup(outputs is not None, time.perf_counter_ns() - started)
        assert request.sender is not None
        if outputs is not None:
            request.cached = True
            response = InferenceResponse(
                request.model_name, model.version_str, request.id, outputs
            )
            request.sender.send(response, True)
            return
        request.cache_key = key
        try:
            model.submit(request)
        except Exception as exc:  # e.g. the version went away while Redis answered
            log.warning("request for %s after a cache miss: %s", request.model_name, exc)
            request.sender.send(
                InferenceResponse(
                    request.model_name, model.version_str, request.id,
                    error=unavailable(f"model '{request.model_name}' is not available"),
                ),
                True,
            )

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


def _access_log(options: ServerOptions) -> AccessLog | None:
    """The access log when --access-log-file names one; a file that cannot be opened stops
    the server at start."""
    given = options.logging
    if not given.access_log_file:
        return None
    try:
        return AccessLog(
            given.access_log_file, given.access_log_max_bytes, given.access_log_backup_count,
            lock_fd=given.access_log_lock_fd,
        )
    except OSError as exc:
        raise RuntimeError(
            f"--access-log-file: cannot open '{given.access_log_file}': {exc.strerror}"
        ) from None


class _Resolve(FinalAnswer):
    """The callback of ``InferenceServer.infer``: the answer resolves the future it awaits,
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
