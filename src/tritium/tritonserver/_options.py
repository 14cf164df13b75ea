"""``Options``: Triton's in-process server options under Triton's names, and how each
becomes tritium's ``ServerOptions``. What tritium cannot honour (GPU memory pools, backend and
repository-agent directories, host policies...) is refused with a reason unless it is left
at Triton's default: nothing is accepted and ignored."""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from ..options import (
    LogOptions,
    MetricsOptions,
    RateLimitOptions,
    RepositoryOptions,
    ServerOptions,
)
from ._enums import CONTROL_MODES, InstanceGroupKind, LogFormat, ModelControlMode, RateLimitMode
from ._errors import InvalidArgumentError, UnsupportedError


@dataclass(slots=True)
class RateLimiterResource:
    name: str
    count: int
    device: int


@dataclass(slots=True)
class ModelLoadDeviceLimit:
    kind: InstanceGroupKind
    device: int
    fraction: float


@dataclass(slots=True)
class Options:
    """Server options (Triton's ``tritonserver.Options``: same names, types and defaults)."""

    model_repository: str | list[str] = field(default_factory=list)
    server_id: str = "triton"
    model_control_mode: ModelControlMode = ModelControlMode.NONE
    startup_models: list[str] = field(default_factory=list)
    strict_model_config: bool = False
    rate_limiter_mode: RateLimitMode = RateLimitMode.OFF
    rate_limiter_resources: list[RateLimiterResource] = field(default_factory=list)
    pinned_memory_pool_size: int = 1 << 28
    cuda_memory_pool_sizes: dict[int, int] = field(default_factory=dict)
    cache_config: dict[str, dict[str, Any]] = field(default_factory=dict)
    cache_directory: str = "/opt/tritonserver/caches"
    min_supported_compute_capability: float = 6.0
    exit_on_error: bool = True
    strict_readiness: bool = True
    exit_timeout: int = 30
    buffer_manager_thread_count: int = 0
    model_load_thread_count: int = 4
    model_load_retry_count: int = 0
    model_namespacing: bool = False
    enable_peer_access: bool = True
    log_file: str | None = None
    log_info: bool = False
    log_warn: bool = False
    log_error: bool = False
    log_format: LogFormat = LogFormat.DEFAULT
    log_verbose: int = 0
    metrics: bool = True
    gpu_metrics: bool = True
    cpu_metrics: bool = True
    metrics_interval: int = 2000
    backend_directory: str = "/opt/tritonserver/backends"
    repo_agent_directory: str = "/opt/tritonserver/repoagents"
    model_load_device_limits: list[ModelLoadDeviceLimit] = field(default_factory=list)
    backend_configuration: dict[str, dict[str, str]] = field(default_factory=dict)
    host_policies: dict[str, dict[str, str]] = field(default_factory=dict)
    metrics_configuration: dict[str, dict[str, str]] = field(default_factory=dict)


# Options tritium has no use for: each may only keep Triton's default (why, for the error).
_FIXED: dict[str, str] = {
    "pinned_memory_pool_size": "tritium has no pinned (page-locked) memory pool",
    "cuda_memory_pool_sizes": "tritium has no CUDA memory",
    "cache_directory": "tritium's response cache is built in (cache_config 'local')",
    "min_supported_compute_capability": "tritium uses no GPU",
    "buffer_manager_thread_count": "tritium has no buffer manager threads",
    "enable_peer_access": "tritium uses no GPU",
    "backend_directory": "tritium's backends are built in",
    "repo_agent_directory": "tritium has no repository agents",
    "model_load_device_limits": "tritium loads no model on a GPU",
    "backend_configuration": "the in-process API takes no backend configuration yet",
    "host_policies": "tritium has no host policies",
    "metrics_configuration": "the in-process API takes no metrics configuration yet",
}
_DEFAULTS = Options()
_TYPES: dict[str, tuple[type, ...]] = {
    "server_id": (str,),
    "exit_on_error": (bool,),
    "strict_model_config": (bool,),
    "strict_readiness": (bool,),
    "model_namespacing": (bool,),
    "log_info": (bool,),
    "log_warn": (bool,),
    "log_error": (bool,),
    "metrics": (bool,),
    "gpu_metrics": (bool,),
    "cpu_metrics": (bool,),
    "exit_timeout": (int, float),
    "model_load_thread_count": (int,),
    "model_load_retry_count": (int,),
    "log_verbose": (int,),
    "metrics_interval": (int,),
}


