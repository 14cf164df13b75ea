"""tritium's HTTP transport flags reach ServerOptions and the connection limits."""

from __future__ import annotations

import pytest

from tritium.cli.main import build_parser, options_from_args
from tritium.frontends.http.limits import HttpLimits
from tritium.options import ServerOptions


def _options(*flags: str) -> ServerOptions:
    return options_from_args(
        build_parser().parse_args(["serve", "--model-repository", "r", *flags])
    )


def test_defaults() -> None:
    limits = HttpLimits.from_options(_options())
    assert limits == HttpLimits()
    assert (limits.max_header_bytes, limits.max_url, limits.max_headers) == (65536, 8192, 100)
    assert limits.max_pipelined == 4
    assert (limits.header_timeout, limits.body_timeout, limits.keepalive_timeout) == (30, 60, 75)


def test_flags_reach_the_limits_and_the_grpc_bound() -> None:
    options = _options(
        *("--http-max-input-size", "5000", "--http-max-header-size", "1000"),
        *("--http-max-url-length", "200", "--http-max-headers", "7"),
        *("--http-max-pipelined", "2", "--http-header-timeout-secs", "1.5"),
        *("--http-body-timeout-secs", "2.5", "--http-keepalive-timeout-secs", "3.5"),
        *("--http-ssl-cert", "c.pem", "--http-ssl-key", "k.pem"),
    )
    assert HttpLimits.from_options(options) == HttpLimits(5000, 1000, 200, 7, 2, 1.5, 2.5, 3.5)
    assert (options.http.ssl_cert, options.http.ssl_key) == ("c.pem", "k.pem")
    assert options.http.max_input_size == 5000  # gRPC's receive bound too (GrpcListener)


@pytest.mark.parametrize(
    "flags",
    [
        ("--http-max-pipelined", "0"),
        ("--http-keepalive-timeout-secs", "-1"),
        ("--http-max-header-size", "x"),
        ("--http-ssl-cert", "c.pem"),  # a certificate without its key
    ],
)
def test_bad_values_are_refused(flags: tuple[str, ...]) -> None:
    with pytest.raises(SystemExit):
        _options(*flags)
