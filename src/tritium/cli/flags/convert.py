"""Flag values → ServerOptions fields, where a value is more than copied (``table.py`` names
these as a flag's ``to``): checks that need the whole value list or another flag
(``SystemExit`` with the message), and the flags read together (``Combine``: TLS pairs, CORS,
tracing, the response cache, the deprecated aliases). Also the start-up notices of the
deprecated flags and ``--backend-config``."""

from __future__ import annotations

import argparse
import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...access.policy import GRPC_HEADER_PREFIX, Restriction, parse_restrictions
from ...extensions.cache import parse_cache_config
from ...frontends.grpc.metadata import compile_forward_pattern
from ...frontends.http.cors import DEFAULT_MAX_AGE_SECS, CorsPolicy
from ...frontends.sockets import listen_host
from ...metrics.settings import MetricsConfigError, MetricsSettings, parse_metrics_config
from ...repository.layout import repository_text_problem
from ...tracing.flags import trace_config
from .backend_config import parse_backend_config
from .spec import Combine, Notice

Check = Callable[[Any], Any]


def repositories(values: list[str]) -> tuple[Path, ...]:
    """The --model-repository paths; an empty one or a cloud URL stops the start here (the
    directories themselves are checked when the server is created)."""
    for text in values:
        problem = repository_text_problem(text)
        if problem:
            shown = f"--model-repository {text}" if text else "--model-repository"
            raise SystemExit(f"error: {shown}: {problem}")
    return tuple(Path(text) for text in values)


def address(option: str) -> Check:
    """Triton's address syntax (``ipv6:[::1]``, ``[::1]``, a host): a value of a form tritium
    cannot bind stops the start here."""

    def check(value: str) -> str:
        try:
            listen_host(value)
        except ValueError as exc:
            raise SystemExit(f"error: {option} {value}: {exc}") from None
        return value

    return check


def forward_pattern(option: str) -> Check:
    def check(pattern: str) -> str:
        if pattern:
            try:
                compile_forward_pattern(pattern)
            except re.error as exc:
                raise SystemExit(f"error: {option}: {exc}") from None
        return pattern

    return check


def restrictions(option: str, item: str, prefix: str = "") -> Check:
    """``--http-restricted-api`` / ``--grpc-restricted-protocol`` values."""

    def convert(values: list[str]) -> tuple[Restriction, ...]:
        try:
            return parse_restrictions(values, option, item, prefix)
        except ValueError as exc:
            raise SystemExit(f"error: {exc}") from None

    return convert


HTTP_RESTRICTIONS: Check = restrictions("http-restricted-api", "api")
GRPC_RESTRICTIONS: Check = restrictions("grpc-restricted-protocol", "protocol", GRPC_HEADER_PREFIX)


def inflight_per_client(value: int) -> int:
    if value < 0:
        raise SystemExit("error: --max-inflight-per-client must be 0 (unbounded) or more")
    return value


def metrics_settings(values: list[str]) -> MetricsSettings:
    try:
        return parse_metrics_config(values)
    except MetricsConfigError as exc:
        raise SystemExit(f"error: {exc}") from None


def backend_batch_size(values: list[str]) -> int:
    try:
        backends, _ = parse_backend_config(values)
    except ValueError as exc:
        raise SystemExit(f"error: --backend-config: {exc}") from None
    return backends.onnxruntime_max_batch_size


def _http_tls(args: argparse.Namespace) -> dict[str, Any]:
    if bool(args.http_ssl_cert) != bool(args.http_ssl_key):
        raise SystemExit("error: --http-ssl-cert and --http-ssl-key go together")
    return {"http.ssl_cert": args.http_ssl_cert, "http.ssl_key": args.http_ssl_key}


def _grpc_tls(args: argparse.Namespace) -> dict[str, Any]:
    ssl = bool(args.grpc_use_ssl or args.grpc_use_ssl_mutual)
    if ssl and not (args.grpc_server_cert and args.grpc_server_key):
        raise SystemExit("error: --grpc-use-ssl needs --grpc-server-cert and --grpc-server-key")
    if args.grpc_use_ssl_mutual and not args.grpc_root_cert:
        raise SystemExit("error: --grpc-use-ssl-mutual needs --grpc-root-cert")
    return {
        "grpc.use_ssl": ssl,
        "grpc.use_ssl_mutual": bool(args.grpc_use_ssl_mutual),
        "grpc.server_cert": args.grpc_server_cert,
        "grpc.server_key": args.grpc_server_key,
        "grpc.root_cert": args.grpc_root_cert,
    }


