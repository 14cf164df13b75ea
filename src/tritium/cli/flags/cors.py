"""tritium's own ``--http-cors-*`` flags (Triton has none): CORS for browser clients of the
HTTP/REST API, off unless an origin is allowed (frontends/http/cors.py, docs/cors.md)."""

from __future__ import annotations

import argparse
from typing import Any

from ...frontends.http.cors import DEFAULT_MAX_AGE_SECS, CorsPolicy, parse_origin
from .parser import bool_flag, non_negative_int


def _origin(text: str) -> str:
    try:
        return parse_origin(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_cors_flags(serve: argparse.ArgumentParser) -> None:
    serve.add_argument(
        "--http-cors-allow-origin",
        action="append",
        type=_origin,
        default=[],
        metavar="<scheme://host[:port]>|*",
        help="tritium: let pages of this origin call the HTTP API from a browser (CORS; "
        "repeatable; * for any origin). Off when none is given",
    )
    serve.add_argument(
        "--http-cors-allow-header",
        action="append",
        default=[],
        metavar="<name>",
        help="tritium: a request header pages may send, beyond Authorization, Content-Type, "
        "Content-Encoding, Inference-Header-Content-Length, traceparent, tracestate and the "
        "--http-restricted-api headers (repeatable)",
    )
    serve.add_argument(
        "--http-cors-max-age-secs",
        type=non_negative_int,
        default=None,
        help=f"tritium: how long a browser may keep a preflight's answer (seconds; default "
        f"{DEFAULT_MAX_AGE_SECS})",
    )
    bool_flag(
        serve,
        "--http-cors-allow-credentials",
        False,
        "tritium: let pages send cookies and HTTP authentication along (not with origin *)",
    )


def cors_options(args: argparse.Namespace) -> dict[str, Any]:
    """The ServerOptions fields of these flags, checked together; ``SystemExit`` for a bad
    combination (a flag given without an origin would do nothing: refused)."""
    origins = tuple(dict.fromkeys(args.http_cors_allow_origin))
    if not origins:
        _refuse_without_origin(args)
        return {}
    headers = tuple(args.http_cors_allow_header)
    max_age = args.http_cors_max_age_secs
    max_age = DEFAULT_MAX_AGE_SECS if max_age is None else max_age
    try:
        CorsPolicy(origins, headers, max_age, args.http_cors_allow_credentials)
    except ValueError as exc:
        raise SystemExit(f"error: --http-cors-*: {exc}") from None
    return {
        "http_cors_allow_origins": origins,
        "http_cors_allow_headers": headers,
        "http_cors_max_age_secs": max_age,
        "http_cors_allow_credentials": args.http_cors_allow_credentials,
    }


def _refuse_without_origin(args: argparse.Namespace) -> None:
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
