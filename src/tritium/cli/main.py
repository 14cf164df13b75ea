"""``tritium serve``: Triton's command-line flags, names and defaults."""

from __future__ import annotations

import argparse
import asyncio
import logging
import re
import sys
from dataclasses import replace
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from ..access.policy import GRPC_HEADER_PREFIX, parse_restrictions
from ..extensions.cache import parse_cache_config
from .flags.cors import add_cors_flags, cors_options
from .flags.parser import add_table_flags, check_table_flags, group_help
from .flags.parser import bool_flag, non_negative_int, parse_bool
from .flags.serve import add_serve_flags, cache_config_values, serve_notices, serve_options
from ..frontends.grpc.metadata import compile_forward_pattern
from ..frontends.sockets import listen_host
from ..metrics.settings import MetricsConfigError, parse_metrics_config
from ..logs.settings import LOG_FORMATS, LogSettings
from ..options import DEFAULT_MAX_INPUT_SIZE, ServerOptions
from ..repository.layout import repository_text_problem
from ..tracing import TraceConfig
from ..tracing.flags import trace_config

log = logging.getLogger("tritium")

__all__ = ["build_parser", "main", "options_from_args"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tritium", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser(
        "serve",
        help="serve model repositories (Triton's flags)",
        usage="tritium serve --model-repository <path> [flags] (see docs/flags.md)",
    )
    serve.add_argument(
        "--model-repository",
        "--model-store",
        action="append",
        default=[],
        required=True,
        help="path of a model repository (repeatable)",
    )
    serve.add_argument("--id", default="triton", help="server identifier in server metadata")
    bool_flag(serve, "--allow-http", True, "serve HTTP/REST")
    serve.add_argument("--http-address", default="0.0.0.0")
    serve.add_argument("--http-port", type=int, default=8000)
    serve.add_argument("--http-max-input-size", type=int, default=DEFAULT_MAX_INPUT_SIZE)
    bool_flag(serve, "--allow-grpc", True, "serve gRPC")
    serve.add_argument("--grpc-address", default="0.0.0.0")
    serve.add_argument("--grpc-port", type=int, default=8001)
    _grpc_flags(serve)
    _grpc_transport_flags(serve)
    _stub_restart_flags(serve)
    _http_limit_flags(serve)
    add_cors_flags(serve)
    _python_env_flags(serve)
    _rate_limit_flags(serve)
    _metrics_flags(serve)
    bool_flag(serve, "--exit-on-error", True, "exit if any model fails to load at startup")
    bool_flag(serve, "--strict-readiness", True, "ready only when every model is ready")
    serve.add_argument(
        "--disable-auto-complete-config",
        action="store_true",
        help="do not complete model configurations from the model files",
    )
    serve.add_argument(
        "--strict-model-config",
        type=parse_bool,
        nargs="?",
        const=True,
        default=None,
        help="deprecated: same as --disable-auto-complete-config when true",
    )
    serve.add_argument("--exit-timeout-secs", type=float, default=30.0)
    serve.add_argument("--model-load-thread-count", type=int, default=4)
    _log_flags(serve)
    _access_log_flags(serve)
    bool_flag(serve, "--allow-client-shm", False, "let clients register shared-memory regions")
    serve.add_argument("--model-control-mode", choices=("none", "poll", "explicit"), default="none")
    serve.add_argument("--repository-poll-secs", type=float, default=15.0)
    serve.add_argument(
        "--load-model",
        action="append",
        default=[],
        help="explicit mode: a model to load at startup (repeatable; * = all)",
    )
    serve.add_argument(
        "--cache-config",
        action="append",
        default=[],
        help="e.g. local,size=1048576: the response cache and its size in bytes",
    )
    _access_flags(serve)
    _trace_flags(serve)
    serve.add_argument(
        "--ports-file",
        default="",
        help="tritium: write the bound ports as JSON to this file once serving",
    )
    add_serve_flags(serve)
    add_table_flags(serve)  # every other flag of Triton's: GPU-only, tuning, refused, not yet
    group_help(serve)
    return parser


