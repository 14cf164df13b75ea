"""InferenceServer: the composition root (repository, backends, caches, tracing, the access
log and the one inference call, ``api/inference.py:Inference``, built and wired here), with
the extensions' operations the front-ends call (health, metadata, statistics, logging, trace,
shared memory, model control). Inference itself goes through ``self.inference``.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import asdict, replace
from typing import Any

from . import TRITON_VERSION
from .logs.access_log import AccessLog
from .backends import BackendRegistry
from .backends.python.observer import ModelLogLevels, Observability
from .backends.python.supervisor import RestartPolicy
from .extensions.cache import ResponseCache
from .extensions.redis_cache import RedisResponseCache
from .metrics.custom import CustomMetrics
from .metrics.stats import ModelStats
from .errors import (
    ErrorKind,
    ServerError,
    invalid_arg,
    not_found,
    unavailable,
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
from .metrics.openai import OpenAIMetrics
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
from .request import (
    FinalAnswer,
    InferenceRequest,
    ResponseCallback,
    ResponseSender,
)
from .tracing import Trace, TraceManager, parse_update
from .api import Cluster, Inference
from .readiness import Readiness
from .shutdown import drain, unload_all
from .types import ClientRequest

# The facade front-ends import: the server, and the request/sender/trace types and version
# parsing they hand to it.
__all__ = [
    "EXTENSIONS",
    "Cluster",
    "FinalAnswer",
    "InferenceRequest",
    "InferenceServer",
    "LogUpdate",
    "OpenAIMetrics",
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

# Triton's answer to the model APIs of a server that failed to initialize.
SERVER_NOT_READY = "Server not ready"

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


def _check_repositories(options: ServerOptions) -> str:
    """Why the server cannot initialize ('' when it can): the first repository path that
    cannot be read. With ``--exit-on-error`` (the default) that raises RuntimeError; without
    it the server runs failed to initialize (Triton's SERVER_FAILED_TO_INITIALIZE: not live,
    not ready, the health and server metadata APIs answer, the model APIs say "Server not
    ready"), after logging the error as Triton's ServerNew does."""
    for path in options.repository.paths:
        problem = repository_problem(path)
        if not problem:
            continue
        message = f"--model-repository {path}: {problem}"
        if options.exit_on_error:
            raise RuntimeError(message)
        log.error("Internal: %s", message)
        return message
    return ""


class InferenceServer:
    def __init__(self, options: ServerOptions, custom_metrics: CustomMetrics | None = None) -> None:
        """Raises RuntimeError when a repository path cannot be read (Triton's ServerNew
        fails the same way, before any model loads), unless ``--exit-on-error=false``: then
        the server is built without models and stays failed to initialize (``init_error``).
        ``custom_metrics``: the registry of custom metric families to keep (the in-process
        API's, shared by its servers as Triton's one registry); by default one of its own."""
        self.options = options
        # Why this server failed to initialize ('' when it did not): nothing loads, and it
        # is never live nor ready.
        self.init_error = _check_repositories(options)
        backends = options.backends
        restarts = RestartPolicy(
            backends.instance_max_restarts, backends.instance_restart_window_secs
        )
        # Python models' pb_utils.MetricFamily values (shown on /metrics) and log levels.
        if custom_metrics is None:
            custom_metrics = CustomMetrics(reserved=FAMILY_NAMES)
        self.custom_metrics = custom_metrics
        self.openai_metrics = OpenAIMetrics()  # the OpenAI-compatible routes' own families
        self.logging = _log_settings(options)
        self._model_levels = ModelLogLevels(self.logging.model_levels())
        observability = Observability(self.custom_metrics, self._model_levels)
        self.readiness = Readiness(self.is_ready)  # Health.Watch waits on it
        self.repository = ModelRepositoryManager(
            [] if self.init_error else list(options.repository.paths),
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
        cache = ResponseCache(cache_size, options.response_cache_ttl) if cache_size > 0 else None
        redis = options.response_cache_redis
        # The shared cache in Redis (started and closed with the server).
        self._remote = RedisResponseCache(redis) if redis is not None else None
        self.shm = SharedMemoryManager(options.allow_client_shm)
        # The trace extension; the inference call reads ``tracer.active`` once per request.
        self.tracer = TraceManager(options.tracing)
        # --access-log-file (None: off); the inference call writes its lines.
        self.access_log = _access_log(options)
        # The one inference call every front-end, ensemble step and BLS call goes through.
        self.inference = Inference(
            self.repository, self.shm, self.tracer, self.access_log, (cache, self._remote)
        )
        self._live = False
        self._accepting = False
        self._draining = False  # a signal came: not ready, requests still served (begin_shutdown)
        self._metadata = {
            "name": options.server_id,
            "version": TRITON_VERSION,
            "extensions": list(EXTENSIONS),
        }

    @property
    def cluster(self) -> Cluster | None:
        """The other workers (``--workers N``; None in a single process), set by the
        worker's member; the inference call forwards through them."""
        return self.inference.cluster

    @cluster.setter
    def cluster(self, cluster: Cluster | None) -> None:
        self.inference.cluster = cluster

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        if self.init_error:  # no model loads, no table (Triton's manager is null)
            return
        self._live = True
        if self._remote is not None:
            await self._remote.start()
        await self.control.start()
        table = model_table(self.repository.index(), terminal_width())
        log.info("%s", table, extra=raw_message())  # as Triton: tables unescaped
        failures = self.control.startup_failures + self.repository.failures()
        if failures and self.options.exit_on_error:
            await self.repository.unload_all()
            raise RuntimeError("failed to load all models:\n  " + "\n  ".join(failures))
        self._accepting = self.inference.accepting = True
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
        self._accepting = self.inference.accepting = False
        self.readiness.changed()
        if countdown is None:
            countdown = ExitCountdown(self.options.exit_timeout_secs)
        if self._live:  # started (a server that failed to bind has nothing to wait for)
            await drain(self.inference, self.repository, self.control, countdown)
        else:
            await unload_all(self.repository, self.control, countdown)
        await asyncio.to_thread(self.tracer.close)  # trace file closed, spans exported
        if self.access_log is not None:
            await asyncio.to_thread(self.access_log.close)  # what waits is written
        if self._remote is not None:
            await self._remote.close()
        self._live = False

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
        """``update_log_settings`` on the whole server (``everywhere``)."""
        changed = {k: v for k, v in asdict(update).items() if v is not None}
        settings: dict[str, Any] = await self.everywhere("log", {"update": changed})
        return settings

    # -- every worker's settings (--workers N) --------------------------------------------------
    async def everywhere(self, action: str, args: dict[str, Any], broadcast: bool = True) -> Any:
        """The one way a setting changes on the whole server (the ``_total`` operations):
        ``apply_setting`` here first (the errors are this worker's, and no other worker
        applies what this one refused), then, with ``--workers N`` and ``broadcast``, on every
        other worker through ``Cluster.broadcast``. Returns what it gave here."""
        shown = self.apply_setting(action, args)
        if self.cluster is not None and broadcast:
            await self.cluster.broadcast(action, args)
        return shown

    def apply_setting(self, action: str, args: dict[str, Any]) -> Any:
        """A setting change on this worker (``everywhere``; the supervisor applies what
        another worker broadcast the same way): the log settings, a trace setting, a system
        shared-memory registration. Returns what the operation returns."""
        if action == "log":
            return self.update_log_settings(LogUpdate(**args["update"]))
        if action == "trace":
            return self.trace_setting(str(args["model"]), args["update"])
        if action == "shm_register":
            name, key = str(args["name"]), str(args["key"])
            return self.register_system_shm(name, key, int(args["offset"]), int(args["size"]))
        if action == "shm_unregister":
            return self.unregister_system_shm(str(args["name"]))
        raise invalid_arg(f"unknown setting action '{action}'")

    # -- model repository extension ------------------------------------------------------------
    def _require_initialized(self) -> None:
        """Triton's model repository APIs on a server that failed to initialize."""
        if self.init_error:
            raise unavailable(SERVER_NOT_READY)

    async def load_model(
        self, name: str, config_json: str | None = None, files: dict[str, bytes] | None = None
    ) -> None:
        """Triton's load: with ``--workers N``, answered once every worker serves it."""
        self._require_initialized()
        if self.cluster is not None:
            await self.cluster.load(name, config_json, files)
        else:
            await self.control.load(name, config_json, files)

    async def unload_model(self, name: str, unload_dependents: bool = False) -> None:
        self._require_initialized()
        if self.cluster is not None:
            await self.cluster.unload(name, unload_dependents)
        else:
            await self.control.unload(name, unload_dependents)

    # -- shared memory (system; CUDA needs a GPU this server does not have) -------------------
    async def register_system_shm_total(
        self, name: str, key: str, offset: int, byte_size: int
    ) -> None:
        """``register_system_shm`` on every worker (``everywhere``; if another worker
        fails, the region is unregistered everywhere)."""
        args = {"name": name, "key": key, "offset": offset, "size": byte_size}
        await self.everywhere("shm_register", args)

    async def unregister_system_shm_total(self, name: str = "") -> None:
        await self.everywhere("shm_unregister", {"name": name})

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

    def _model(self, name: str, version: int) -> Model:
        return self.inference.model(name, version)

    def repository_index(self, ready_only: bool = False) -> list[dict[str, str]]:
        self._require_initialized()
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
        """``trace_setting`` on the whole server (``everywhere``; a read goes nowhere)."""
        args = {"model": model_name, "update": update}
        shown: dict[str, list[str]] = await self.everywhere("trace", args, bool(update))
        return shown

    # -- inference (the data plane: api/inference.py) ----------------------------------------
    def request(
        self,
        client: ClientRequest,
        parent: InferenceRequest | None = None,
        trace: Trace | None = None,
    ) -> InferenceRequest:
        """``Inference.request``: for ensembles, BLS calls and forwarded requests, which reach
        the server as their dispatch."""
        return self.inference.request(client, parent, trace)

    def submit(self, request: InferenceRequest, sender: ResponseSender) -> None:
        """``Inference.submit`` (see ``request``)."""
        self.inference.submit(request, sender)


def _access_log(options: ServerOptions) -> AccessLog | None:
    """The access log when --access-log-file names one; a file that cannot be opened stops
    the server at start."""
    given = options.logging
    if not given.access_log_file:
        return None
    try:
        return AccessLog(
            given.access_log_file,
            given.access_log_max_bytes,
            given.access_log_backup_count,
            lock_fd=given.access_log_lock_fd,
        )
    except OSError as exc:
        raise RuntimeError(
            f"--access-log-file: cannot open '{given.access_log_file}': {exc.strerror}"
        ) from None
