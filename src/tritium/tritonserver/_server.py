"""``Server``: tritium's ``InferenceServer`` run in this process, on an event loop of its
own thread (``_loop.py:ServerLoop``), under Triton's in-process API.

Every call reaches the server on its loop: a blocking one waits for the result in the
caller's thread (``_run``/``_wait``); an inference is started there and its responses come
back through the iterator's sink (``_dispatch``)."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from ..api.inference import Inference
from ..logs.settings import TritonHandler
from ..metrics.render import CpuSampler, render
from ..server import InferenceServer
from ..types import ClientRequest
from ._enums import MetricFormat
from ..errors import ServerError
from ._errors import (
    InternalError,
    InvalidArgumentError,
    TritonError,
    UnavailableError,
    UnsupportedError,
    triton_error,
)
from . import _metrics
from ._loop import ServerLoop
from ._model import Model
from ._options import Options, server_options
from ._response import Handle

T = TypeVar("T")
_NOT_STARTED = "Server not started"
_UNLOADED_STATES = (None, "UNAVAILABLE")


class ModelDictionary(dict[tuple[str, int], Model]):
    """The models of the repository by (name, version); a name alone gives the model at
    version -1 (the highest ready one)."""

    def __init__(self, server: Server, models: list[Model]) -> None:
        super().__init__()
        for model in models:
            self[(model.name, model.version)] = model
        self._server = server
        self._names = {name for name, _ in self.keys()}

    def __getitem__(self, key: Any) -> Model:
        if isinstance(key, tuple):
            try:
                return dict.__getitem__(self, key)
            except KeyError:
                raise KeyError(f"Unknown Model: {key}") from None
        if key in self._names:
            return Model(self._server, name=key, version=-1)
        raise KeyError(f"Unknown Model: {key}")


class Server:
    """An in-process server: ``Server(options)`` or ``Server(**options)``, then ``start``."""

    def __init__(self, options: Options | None = None, **kwargs: Any) -> None:
        self.options: Options = options if options is not None else Options(**kwargs)
        self._loop: ServerLoop | None = None
        self._core: InferenceServer | None = None
        self._cpu: CpuSampler | None = None
        self._log: _LogRoute | None = None
        self._frontends: list[Any] = []  # tritonfrontend services started on this server

    # -- lifecycle -----------------------------------------------------------------------------
    def start(
        self,
        wait_until_ready: bool = False,
        polling_interval: float = 0.1,
        timeout: float | None = None,
    ) -> Server:
        """Load the models (as the control mode says) and serve. Options are checked here:
        TypeError for a value of the wrong type, InvalidArgumentError or UnsupportedError
        for one refused; a repository or model that fails raises InternalError."""
        if self._core is not None:
            raise InvalidArgumentError("Server already started")
        options = server_options(self.options)
        loop = ServerLoop()
        try:
            core, route = loop.call(_started(options))
        except BaseException as exc:
            loop.close()
            raise _mapped(exc) from None
        self._loop, self._core, self._log = loop, core, route
        _metrics.serving(loop)
        if options.metrics.allow_cpu:
            self._cpu = CpuSampler(options.metrics.interval_ms / 1000)
        if wait_until_ready:
            self._wait_ready(polling_interval, timeout)
        return self

    def _wait_ready(self, polling_interval: float, timeout: float | None) -> None:
        began = time.monotonic()
        while not self.ready():
            if timeout is not None and time.monotonic() - began >= timeout:
                raise UnavailableError("Timeout before ready")
            time.sleep(polling_interval)

    def stop(self) -> None:
        """Stop the front-ends still running on it, let in-flight requests finish, unload
        every model (within ``exit_timeout``), and end the server's thread."""
        loop, core = self._loop, self._core
        if loop is None or core is None:
            raise InvalidArgumentError(_NOT_STARTED)
        try:
            for frontend in list(self._frontends):
                try:
                    frontend.stop()
                except TritonError:  # its listener is closed with the loop below
                    self._frontends.remove(frontend)
            loop.call(core.stop())
        finally:
            if self._log is not None:
                self._log.remove()
            _metrics.stopped(loop)
            loop.close()
            self._loop = self._core = self._log = None

    # -- health and metadata -------------------------------------------------------------------
    def live(self) -> bool:
        live: bool = self._run(lambda core: core.is_live())
        return live

    def ready(self) -> bool:
        ready: bool = self._run(lambda core: core.is_ready())
        return ready

    def metadata(self) -> dict[str, Any]:
        metadata: dict[str, Any] = self._run(lambda core: dict(core.metadata()))
        return metadata

    def metrics(self, metric_format: MetricFormat = MetricFormat.PROMETHEUS) -> str:
        """The Prometheus exposition /metrics would serve."""
        if MetricFormat(metric_format) is not MetricFormat.PROMETHEUS:
            raise InvalidArgumentError(f"unsupported metric format {metric_format!r}")
        if not self.options.metrics:
            raise UnsupportedError("metrics are disabled (Options.metrics=False)")
        cpu = self._cpu
        body: bytes = self._run(
            lambda core: render(
                core.stats_snapshot(), cpu, core.custom_metrics, core.repository_index()
            )
        )
        return body.decode()

    # -- models --------------------------------------------------------------------------------
    def model(self, model_name: str, model_version: int = -1) -> Model:
        return Model(self, model_name, model_version)

    def models(self, exclude_not_ready: bool = False) -> ModelDictionary:
        rows: list[dict[str, str]] = self._run(
            lambda core: core.repository_index(exclude_not_ready)
        )
        models = [
            Model(
                self,
                row["name"],
                int(row["version"]) if row.get("version") else -1,
                row.get("state"),
                row.get("reason"),
            )
            for row in rows
        ]
        return ModelDictionary(self, models)

    def load(self, model_name: str, parameters: dict[str, Any] | None = None) -> Model:
        """Load (or reload) a model (explicit control mode): ``parameters`` may hold
        ``config`` (the model configuration as JSON) and ``file:<path>`` entries (the
        model's files as bytes), as Triton's load API takes them."""
        config, files = _load_parameters(parameters or {})
        self._wait(lambda core: core.load_model(model_name, config, files))
        return self.model(model_name)

    def unload(
        self,
        model: str | Model,
        unload_dependents: bool = False,
        wait_until_unloaded: bool = False,
        polling_interval: float = 0.1,
        timeout: float | None = None,
    ) -> None:
        name = model if isinstance(model, str) else model.name
        versions = [key for key in self.models() if key[0] == name]
        self._wait(lambda core: core.unload_model(name, unload_dependents))
        began = time.monotonic()
        while wait_until_unloaded and not self._unloaded(versions):
            if timeout is not None and time.monotonic() - began >= timeout:
                return
            time.sleep(polling_interval)

    def _unloaded(self, versions: list[tuple[str, int]]) -> bool:
        models = self.models()
        return all(models[key].state in _UNLOADED_STATES for key in versions if key in models)

    def poll_model_repository(self) -> None:
        """Apply the repository's changes now (poll control mode)."""
        core = self._core_or_raise()
        if core.options.repository.control_mode != "poll":
            raise UnsupportedError("poll_model_repository needs ModelControlMode.POLL")
        self._wait(lambda core: core.control.apply_poll(core.control._snapshot()))

    def register_model_repository(
        self, repository_path: str, name_mapping: dict[str, str] | None = None
    ) -> None:
        raise UnsupportedError("register_model_repository is not supported by tritium")

    def unregister_model_repository(self, repository_path: str) -> None:
        raise UnsupportedError("unregister_model_repository is not supported by tritium")

    # -- the server's loop ---------------------------------------------------------------------
    def _started(self) -> None:
        if self._core is None:
            raise InvalidArgumentError(_NOT_STARTED)

    def _core_or_raise(self) -> InferenceServer:
        if self._core is None:
            raise InvalidArgumentError(_NOT_STARTED)
        return self._core

    def _loop_or_raise(self) -> ServerLoop:
        if self._loop is None:
            raise InvalidArgumentError(_NOT_STARTED)
        return self._loop

    def _run(self, work: Callable[[InferenceServer], T]) -> T:
        """``work(core)`` on the server's loop; its result, errors as Triton's."""
        core = self._core_or_raise()

        async def run() -> T:
            return work(core)

        return self._call(run())

    def _wait(self, work: Callable[[InferenceServer], Awaitable[T]]) -> T:
        """``await work(core)`` on the server's loop; its result, errors as Triton's."""
        core = self._core_or_raise()

        async def run() -> T:
            return await work(core)

        return self._call(run())

    def _call(self, work: Coroutine[Any, Any, T]) -> T:
        try:
            result: T = self._loop_or_raise().call(work)
        except BaseException as exc:
            raise _mapped(exc) from None
        return result

    def _dispatch(self, client: ClientRequest, handle: Handle) -> None:
        """Start ``client`` on the server's loop; its responses go to ``handle``."""
        core = self._core_or_raise()
        self._loop_or_raise().soon(_start, core.inference, client, handle)


