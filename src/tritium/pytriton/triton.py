"""PyTriton's ``Triton`` (``pytriton.triton``) served by tritium in this process: ``bind`` a
callable, ``run``/``serve``/``connect``/``stop``, and ``unbind`` (PyTriton cannot unload).

The server is tritium's own (HTTP, gRPC and metrics front-ends on a thread of their own); a
bound callable is a model of the ``pytriton`` backend (backends/bound.py) whose executions
run on a thread per instance (``pool="thread"``, the default) or in a process per instance
(``pool="process"``, or the environment's ``TRITIUM_PYTRITON_POOL=process``): no proxy, no
socket between the server and the callable. ``TritonConfig`` fields are Triton's flags and
go through ``tritium serve``'s own flag table, so a flag tritium refuses is refused here with
the same reason (``PyTritonBadParameterError``).
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import io
import logging
import os
import re
import secrets
import shutil
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..backends import bound
from ..cli.main import build_parser
from ..cli.flags.build import options_from_args
from ..logs.settings import LogSettings
from ..errors import ServerError
from ..options import ServerOptions
from ._binding import binding, model_config, write_model
from ._embedded import EmbeddedServer
from .exceptions import (
    PyTritonModelConfigError,
    PyTritonBadParameterError,
    PyTritonInvalidOperationError,
    PyTritonValidationError,
)
from .model_config import ModelConfig, Tensor
from .model_config.triton_model_config import TritonModelConfig

LOGGER = logging.getLogger("tritium.pytriton")
MONITORING_PERIOD_S = 10.0
TRITON_ACCESS_HEADER = "triton-access-token"
POOL_ENV = "TRITIUM_PYTRITON_POOL"
VALID_TRITON_ENDPOINTS = {
    "health",
    "metadata",
    "inference",
    "shared-memory",
    "model-config",
    "model-repository",
    "statistics",
    "trace",
    "logging",
}
DEFAULT_PROTECTED_ENDPOINTS = [
    "shared-memory",
    "model-repository",
    "statistics",
    "trace",
    "logging",
]


@dataclasses.dataclass(kw_only=True)
class TritonConfig:
    """Triton's server flags under PyTriton's field names (None: the default)."""

    model_repository: Path | None = None
    id: str | None = None
    log_verbose: int | None = None
    log_file: Path | None = None
    exit_timeout_secs: int | None = None
    exit_on_error: bool | None = None
    strict_readiness: bool | None = None
    allow_http: bool | None = None
    http_address: str | None = None
    http_port: int | None = None
    http_header_forward_pattern: str | None = None
    http_thread_count: int | None = None
    http_restricted_api: str | None = None
    allow_grpc: bool | None = None
    grpc_address: str | None = None
    grpc_port: int | None = None
    grpc_header_forward_pattern: str | None = None
    grpc_infer_allocation_pool_size: int | None = None
    grpc_use_ssl: bool | None = None
    grpc_use_ssl_mutual: bool | None = None
    grpc_server_cert: Path | None = None
    grpc_server_key: Path | None = None
    grpc_root_cert: Path | None = None
    grpc_infer_response_compression_level: str | None = None
    grpc_keepalive_time: int | None = None
    grpc_keepalive_timeout: int | None = None
    grpc_keepalive_permit_without_calls: bool | None = None
    grpc_http2_max_pings_without_data: int | None = None
    grpc_http2_min_recv_ping_interval_without_data: int | None = None
    grpc_http2_max_ping_strikes: int | None = None
    grpc_restricted_protocol: str | None = None
    allow_metrics: bool | None = None
    allow_gpu_metrics: bool | None = None
    allow_cpu_metrics: bool | None = None
    metrics_interval_ms: int | None = None
    metrics_port: int | None = None
    metrics_address: str | None = None
    allow_sagemaker: bool | None = None
    sagemaker_port: int | None = None
    sagemaker_safe_port_range: str | None = None
    sagemaker_thread_count: int | None = None
    allow_vertex_ai: bool | None = None
    vertex_ai_port: int | None = None
    vertex_ai_thread_count: int | None = None
    vertex_ai_default_model: str | None = None
    metrics_config: list[str] | None = None
    trace_config: list[str] | None = None
    cache_config: list[str] | None = None
    cache_directory: str | None = None
    buffer_manager_thread_count: int | None = None

    def __post_init__(self) -> None:
        if self.allow_http not in (True, None) and self.allow_grpc not in (True, None):
            raise PyTritonValidationError("The `http` or `grpc` endpoint has to be allowed.")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, config: dict[str, Any]) -> TritonConfig:
        """Values cast to each field's type; unknown names are logged and left out."""
        fields = {f.name: f for f in dataclasses.fields(cls)}
        for name in config:
            if name not in fields:
                LOGGER.warning("Ignoring %s as could not find matching config field", name)
        return cls(**{n: _cast(str(fields[n].type), v) for n, v in config.items() if n in fields})

    @classmethod
    def from_env(cls) -> TritonConfig:
        """``PYTRITON_TRITON_CONFIG_<FIELD>`` (lists: ``<FIELD>_<i>``)."""
        prefix = "PYTRITON_TRITON_CONFIG_"
        found: dict[str, Any] = {}
        lists: dict[str, dict[int, str]] = {}
        for name, value in os.environ.items():
            if not name.startswith(prefix):
                continue
            key = name[len(prefix) :].lower()
            match = re.match(r"^(.+?)_(\d+)$", key)
            if match:
                lists.setdefault(match.group(1), {})[int(match.group(2))] = value
            else:
                found[key] = value
        for key, items in lists.items():
            found[key] = [items[i] for i in sorted(items)]
        return cls.from_dict(found)