def server_options(options: Options) -> ServerOptions:
    """tritium's options for Triton's; raises TypeError for a value of the wrong type (as
    Triton's bindings do), InvalidArgumentError or UnsupportedError for one refused."""
    _check(options)
    base = ServerOptions()
    return replace(
        base,
        server_id=options.server_id,
        exit_on_error=options.exit_on_error,
        strict_readiness=options.strict_readiness,
        exit_timeout_secs=float(options.exit_timeout),
        response_cache_size=_cache_size(options.cache_config),
        repository=_repository(options),
        logging=_logging(options),
        metrics=MetricsOptions(
            enabled=options.metrics,
            interval_ms=options.metrics_interval,
            allow_cpu=options.cpu_metrics,
        ),
        rate_limit=_rate_limit(options),
    )


def _check(options: Options) -> None:
    for name, kinds in _TYPES.items():
        value = getattr(options, name)
        if not isinstance(value, kinds) or (bool not in kinds and isinstance(value, bool)):
            raise TypeError(f"Options.{name}: expected {kinds[0].__name__}, got {value!r}")
    for spec in fields(Options):
        reason = _FIXED.get(spec.name)
        if reason is not None and getattr(options, spec.name) != getattr(_DEFAULTS, spec.name):
            raise UnsupportedError(
                f"Options.{spec.name}={getattr(options, spec.name)!r} is not supported: {reason}"
            )


def _paths(value: Any) -> tuple[Path, ...]:
    if value is None:
        raise InvalidArgumentError("Model repository must be specified.")
    given = value if isinstance(value, list | tuple) else [value]
    for path in given:
        if not isinstance(path, str | Path):
            raise TypeError(f"Options.model_repository: expected str, got {path!r}")
    if not given:
        raise InvalidArgumentError("Model repository must be specified.")
    return tuple(Path(p) for p in given)


def _repository(options: Options) -> RepositoryOptions:
    mode = CONTROL_MODES.get(ModelControlMode(options.model_control_mode))
    if mode is None:
        raise InvalidArgumentError(f"invalid model_control_mode {options.model_control_mode}")
    if options.startup_models and mode != "explicit":
        raise InvalidArgumentError(
            "startup_models is only valid with model_control_mode ModelControlMode.EXPLICIT"
        )
    return replace(
        RepositoryOptions(),
        paths=_paths(options.model_repository),
        control_mode=mode,
        load_models=tuple(options.startup_models),
        auto_complete_config=not options.strict_model_config,
        load_thread_count=options.model_load_thread_count,
        load_retry_count=options.model_load_retry_count,
        namespacing=options.model_namespacing,
    )


def _logging(options: Options) -> LogOptions:
    """Triton's cascade: verbose implies info, info warnings, warnings errors."""
    info = options.log_info or options.log_verbose > 0
    warning = options.log_warn or info
    error = options.log_error or warning
    formats = {LogFormat.DEFAULT: "default", LogFormat.ISO8601: "ISO8601"}
    return replace(
        LogOptions(),
        verbose=options.log_verbose,
        info=info,
        warning=warning,
        error=error,
        format=formats[LogFormat(options.log_format)],
        file=options.log_file or "",
    )


def _rate_limit(options: Options) -> RateLimitOptions:
    if RateLimitMode(options.rate_limiter_mode) is RateLimitMode.OFF:
        if options.rate_limiter_resources:
            raise InvalidArgumentError("rate_limiter_resources need RateLimitMode.EXEC_COUNT")
        return RateLimitOptions()
    resources = tuple((r.name, int(r.count), int(r.device)) for r in options.rate_limiter_resources)
    return RateLimitOptions("execution_count", resources)


def _cache_size(config: dict[str, dict[str, Any]]) -> int:
    """``cache_config``: tritium's built-in local cache (``{"local": {"size": bytes}}``)."""
    if not config:
        return 0
    if set(config) != {"local"} or set(config["local"]) - {"size"}:
        raise UnsupportedError(
            f"cache_config {config!r} is not supported: the in-process API takes "
            "{'local': {'size': <bytes>}}"
        )
    return int(config["local"].get("size", 0))
