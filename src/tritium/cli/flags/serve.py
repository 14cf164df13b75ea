"""The Triton flags of issue 15 that tritium implements and no older ``cli.py`` function
defines: repository odds and ends, HTTP socket and header forwarding, backend
settings and the deprecated cache size. ``cli.py`` calls ``add_serve_flags`` and merges
``serve_options`` into ``ServerOptions``."""

from __future__ import annotations

import argparse
import logging
import re
from typing import Any

from ...frontends.grpc.metadata import compile_forward_pattern
from .backend_config import parse_backend_config
from .parser import Notice, bool_flag, non_negative_int


def _config_name(text: str) -> str:
    """Triton refuses an empty name; tritium also refuses one that is not a plain file name
    (it becomes part of a path: <model>/configs/<name>.pbtxt)."""
    if not text:
        raise argparse.ArgumentTypeError("empty argument for --model-config-name")
    if text in (".", "..") or "/" in text or "\\" in text or any(c.isspace() for c in text):
        raise argparse.ArgumentTypeError(
            f"'{text}' is not a configuration name (no spaces, no '/')"
        )
    return text


def add_serve_flags(serve: argparse.ArgumentParser) -> None:
    """Issue 15's implemented flags (their groups come from the table)."""
    serve.add_argument(
        "--model-config-name",
        type=_config_name,
        default=None,
        help="load <model>/configs/<name>.pbtxt instead of config.pbtxt when it exists",
    )
    serve.add_argument(
        "--model-load-retry-count",
        type=non_negative_int,
        default=0,
        help="try a model version that fails to load again, up to this many times",
    )
    bool_flag(serve, "--reuse-http-port", False, "SO_REUSEPORT on the HTTP socket")
    bool_flag(
        serve,
        "--model-namespacing",
        False,
        "each repository is a namespace: one model name may be served from several",
    )
    serve.add_argument(
        "--http-header-forward-pattern",
        default="",
        help="regex: request headers whose name matches become inference parameters",
    )
    serve.add_argument(
        "--backend-config",
        action="append",
        default=[],
        metavar="[<backend>,]<setting>=<value>",
        help="a backend setting tritium honours (see docs/flags.md; others are refused)",
    )
    serve.add_argument(
        "--response-cache-byte-size",
        type=int,
        default=None,
        help="deprecated: --cache-config local,size=<bytes>",
    )


def serve_options(args: argparse.Namespace) -> dict[str, Any]:
    """The ServerOptions fields of these flags; ``SystemExit`` for a bad value."""
    if args.http_header_forward_pattern:
        try:
            compile_forward_pattern(args.http_header_forward_pattern)
        except re.error as exc:
            raise SystemExit(f"error: --http-header-forward-pattern: {exc}") from None
    try:
        backends, _ = parse_backend_config(args.backend_config)
    except ValueError as exc:
        raise SystemExit(f"error: --backend-config: {exc}") from None
    return {
        "model_config_name": args.model_config_name or "",
        "model_load_retry_count": args.model_load_retry_count,
        "model_namespacing": args.model_namespacing,
        "reuse_http_port": args.reuse_http_port,
        "http_header_forward_pattern": args.http_header_forward_pattern,
        "onnxruntime_default_max_batch_size": backends.onnxruntime_max_batch_size,
    }


def cache_config_values(args: argparse.Namespace) -> list[str]:
    """``--cache-config`` values, with the deprecated ``--response-cache-byte-size`` read as
    ``local,size=<bytes>``; both at once is Triton's error."""
    size = args.response_cache_byte_size
    if size is None:
        return list(args.cache_config)
    if args.cache_config:
        raise SystemExit(
            "error: Incompatible flags --response-cache-byte-size and --cache-config both "
            "provided. Please provide one or the other."
        )
    return [f"local,size={size}"]


def serve_notices(args: argparse.Namespace) -> list[Notice]:
    """Start-up log lines of these flags: Triton's deprecation warnings, tuning settings."""
    notices = []
    if args.strict_model_config is not None:
        notices.append(
            Notice(
                logging.WARNING,
                "'--strict-model-config' has been deprecated! Please use "
                "'--disable-auto-complete-config' instead.",
            )
        )
    if args.response_cache_byte_size is not None:
        notices.append(
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
    notices += [Notice(logging.DEBUG, note) for note in notes]
    return notices