def _cast(kind: str, value: Any) -> Any:
    if value is None:
        return None
    if kind.startswith("list"):
        return list(value) if not isinstance(value, str) else value.split(",")
    if kind.startswith("bool"):
        return value if isinstance(value, bool) else str(value).lower() in ("1", "true", "yes")
    if kind.startswith("int"):
        return int(value)
    if kind.startswith("Path"):
        return Path(value)
    return str(value)


@dataclasses.dataclass
class TritonLifecyclePolicy:
    """When the server starts and where the model store lives (tritium: on startup, local)."""

    launch_triton_on_startup: bool = True
    local_model_store: bool = False


DefaultTritonLifecyclePolicy = TritonLifecyclePolicy()


@dataclasses.dataclass
class TritonSecurityConfig:
    """A token that clients of the restricted endpoints must send (``triton-access-token``)."""

    access_token: str | None = None
    restricted_endpoints: list[str] | None = None

    def __post_init__(self) -> None:
        if self.restricted_endpoints is None:
            self.restricted_endpoints = list(DEFAULT_PROTECTED_ENDPOINTS)
        invalid = set(self.restricted_endpoints) - VALID_TRITON_ENDPOINTS
        if invalid:
            raise PyTritonValidationError(
                f"Invalid endpoint names: {', '.join(sorted(invalid))}. "
                f"Valid endpoints are: {', '.join(sorted(VALID_TRITON_ENDPOINTS))}"
            )
        if self.access_token is None and self.restricted_endpoints:
            self.access_token = secrets.token_urlsafe(32)


class Workspace:
    """Where bound models' folders live (a temporary folder unless given); removed by stop."""

    def __init__(self, path: str | Path | None = None) -> None:
        self._made = path is None
        self.path = (
            Path(tempfile.mkdtemp(prefix="tritium-pytriton-")) if path is None else Path(path)
        )
        self.path.mkdir(parents=True, exist_ok=True)
        self.model_store_path = self.path / "model-store"
        self.model_store_path.mkdir(exist_ok=True)

    def clean(self) -> None:
        shutil.rmtree(self.model_store_path, ignore_errors=True)
        if self._made:
            shutil.rmtree(self.path, ignore_errors=True)


def server_options(
    config: TritonConfig, store: Path, security: TritonSecurityConfig
) -> ServerOptions:
    """``tritium serve``'s options for ``config``: each field as its Triton flag, read by the
    CLI's own table (refused flags and bad values: PyTritonBadParameterError)."""
    argv = ["serve", f"--model-repository={store}", "--model-control-mode=explicit"]
    for name, value in config.to_dict().items():
        argv.extend(_flags(name, value))
    if security.access_token and security.restricted_endpoints:
        endpoints = ",".join(security.restricted_endpoints)
        value = f"{endpoints}:{TRITON_ACCESS_HEADER}={security.access_token}"
        if config.http_restricted_api is None:
            argv.append(f"--http-restricted-api={value}")
        if config.grpc_restricted_protocol is None:
            argv.append(f"--grpc-restricted-protocol={value}")
    return _parse(argv)


