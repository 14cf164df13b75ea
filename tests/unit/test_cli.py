"""The CLI builds ServerOptions with Triton's flag names and defaults."""

from __future__ import annotations

import pytest

from tritium.cli.main import build_parser, options_from_args


def _options(*flags: str):  # type: ignore[no-untyped-def]
    return options_from_args(
        build_parser().parse_args(["serve", "--model-repository", "r", *flags])
    )


def test_defaults_are_tritons() -> None:
    options = _options()
    assert (options.http.port, options.grpc.port, options.metrics.port) == (8000, 8001, 8002)
    assert options.exit_on_error and options.strict_readiness
    assert options.repository.auto_complete_config
    assert options.http.max_input_size == 64 * 1024 * 1024
    assert options.grpc.keepalive_time_ms == 7_200_000
    assert options.grpc.keepalive_timeout_ms == 20_000
    assert not options.grpc.keepalive_permit_without_calls
    assert options.grpc.http2_max_pings_without_data == 2
    assert options.grpc.http2_min_recv_ping_interval_without_data_ms == 300_000
    assert options.grpc.http2_max_ping_strikes == 2
    assert options.grpc.max_concurrent_streams == 0  # tritium's bound per connection
    assert not options.grpc.use_ssl
    assert options.grpc.infer_response_compression_level == "none"
    assert options.grpc.max_connection_age_ms == 0 and not options.grpc.reuse_port


def test_the_grpc_transport_is_no_longer_selectable(capsys: pytest.CaptureFixture[str]) -> None:
    """grpcio's server is gone (issue 12): the flag that chose it is refused, not ignored."""
    with pytest.raises(SystemExit):
        _options("--grpc-transport", "grpcio")
    assert "--grpc-transport" in capsys.readouterr().err


def test_grpc_flags_reach_the_options() -> None:
    options = _options(
        "--grpc-keepalive-time",
        "1000",
        "--grpc-keepalive-timeout",
        "500",
        "--grpc-keepalive-permit-without-calls=true",
        "--grpc-http2-max-pings-without-data",
        "0",
        "--grpc-http2-min-recv-ping-interval-without-data",
        "10",
        "--grpc-http2-max-ping-strikes",
        "5",
        "--grpc-max-concurrent-streams",
        "64",
        "--grpc-stream-inflight-limit",
        "8",
    )
    assert options.grpc.keepalive_time_ms == 1000
    assert options.grpc.keepalive_timeout_ms == 500
    assert options.grpc.keepalive_permit_without_calls
    assert options.grpc.http2_max_pings_without_data == 0
    assert options.grpc.http2_min_recv_ping_interval_without_data_ms == 10
    assert options.grpc.http2_max_ping_strikes == 5
    assert options.grpc.max_concurrent_streams == 64
    assert options.grpc.stream_inflight == 8


def test_boolean_flags_take_triton_spellings() -> None:
    assert not _options("--exit-on-error=false").exit_on_error
    assert not _options("--exit-on-error", "false").exit_on_error
    assert _options("--strict-readiness=true").strict_readiness
    assert not _options("--strict-model-config=true").repository.auto_complete_config
    assert not _options("--disable-auto-complete-config").repository.auto_complete_config
    assert _options("--strict-model-config=false").repository.auto_complete_config


def test_triton_ipv6_address_syntax_is_accepted_as_given() -> None:
    options = _options("--http-address", "ipv6:[::1]", "--grpc-address", "ipv6:[::1]")
    assert (options.http.address, options.grpc.address) == ("ipv6:[::1]", "ipv6:[::1]")


@pytest.mark.parametrize("flag", ["--http-address", "--grpc-address", "--metrics-address"])
def test_an_address_tritium_cannot_bind_stops_at_the_flag(flag: str) -> None:
    with pytest.raises(SystemExit, match=f"{flag} ipv6:localhost: 'localhost' is not an IPv6"):
        _options(flag, "ipv6:localhost")


@pytest.mark.parametrize("url", ["s3://bucket/models", "gs://b/m", "as://a/c/m"])
def test_cloud_repositories_are_refused_naming_the_flag(url: str) -> None:
    with pytest.raises(SystemExit, match=f"--model-repository {url}: cloud model repositories"):
        options_from_args(build_parser().parse_args(["serve", "--model-repository", url]))