def _cors(args: argparse.Namespace) -> dict[str, Any]:
    """The ``--http-cors-*`` flags, checked together; a flag given without an origin would do
    nothing: refused."""
    origins = tuple(dict.fromkeys(args.http_cors_allow_origin))
    if not origins:
        _refuse_cors_without_origin(args)
        return {}
    headers = tuple(args.http_cors_allow_header)
    max_age = args.http_cors_max_age_secs
    max_age = DEFAULT_MAX_AGE_SECS if max_age is None else max_age
    try:
        CorsPolicy(origins, headers, max_age, args.http_cors_allow_credentials)
    except ValueError as exc:
        raise SystemExit(f"error: --http-cors-*: {exc}") from None
    return {
        "http.cors.allow_origins": origins,
        "http.cors.allow_headers": headers,
        "http.cors.max_age_secs": max_age,
        "http.cors.allow_credentials": args.http_cors_allow_credentials,
    }


def _refuse_cors_without_origin(args: argparse.Namespace) -> None:
    given = [
        name
        for name, used in (
            ("--http-cors-allow-header", bool(args.http_cors_allow_header)),
            ("--http-cors-max-age-secs", args.http_cors_max_age_secs is not None),
            ("--http-cors-allow-credentials", args.http_cors_allow_credentials),
        )
        if used
    ]
    if given:
        raise SystemExit(
            f"error: {', '.join(given)} needs --http-cors-allow-origin (CORS is off without it)"
        )


def _auto_complete(args: argparse.Namespace) -> dict[str, Any]:
    """``--disable-auto-complete-config``, or the deprecated ``--strict-model-config=true``."""
    auto_complete = not args.disable_auto_complete_config
    if args.strict_model_config is not None:
        auto_complete = auto_complete and not args.strict_model_config
    return {"repository.auto_complete_config": auto_complete}


def _metrics_served(args: argparse.Namespace) -> dict[str, Any]:
    """As Triton: ``--allow-cpu-metrics`` means nothing with ``--allow-metrics=false``."""
    return {
        "metrics.enabled": args.allow_metrics,
        "metrics.allow_cpu": bool(args.allow_cpu_metrics and args.allow_metrics),
    }


def _openai(args: argparse.Namespace) -> dict[str, Any]:
    """``--openai`` and ``--openai-port`` together: a port for an API that is off would do
    nothing (refused)."""
    port = args.openai_port
    if port is not None and not args.openai:
        raise SystemExit("error: --openai-port needs --openai=true (the OpenAI API is off)")
    if port is not None and port > 65535:
        raise SystemExit(f"error: --openai-port must be a TCP port (0-65535), got {port}")
    return {"http.openai": args.openai, "http.openai_port": -1 if port is None else port}


def _response_cache(args: argparse.Namespace) -> dict[str, Any]:
    """``--cache-config`` values, with the deprecated ``--response-cache-byte-size`` read as
    ``local,size=<bytes>``; both at once is Triton's error."""
    values = list(args.cache_config)
    size = args.response_cache_byte_size
    if size is not None:
        if values:
            raise SystemExit(
                "error: Incompatible flags --response-cache-byte-size and --cache-config both "
                "provided. Please provide one or the other."
            )
        values = [f"local,size={size}"]
    try:
        chosen = parse_cache_config(values)
        return {
            "response_cache_size": chosen.size,
            "response_cache_ttl": chosen.ttl,
            "response_cache_redis": chosen.redis,
        }
    except ValueError as exc:
        raise SystemExit(f"error: --cache-config: {exc}") from None


def _tracing(args: argparse.Namespace) -> dict[str, Any]:
    """``--trace-config`` over the deprecated ``--trace-*`` flags (``tracing/flags.py``)."""
    deprecated = {
        "level": args.trace_level,
        "file": args.trace_file,
        "rate": args.trace_rate,
        "count": args.trace_count,
        "log-frequency": args.trace_log_frequency,
    }
    try:
        return {"tracing": trace_config(args.trace_config, deprecated)}
    except ValueError as exc:
        raise SystemExit(f"error: {exc}") from None


HTTP_TLS: Combine = Combine(_http_tls)
GRPC_TLS: Combine = Combine(_grpc_tls)
CORS: Combine = Combine(_cors)
AUTO_COMPLETE: Combine = Combine(_auto_complete)
METRICS_SERVED: Combine = Combine(_metrics_served)
OPENAI: Combine = Combine(_openai)
RESPONSE_CACHE: Combine = Combine(_response_cache)
TRACING: Combine = Combine(_tracing)


def notices(args: argparse.Namespace) -> list[Notice]:
    """Start-up log lines of implemented flags: Triton's deprecation
    warnings, ``--backend-config`` settings that only tune."""
    lines: list[Notice] = []
    if args.strict_model_config is not None:
        lines.append(
            Notice(
                logging.WARNING,
                "'--strict-model-config' has been deprecated! Please use "
                "'--disable-auto-complete-config' instead.",
            )
        )
    if args.response_cache_byte_size is not None:
        lines.append(
            Notice(
                logging.WARNING,
                "'--response-cache-byte-size' has been deprecated! Please use "
                f"'--cache-config=local,size={args.response_cache_byte_size}' instead.",
            )
        )
    try:
        _, notes = parse_backend_config(args.backend_config)
    except ValueError:
        notes = []
    lines += [Notice(logging.DEBUG, note) for note in notes]
    return lines