def _grpc_flags(serve: argparse.ArgumentParser) -> None:
    defaults = ServerOptions()
    serve.add_argument(
        "--grpc-keepalive-time",
        type=int,
        default=defaults.grpc.keepalive_time_ms,
        help="ms between keepalive pings",
    )
    serve.add_argument(
        "--grpc-keepalive-timeout",
        type=int,
        default=defaults.grpc.keepalive_timeout_ms,
        help="ms to wait for a keepalive ping's acknowledgement",
    )
    bool_flag(
        serve,
        "--grpc-keepalive-permit-without-calls",
        False,
        "allow keepalive pings when no call is active",
    )
    serve.add_argument(
        "--grpc-http2-max-pings-without-data",
        type=int,
        default=defaults.grpc.http2_max_pings_without_data,
    )
    serve.add_argument(
        "--grpc-http2-min-recv-ping-interval-without-data",
        type=int,
        default=defaults.grpc.http2_min_recv_ping_interval_without_data_ms,
        help="ms",
    )
    serve.add_argument(
        "--grpc-http2-max-ping-strikes", type=int, default=defaults.grpc.http2_max_ping_strikes
    )
    serve.add_argument(
        "--grpc-max-concurrent-streams",
        type=int,
        default=0,
        help="HTTP/2 streams per connection (0: 1024, tritium's default)",
    )
    serve.add_argument(
        "--grpc-stream-inflight-limit",
        type=int,
        default=defaults.grpc.stream_inflight,
        help="tritium: requests in flight per ModelStreamInfer stream; more "
        "are not read until responses are written (back-pressure)",
    )


_COMPRESSION_LEVELS = ("none", "low", "medium", "high")


def _grpc_transport_flags(serve: argparse.ArgumentParser) -> None:
    """The gRPC transport (issue 12): TLS, compression, connection age, forwarded headers."""
    defaults = ServerOptions()
    bool_flag(serve, "--grpc-use-ssl", False, "serve gRPC over TLS")
    bool_flag(serve, "--grpc-use-ssl-mutual", False, "TLS with client certificates (implies SSL)")
    serve.add_argument("--grpc-server-cert", default="", help="PEM certificate chain file")
    serve.add_argument("--grpc-server-key", default="", help="PEM private key file")
    serve.add_argument("--grpc-root-cert", default="", help="PEM CA bundle for client certs")
    serve.add_argument(
        "--grpc-infer-response-compression-level",
        choices=_COMPRESSION_LEVELS,
        default=defaults.grpc.infer_response_compression_level,
        help="compress inference responses for clients that accept gzip/deflate",
    )
    bool_flag(serve, "--reuse-grpc-port", False, "SO_REUSEPORT on the gRPC socket")
    serve.add_argument(
        "--grpc-header-forward-pattern",
        default="",
        help="regex: request metadata whose name matches becomes an inference parameter",
    )
    serve.add_argument(
        "--grpc-max-connection-age",
        type=non_negative_int,
        default=defaults.grpc.max_connection_age_ms,
        help="ms a connection lives before GOAWAY (0: no limit)",
    )
    serve.add_argument(
        "--grpc-max-connection-age-grace",
        type=non_negative_int,
        default=defaults.grpc.max_connection_age_grace_ms,
        help="ms in-flight calls get after the age's GOAWAY (0: no limit)",
    )