def _flags(name: str, value: Any) -> list[str]:
    if value is None:
        return []
    flag = "--" + name.replace("_", "-")
    if isinstance(value, list):
        return [f"{flag}={item}" for item in value]
    if isinstance(value, bool):
        return [f"{flag}={'true' if value else 'false'}"]
    return [f"{flag}={value}"]


def _parse(argv: list[str]) -> ServerOptions:
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            args = build_parser().parse_args(argv)
            return options_from_args(args)
    except SystemExit as exc:
        text = errors.getvalue().strip().splitlines()
        reason = str(exc.code) if isinstance(exc.code, str) else (text[-1] if text else "")
        raise PyTritonBadParameterError(f"TritonConfig refused by tritium: {reason}") from None


def _merged(config: TritonConfig | None) -> TritonConfig:
    """PyTriton's order: the explicit config over the environment's over the defaults."""
    values = {k: v for k, v in TritonConfig.from_env().to_dict().items() if v is not None}
    if config is not None:
        values.update({k: v for k, v in config.to_dict().items() if v is not None})
    return TritonConfig(**values)


@dataclasses.dataclass
class _Bound:
    config: TritonModelConfig
    folder: Path
    loaded: bool = False


class Triton:
    """tritium serving bound Python callables in this process (PyTriton's ``Triton``)."""

    def __init__(
        self,
        *,
        config: TritonConfig | None = None,
        workspace: Workspace | str | Path | None = None,
        triton_lifecycle_policy: TritonLifecyclePolicy | None = None,
        security_config: TritonSecurityConfig | None = None,
        pool: str | None = None,
    ) -> None:
        policy = triton_lifecycle_policy or DefaultTritonLifecyclePolicy
        if not policy.launch_triton_on_startup:
            raise PyTritonBadParameterError(
                "tritium.pytriton starts its server on startup: "
                "TritonLifecyclePolicy(launch_triton_on_startup=False) is not supported"
            )
        self._pool = pool or os.environ.get(POOL_ENV, "thread")
        if self._pool not in ("thread", "process"):
            raise PyTritonBadParameterError(
                f"pool must be 'thread' or 'process', not {self._pool!r}"
            )
        self._config = _merged(config)
        self._security_config = security_config or TritonSecurityConfig()
        self._workspace = workspace if isinstance(workspace, Workspace) else Workspace(workspace)
        self._options = server_options(
            self._config, self._workspace.model_store_path, self._security_config
        )
        if self._config.model_repository is not None:
            paths = (self._workspace.model_store_path, Path(self._config.model_repository))
            repository = dataclasses.replace(self._options.repository, paths=paths)
            self._options = dataclasses.replace(self._options, repository=repository)
        self._server: EmbeddedServer | None = None
        self._models: dict[str, _Bound] = {}
        self._cv = threading.Condition()
        self._connected = False
        self._stopped = True
        self._finished = False  # stopped after running: cannot run again

    # -- PyTriton's API ----------------------------------------------------------------------
    def bind(  # noqa: PLR0913  # PyTriton's signature, and tritium's pool
        self,
        model_name: str,
        infer_func: Callable[..., Any] | Sequence[Callable[..., Any]],
        inputs: Sequence[Tensor],
        outputs: Sequence[Tensor],
        model_version: int = 1,
        config: ModelConfig | None = None,
        strict: bool = False,
        trace_config: list[str] | None = None,
        pool: str | None = None,
    ) -> None:
        """Serve ``infer_func`` (a list: one instance each) as ``model_name``; loaded now when
        the server runs, else at ``connect``."""
        _validate_model_name(model_name)
        if trace_config is not None:
            raise PyTritonBadParameterError(
                "bind(trace_config=...) is not supported by tritium.pytriton: trace with "
                "TritonConfig(trace_config=[...]) (the server's tracing)"
            )
        if model_name in self._models:
            raise PyTritonInvalidOperationError(f"Model {model_name} is already bound")
        callables: list[Callable[..., Any]] = (
            list(infer_func) if isinstance(infer_func, (list, tuple)) else [infer_func]  # type: ignore[list-item]
        )
        served = model_config(
            model_name,
            model_version,
            config or ModelConfig(),
            list(inputs),
            list(outputs),
            len(callables),
        )
        chosen = pool or self._pool
        folder = write_model(self._workspace.model_store_path, served)
        bound.register(folder, binding(callables, served, strict, chosen == "process"))
        self._models[model_name] = _Bound(served, folder)
        if self.is_connected():
            try:
                self._load(model_name)
            except PyTritonModelConfigError:
                self._forget(model_name)
                raise

    def _forget(self, model_name: str) -> None:
        model = self._models.pop(model_name)
        bound.unregister(model.folder)
        shutil.rmtree(model.folder, ignore_errors=True)

    def unbind(self, model_name: str) -> None:
        """Unload a bound model and forget it (PyTriton has no way to)."""
        model = self._models.pop(model_name, None)
        if model is None:
            raise PyTritonInvalidOperationError(f"Model {model_name} is not bound")
        if model.loaded and self._server is not None and self._server.alive():
            assert self._server.server is not None
            self._server.call(self._server.server.unload_model(model_name))
        self._models[model_name] = model
        self._forget(model_name)

    def connect(self) -> None:
        """Load every bound model not loaded yet (the server starts first if it has not)."""
        with self._cv:
            if self._finished:
                raise PyTritonInvalidOperationError(
                    "this Triton was stopped (its workspace is cleaned): create a new one"
                )
            self._start()
            for name, model in self._models.items():
                if not model.loaded:
                    self._load(name)
            self._connected = True

    def run(self) -> None:
        self.connect()

    def serve(self, monitoring_period_s: float = MONITORING_PERIOD_S) -> None:
        """Serve until ``stop`` (another thread) or Ctrl+C."""
        self.connect()
        with self._cv:
            try:
                while self.is_alive():
                    self._cv.wait(timeout=monitoring_period_s)
            except KeyboardInterrupt:
                LOGGER.info("SIGINT received, exiting.")
        self.stop()

    def stop(self) -> bool:
        """Unload the models, stop the server, clean the workspace."""
        with self._cv:
            if self._stopped:
                return False
            self._stopped = True
            self._finished = True
            self._connected = False
            self._cv.notify_all()
        atexit.unregister(self.stop)
        if self._server is not None:
            self._server.stop()
            self._server = None
        for model in self._models.values():
            bound.unregister(model.folder)
            model.loaded = False
        self._workspace.clean()
        return True

    def is_alive(self) -> bool:
        return not self._stopped and self._server is not None and self._server.alive()

    def is_connected(self) -> bool:
        return self._connected

    def get_access_token(self) -> str | None:
        return self._security_config.access_token

    @property
    def ports(self) -> dict[str, int]:
        """tritium's: the ports the front-ends listen on (``http``, ``grpc``, ``metrics``),
        useful with port 0."""
        return dict(self._server.ports) if self._server is not None else {}

    def __enter__(self) -> Triton:
        self.connect()
        return self

    def __exit__(self, *_: Any) -> None:
        self.stop()

    # -- inside ------------------------------------------------------------------------------
    def _start(self) -> None:
        if self._server is not None:
            return
        if self._config.log_verbose is not None or self._config.log_file is not None:
            _install_logging(self._options)
        server = EmbeddedServer(self._options)
        server.start()
        self._server = server
        self._stopped = False
        atexit.register(self.stop)  # as PyTriton: the server stops when the program ends

    def _load(self, name: str) -> None:
        assert self._server is not None and self._server.server is not None
        try:
            self._server.call(self._server.server.load_model(name))
        except ServerError as exc:
            raise PyTritonModelConfigError(f"model {name} failed to load: {exc}") from None
        self._models[name].loaded = True


def _install_logging(options: ServerOptions) -> None:
    given = options.logging
    settings = LogSettings(
        given.file, (given.info, given.warning, given.error), given.verbose, given.format
    )
    try:
        settings.install()
    except OSError as exc:
        raise PyTritonBadParameterError(
            f"log_file: cannot open '{given.file}': {exc.strerror}"
        ) from None


def _validate_model_name(model_name: str) -> None:
    if not model_name:
        raise PyTritonValidationError("Model name cannot be empty")
    if not re.match(r"^[a-zA-Z0-9._-]+$", model_name):
        raise PyTritonValidationError(
            "Model name can only contain alphanumeric characters, dots, underscores and dashes"
        )


__all__ = [
    "Triton",
    "TritonConfig",
    "TritonLifecyclePolicy",
    "TritonSecurityConfig",
    "Workspace",
]