def _start(inference: Inference, client: ClientRequest, handle: Handle) -> None:
    """On the server's loop: the one inference call, its responses to the handle's sink."""
    try:
        request = inference.start(client, handle)
    except Exception as exc:  # noqa: BLE001 - refused: the caller's iterator raises it
        handle.refused(exc)
        return
    handle.started(request)


async def _started(options: Any) -> tuple[InferenceServer, _LogRoute]:
    """The server built and started on its loop, its records routed as Triton's from the
    first (a failed start leaves nothing loaded and no route)."""
    core = InferenceServer(options, _metrics.REGISTRY)  # Triton's one registry of the process
    route = _LogRoute(core)
    try:
        if core.init_error:
            raise InternalError(core.init_error)
        await core.start()
    except BaseException:
        await core.stop()
        route.remove()
        raise
    return core, route


def _mapped(error: BaseException) -> BaseException:
    """An error of the server as Triton's API raises it: TypeError and Triton's own as they
    are, a ServerError by its kind, anything else (a failed start's RuntimeError, a log
    file that cannot be opened) an InternalError."""
    if isinstance(error, TypeError | TritonError | ServerError):
        return triton_error(error) if isinstance(error, ServerError) else error
    return InternalError(str(error) or type(error).__name__)


def _load_parameters(parameters: dict[str, Any]) -> tuple[str | None, dict[str, bytes] | None]:
    config: str | None = None
    files: dict[str, bytes] = {}
    for key, value in parameters.items():
        if key == "config":
            if not isinstance(value, str):
                raise InvalidArgumentError("load parameter 'config' must be a JSON string")
            config = value
        elif key.startswith("file:"):
            if not isinstance(value, bytes | bytearray):
                raise InvalidArgumentError(f"load parameter '{key}' must be bytes")
            files[key] = bytes(value)
        else:
            raise InvalidArgumentError(f"unexpected load parameter '{key}'")
    return config, files or None


class _LogRoute:
    """The server's log records (the ``tritium`` logger) written as Triton's, to the
    options' log file or the console, with Triton's levels; the caller's root logger is not
    touched (records do not propagate to it while the server runs)."""

    def __init__(self, core: InferenceServer) -> None:
        self._logger = logging.getLogger("tritium")
        self._saved = (self._logger.level, self._logger.propagate)
        self._handler = TritonHandler(core.logging)
        self._logger.addHandler(self._handler)
        self._logger.setLevel(core.logging.logger_level())
        self._logger.propagate = False

    def remove(self) -> None:
        self._logger.removeHandler(self._handler)
        self._handler.close()
        self._logger.setLevel(self._saved[0])
        self._logger.propagate = self._saved[1]