def _grpc_transport_options(args: argparse.Namespace) -> dict[str, Any]:
    ssl = bool(args.grpc_use_ssl or args.grpc_use_ssl_mutual)
    if ssl and not (args.grpc_server_cert and args.grpc_server_key):
        raise SystemExit("error: --grpc-use-ssl needs --grpc-server-cert and --grpc-server-key")
    if args.grpc_use_ssl_mutual and not args.grpc_root_cert:
        raise SystemExit("error: --grpc-use-ssl-mutual needs --grpc-root-cert")
    if args.grpc_header_forward_pattern:
        try:
            compile_forward_pattern(args.grpc_header_forward_pattern)
        except re.error as exc:
            raise SystemExit(f"error: --grpc-header-forward-pattern: {exc}") from None
    return {
        "grpc_use_ssl": ssl,
        "grpc_use_ssl_mutual": bool(args.grpc_use_ssl_mutual),
        "grpc_server_cert": args.grpc_server_cert,
        "grpc_server_key": args.grpc_server_key,
        "grpc_root_cert": args.grpc_root_cert,
        "grpc_infer_response_compression_level": args.grpc_infer_response_compression_level,
        "reuse_grpc_port": bool(args.reuse_grpc_port),
        "grpc_header_forward_pattern": args.grpc_header_forward_pattern,
        "grpc_max_connection_age_ms": args.grpc_max_connection_age,
        "grpc_max_connection_age_grace_ms": args.grpc_max_connection_age_grace,
    }


def _stub_restart_flags(serve: argparse.ArgumentParser) -> None:
    defaults = ServerOptions()
    serve.add_argument(
        "--model-instance-max-restarts",
        type=non_negative_int,
        default=defaults.backends.instance_max_restarts,
        help="tritium: restart a crashed Python model instance (stub process) at most this "
        "many times within --model-instance-restart-window-secs, after which it stays "
        "UNAVAILABLE until the model is reloaded; 0: never restart",
    )
    serve.add_argument(
        "--model-instance-restart-window-secs",
        type=_positive_float,
        default=defaults.backends.instance_restart_window_secs,
        help="tritium: the window in which --model-instance-max-restarts counts crashes",
    )


def _rate_limit_flags(serve: argparse.ArgumentParser) -> None:
    serve.add_argument(
        "--rate-limit",
        type=_rate_limit_mode,
        default="off",
        help='"execution_count": an instance executes only when the resources its '
        "rate_limiter lists are free, waiting instances served by priority and execution "
        'count; "off" (the default): rate_limiter settings have no effect',
    )
    serve.add_argument(
        "--rate-limit-resource",
        action="append",
        type=_rate_limit_resource,
        default=[],
        metavar="<name>:<count>[:<device>]",
        help="how many of a resource exist (repeatable; without a device, on every device); "
        "by default the most any instance needs",
    )


def _rate_limit_mode(text: str) -> str:
    mode = text.lower()
    if mode not in ("execution_count", "off"):
        raise argparse.ArgumentTypeError("invalid argument for --rate-limit")
    return mode


def _rate_limit_resource(text: str) -> tuple[str, int, int]:
    """Triton's ParseRateLimiterResourceOption: ``name:count`` or ``name:count:device``."""
    parts = text.split(":")
    try:
        if len(parts) in (2, 3) and parts[0]:
            count, device = int(parts[1]), int(parts[2]) if len(parts) == 3 else -1
            if count >= 0 and device >= -1:
                return parts[0], count, device
    except ValueError:
        pass
    raise argparse.ArgumentTypeError(
        "--rate-limit-resource option format is '<resource_name>:<count>:<device>' or "
        f"'<resource_name>:<count>'. Got {text}"
    )


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (0 < value < float("inf")):
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got '{text}'")
    return value


def _python_env_flags(serve: argparse.ArgumentParser) -> None:
    """tritium's flag for Python execution environments (EXECUTION_ENV_PATH)."""
    serve.add_argument(
        "--python-env-cache-dir",
        default="",
        help="tritium: where EXECUTION_ENV_PATH archives are unpacked, once per distinct "
        "content; created 0700, must be owned by the server's user and not writable by "
        "others (default: <system temp>/tritium-python-envs-<uid>)",
    )


def _http_limit_flags(serve: argparse.ArgumentParser) -> None:
    """tritium's own HTTP transport flags (Triton has none): bounds, timeouts, TLS."""
    d = ServerOptions()
    for name, kind, default, help_text in (
        ("--http-max-header-size", int, d.http.max_header_size, "bytes of request headers (431)"),
        ("--http-max-url-length", int, d.http.max_url_length, "bytes of a request URL (414)"),
        ("--http-max-headers", int, d.http.max_headers, "header lines per request (431)"),
        (
            "--http-max-pipelined",
            int,
            d.http.max_pipelined,
            "requests held per connection; more are not read until one is answered",
        ),
        (
            "--http-header-timeout-secs",
            float,
            d.http.header_timeout_secs,
            "seconds to receive a request's headers (408)",
        ),
        (
            "--http-body-timeout-secs",
            float,
            d.http.body_timeout_secs,
            "longest pause in seconds while a request body arrives (408)",
        ),
        (
            "--http-keepalive-timeout-secs",
            float,
            d.http.keepalive_timeout_secs,
            "seconds an idle connection stays open",
        ),
    ):
        serve.add_argument(name, type=_positive(kind), default=default, help=help_text)
    serve.add_argument("--http-ssl-cert", default="", help="PEM certificate: serve HTTPS")
    serve.add_argument("--http-ssl-key", default="", help="PEM private key of --http-ssl-cert")


def _positive(kind: type) -> Any:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got '{text}'") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"expected a positive number, got '{text}'")
        return value

    return parse


def _access_flags(serve: argparse.ArgumentParser) -> None:
    serve.add_argument(
        "--http-restricted-api",
        action="append",
        default=[],
        metavar="<api>[,<api>...]:<key>=<value>",
        help="these HTTP API groups need header <key> with <value> (repeatable; groups: "
        "health, metadata, inference, shared-memory, model-config, model-repository, "
        "statistics, trace, logging)",
    )
    serve.add_argument(
        "--grpc-restricted-protocol",
        action="append",
        default=[],
        metavar="<protocol>[,<protocol>...]:<key>=<value>",
        help="these gRPC protocol groups need metadata triton-grpc-protocol-<key> with <value> "
        "(repeatable; the groups of --http-restricted-api)",
    )
    serve.add_argument(
        "--auth-token-file",
        default="",
        help="tritium: require 'Authorization: Bearer <token>' on HTTP and gRPC; one "
        "'<token> [<groups>|*] [<name>]' per line, '#' comments; health stays open",
    )
    serve.add_argument(
        "--audit-log",
        default="",
        help="tritium: append control-plane actions and refused requests to FILE (JSON lines)",
    )
    serve.add_argument(
        "--max-inflight-per-client",
        type=int,
        default=0,
        help="tritium: inference requests in flight per client address (0: unbounded); "
        "more are refused (HTTP 429, gRPC RESOURCE_EXHAUSTED)",
    )


def _access_options(args: argparse.Namespace) -> dict[str, object]:
    try:
        http = parse_restrictions(args.http_restricted_api, "http-restricted-api", "api")
        grpc = parse_restrictions(
            args.grpc_restricted_protocol,
            "grpc-restricted-protocol",
            "protocol",
            GRPC_HEADER_PREFIX,
        )
    except ValueError as exc:
        raise SystemExit(f"error: {exc}") from None
    if args.max_inflight_per_client < 0:
        raise SystemExit("error: --max-inflight-per-client must be 0 (unbounded) or more")
    return {
        "http_restrictions": http,
        "grpc_restrictions": grpc,
        "auth_token_file": args.auth_token_file,
        "audit_log": args.audit_log,
        "max_inflight_per_client": args.max_inflight_per_client,
    }


def options_from_args(args: argparse.Namespace) -> ServerOptions:
    check_table_flags(args)
    _check_addresses(args)
    auto_complete = not args.disable_auto_complete_config
    if args.strict_model_config is not None:
        auto_complete = auto_complete and not args.strict_model_config
    return _nest(
        model_repositories=_repositories(args.model_repository),
        server_id=args.id,
        allow_http=args.allow_http,
        http_address=args.http_address,
        http_port=args.http_port,
        http_max_input_size=args.http_max_input_size,
        allow_grpc=args.allow_grpc,
        grpc_stream_inflight=max(1, args.grpc_stream_inflight_limit),
        grpc_keepalive_time_ms=args.grpc_keepalive_time,
        grpc_keepalive_timeout_ms=args.grpc_keepalive_timeout,
        grpc_keepalive_permit_without_calls=args.grpc_keepalive_permit_without_calls,
        grpc_http2_max_pings_without_data=args.grpc_http2_max_pings_without_data,
        grpc_http2_min_recv_ping_interval_without_data_ms=(
            args.grpc_http2_min_recv_ping_interval_without_data
        ),
        grpc_http2_max_ping_strikes=args.grpc_http2_max_ping_strikes,
        grpc_max_concurrent_streams=args.grpc_max_concurrent_streams,
        grpc_address=args.grpc_address,
        grpc_port=args.grpc_port,
        exit_on_error=args.exit_on_error,
        strict_readiness=args.strict_readiness,
        auto_complete_config=auto_complete,
        exit_timeout_secs=args.exit_timeout_secs,
        model_load_thread_count=args.model_load_thread_count,
        **_log_options(args),
        **_access_log_options(args),
        cache_size=_cache_size(cache_config_values(args)),
        allow_client_shm=args.allow_client_shm,
        model_control_mode=args.model_control_mode,
        repository_poll_secs=max(args.repository_poll_secs, 0.1),
        load_models=tuple(args.load_model),
        model_instance_max_restarts=args.model_instance_max_restarts,
        model_instance_restart_window_secs=args.model_instance_restart_window_secs,
        python_env_cache_dir=args.python_env_cache_dir,
        **_http_limit_options(args),
        **cors_options(args),
        **_metrics_options(args),
        **_grpc_transport_options(args),
        rate_limit=args.rate_limit,
        rate_limit_resources=tuple(args.rate_limit_resource),
        **_access_options(args),
        **serve_options(args),
        trace=_trace_options(args),
        ports_file=args.ports_file,
    )


_PATHS = {
    "model_repositories": "repository.paths",
    "allow_http": "http.enabled",
    "http_address": "http.address",
    "http_port": "http.port",
    "http_max_input_size": "http.max_input_size",
    "allow_grpc": "grpc.enabled",
    "grpc_stream_inflight": "grpc.stream_inflight",
    "grpc_keepalive_time_ms": "grpc.keepalive_time_ms",
    "grpc_keepalive_timeout_ms": "grpc.keepalive_timeout_ms",
    "grpc_keepalive_permit_without_calls": "grpc.keepalive_permit_without_calls",
    "grpc_http2_max_pings_without_data": "grpc.http2_max_pings_without_data",
    "grpc_http2_min_recv_ping_interval_without_data_ms": (
        "grpc.http2_min_recv_ping_interval_without_data_ms"
    ),
    "grpc_http2_max_ping_strikes": "grpc.http2_max_ping_strikes",
    "grpc_max_concurrent_streams": "grpc.max_concurrent_streams",
    "grpc_address": "grpc.address",
    "grpc_port": "grpc.port",
    "allow_metrics": "metrics.enabled",
    "metrics_address": "metrics.address",
    "metrics_port": "metrics.port",
    "auto_complete_config": "repository.auto_complete_config",
    "model_load_thread_count": "repository.load_thread_count",
    "log_verbose": "logging.verbose",
    "model_control_mode": "repository.control_mode",
    "repository_poll_secs": "repository.poll_secs",
    "load_models": "repository.load_models",
    "cache_size": "response_cache_size",
    "metrics_interval_ms": "metrics.interval_ms",
    "model_instance_max_restarts": "backends.instance_max_restarts",
    "model_instance_restart_window_secs": "backends.instance_restart_window_secs",
    "http_max_header_size": "http.max_header_size",
    "http_max_url_length": "http.max_url_length",
    "http_max_headers": "http.max_headers",
    "http_max_pipelined": "http.max_pipelined",
    "http_header_timeout_secs": "http.header_timeout_secs",
    "http_body_timeout_secs": "http.body_timeout_secs",
    "http_keepalive_timeout_secs": "http.keepalive_timeout_secs",
    "http_ssl_cert": "http.ssl_cert",
    "http_ssl_key": "http.ssl_key",
    "http_restrictions": "access.http_restrictions",
    "grpc_restrictions": "access.grpc_restrictions",
    "auth_token_file": "access.auth_token_file",
    "audit_log": "access.audit_log",
    "max_inflight_per_client": "access.max_inflight_per_client",
    "grpc_use_ssl": "grpc.use_ssl",
    "grpc_use_ssl_mutual": "grpc.use_ssl_mutual",
    "grpc_server_cert": "grpc.server_cert",
    "grpc_server_key": "grpc.server_key",
    "grpc_root_cert": "grpc.root_cert",
    "grpc_infer_response_compression_level": "grpc.infer_response_compression_level",
    "reuse_grpc_port": "grpc.reuse_port",
    "grpc_header_forward_pattern": "grpc.header_forward_pattern",
    "grpc_max_connection_age_ms": "grpc.max_connection_age_ms",
    "grpc_max_connection_age_grace_ms": "grpc.max_connection_age_grace_ms",
    "grpc_max_send_message_size": "grpc.max_send_message_size",
    "python_env_cache_dir": "backends.python_env_cache_dir",
    "rate_limit": "rate_limit.mode",
    "rate_limit_resources": "rate_limit.resources",
    "log_info": "logging.info",
    "log_warning": "logging.warning",
    "log_error": "logging.error",
    "metrics_config": "metrics.settings",
    "allow_cpu_metrics": "metrics.allow_cpu",
    "log_format": "logging.format",
    "log_file": "logging.file",
    "model_config_name": "repository.config_name",
    "model_load_retry_count": "repository.load_retry_count",
    "reuse_http_port": "http.reuse_port",
    "http_header_forward_pattern": "http.header_forward_pattern",
    "onnxruntime_default_max_batch_size": "backends.onnxruntime_default_max_batch_size",
    "trace": "tracing",
    "model_namespacing": "repository.namespacing",
    "http_cors_allow_origins": "http.cors.allow_origins",
    "http_cors_allow_headers": "http.cors.allow_headers",
    "http_cors_max_age_secs": "http.cors.max_age_secs",
    "http_cors_allow_credentials": "http.cors.allow_credentials",
    "access_log_file": "logging.access_log_file",
    "access_log_max_bytes": "logging.access_log_max_bytes",
    "access_log_backup_count": "logging.access_log_backup_count",
}


def _nest(**flat: Any) -> ServerOptions:
    """The grouped ServerOptions of these flat fields."""
    nested: dict[str, Any] = {}
    for name, value in flat.items():
        nested[_PATHS.get(name, name)] = value
    options: ServerOptions = _assemble(ServerOptions(), nested)
    return options


def _assemble(base: Any, fields: dict[str, Any]) -> Any:
    groups: dict[str, dict[str, Any]] = {}
    plain: dict[str, Any] = {}
    for path, value in fields.items():
        head, _, rest = path.partition(".")
        if rest:
            groups.setdefault(head, {})[rest] = value
        else:
            plain[head] = value
    for head, sub in groups.items():
        plain[head] = _assemble(getattr(base, head), sub)
    return replace(base, **plain)


def _check_addresses(args: argparse.Namespace) -> None:
    """Triton's address syntax (``ipv6:[::1]``, ``[::1]``, a host): a value of a form tritium
    cannot bind stops the start here."""
    for flag, value in (
        ("--http-address", args.http_address),
        ("--grpc-address", args.grpc_address),
        ("--metrics-address", args.metrics_address),
    ):
        try:
            listen_host(value)
        except ValueError as exc:
            raise SystemExit(f"error: {flag} {value}: {exc}") from None


def _repositories(values: list[str]) -> tuple[Path, ...]:
    """The --model-repository paths; an empty one or a cloud URL stops the start here (the
    directories themselves are checked when the server is created)."""
    for text in values:
        problem = repository_text_problem(text)
        if problem:
            shown = f"--model-repository {text}" if text else "--model-repository"
            raise SystemExit(f"error: {shown}: {problem}")
    return tuple(Path(text) for text in values)


def _metrics_flags(serve: argparse.ArgumentParser) -> None:
    """Triton's metrics flags (its "Metrics" group)."""
    bool_flag(serve, "--allow-metrics", True, "serve Prometheus metrics")
    bool_flag(
        serve,
        "--allow-cpu-metrics",
        True,
        "serve the nv_cpu_* families (ignored unless --allow-metrics is true)",
    )
    serve.add_argument(
        "--metrics-address",
        default="",
        help="address the metrics server binds to (default: --http-address)",
    )
    serve.add_argument("--metrics-port", type=int, default=8002)
    serve.add_argument(
        "--metrics-interval-ms",
        type=_positive_ms,
        default=2000,
        help="the CPU families are sampled at most once per interval (ms)",
    )
    serve.add_argument(
        "--metrics-config",
        action="append",
        default=[],
        metavar="<setting>=<value>",
        help="counter_latencies, summary_latencies, histogram_latencies (true|false) or "
        "summary_quantiles=<q>:<error>,... (repeatable)",
    )


def _metrics_options(args: argparse.Namespace) -> dict[str, Any]:
    try:
        settings = parse_metrics_config(args.metrics_config)
    except MetricsConfigError as exc:
        raise SystemExit(f"error: {exc}") from None
    return {
        "allow_metrics": args.allow_metrics,
        "metrics_address": args.metrics_address,
        "metrics_port": args.metrics_port,
        "metrics_interval_ms": args.metrics_interval_ms,
        "metrics_config": settings,
        "allow_cpu_metrics": bool(args.allow_cpu_metrics and args.allow_metrics),
    }


def _positive_ms(text: str) -> int:
    """Triton documents --metrics-interval-ms as a float and keeps its integer part."""
    try:
        return _positive_int(str(int(float(text))))
    except ValueError:
        return _positive_int(text)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer > 0, got '{text}'")
    return value


def _trace_flags(serve: argparse.ArgumentParser) -> None:
    serve.add_argument(
        "--trace-config",
        action="append",
        default=[],
        metavar="[<mode>,]<setting>=<value>",
        help="a trace setting (repeatable): level=OFF|TIMESTAMPS|TENSORS, rate=N, count=N, "
        "mode=triton|opentelemetry; triton,file=PATH, triton,log-frequency=N; "
        "opentelemetry,url=URL, opentelemetry,resource=KEY=VALUE, opentelemetry,bsp_*=N",
    )
    serve.add_argument("--trace-file", help="deprecated: --trace-config triton,file=PATH")
    serve.add_argument(
        "--trace-level",
        action="append",
        default=[],
        help="deprecated: --trace-config level=OFF|TIMESTAMPS|TENSORS (repeatable)",
    )
    serve.add_argument("--trace-rate", type=int, help="deprecated: --trace-config rate=N")
    serve.add_argument("--trace-count", type=int, help="deprecated: --trace-config count=N")
    serve.add_argument(
        "--trace-log-frequency",
        type=int,
        help="deprecated: --trace-config triton,log-frequency=N",
    )


def _trace_options(args: argparse.Namespace) -> TraceConfig:
    try:
        return trace_config(
            args.trace_config,
            {
                "level": args.trace_level,
                "file": args.trace_file,
                "rate": args.trace_rate,
                "count": args.trace_count,
                "log-frequency": args.trace_log_frequency,
            },
        )
    except ValueError as exc:
        raise SystemExit(f"error: {exc}") from None


def _http_limit_options(args: argparse.Namespace) -> dict[str, Any]:
    if bool(args.http_ssl_cert) != bool(args.http_ssl_key):
        raise SystemExit("error: --http-ssl-cert and --http-ssl-key go together")
    return {
        "http_max_header_size": args.http_max_header_size,
        "http_max_url_length": args.http_max_url_length,
        "http_max_headers": args.http_max_headers,
        "http_max_pipelined": args.http_max_pipelined,
        "http_header_timeout_secs": args.http_header_timeout_secs,
        "http_body_timeout_secs": args.http_body_timeout_secs,
        "http_keepalive_timeout_secs": args.http_keepalive_timeout_secs,
        "http_ssl_cert": args.http_ssl_cert,
        "http_ssl_key": args.http_ssl_key,
    }


def _cache_size(values: list[str]) -> int:
    try:
        return parse_cache_config(values)
    except ValueError as exc:
        raise SystemExit(f"error: --cache-config: {exc}") from None


def _log_flags(serve: argparse.ArgumentParser) -> None:
    """Triton's logging flags; they govern the server's records and Python models'
    pb_utils.Logger output alike, and the logging extension changes them at run time."""
    serve.add_argument(
        "--log-verbose",
        type=int,
        default=0,
        help="verbose logging level; >= 1 shows verbose records (pb_utils.Logger.log_verbose)",
    )
    bool_flag(serve, "--log-info", True, "log INFO-level records")
    bool_flag(serve, "--log-warning", True, "log WARNING-level records")
    bool_flag(serve, "--log-error", True, "log ERROR-level records")
    serve.add_argument(
        "--log-format",
        type=_log_format,
        default="default",
        help='"default": records as "I1130 14:02:03.123456 <pid> <file>:<line>] <message>"; '
        '"ISO8601": as "2024-11-30T14:02:03Z I <pid> <file>:<line>] <message>"; "json" '
        "(tritium's own): one JSON object per line with time, level, pid, file, line, model "
        "and message",
    )
    serve.add_argument(
        "--log-file",
        default="",
        help="append every log record to this file instead of the console (stdout for INFO, "
        "stderr for warnings and errors)",
    )


def _access_log_flags(serve: argparse.ArgumentParser) -> None:
    """tritium's per-request access log (docs/logging.md)."""
    defaults = ServerOptions()
    serve.add_argument(
        "--access-log-file",
        default="",
        help="tritium: append one JSON line per inference request (HTTP and gRPC) to this "
        "file, written off the request path; off by default",
    )
    serve.add_argument(
        "--access-log-max-bytes",
        type=non_negative_int,
        default=defaults.logging.access_log_max_bytes,
        help="tritium: rotate the access log before it would grow past this many bytes "
        "(0: never rotate)",
    )
    serve.add_argument(
        "--access-log-backup-count",
        type=non_negative_int,
        default=defaults.logging.access_log_backup_count,
        help="tritium: rotated access logs kept as FILE.1 ... FILE.<n> (0: the file starts "
        "over at the bound)",
    )


def _access_log_options(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "access_log_file": args.access_log_file,
        "access_log_max_bytes": args.access_log_max_bytes,
        "access_log_backup_count": args.access_log_backup_count,
    }


def _log_format(text: str) -> str:
    if text not in LOG_FORMATS:
        raise argparse.ArgumentTypeError("invalid argument for --log-format")
    return text


def _log_options(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "log_verbose": args.log_verbose,
        "log_info": args.log_info,
        "log_warning": args.log_warning,
        "log_error": args.log_error,
        "log_format": args.log_format,
        "log_file": args.log_file,
    }


def _setup_logging(options: ServerOptions) -> None:
    """Install the process's log settings; a log file that cannot be opened stops the server
    here, before anything else happens (Triton would fall back to the console silently)."""
    log = options.logging
    settings = LogSettings(log.file, (log.info, log.warning, log.error), log.verbose, log.format)
    try:
        settings.install()
    except OSError as exc:
        raise SystemExit(
            f"error: --log-file: failed to open log file '{log.file}': {exc.strerror}"
        ) from None


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    options = options_from_args(args)
    _setup_logging(options)
    for notice in check_table_flags(args) + serve_notices(args):
        log.log(notice.level, "%s", notice.message)
    from ..runtime import run  # imported late: argument errors stay fast

    try:
        import uvloop

        runner: Callable[[Coroutine[Any, Any, int]], int] = uvloop.run
    except ImportError:  # pragma: no cover - uvloop is a dependency
        runner = asyncio.run
    return runner(run(options))


if __name__ == "__main__":
    sys.exit(main())
