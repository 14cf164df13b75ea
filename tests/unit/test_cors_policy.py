"""The CORS policy (frontends/http/cors.py) and its flags: which origins are allowed, what a
preflight is answered, the headers of other answers, and the flags' checks."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from testkit.http_fakes import connect, responses, run, until, written

from tritium.access.policy import ApiGroup, Restriction
from tritium.cli.main import build_parser, options_from_args
from tritium.frontends.http.cors import (
    MAX_ORIGIN_BYTES,
    MAX_REQUESTED_HEADERS,
    REFUSED,
    CorsPolicy,
    cors_policy,
    parse_origin,
)
from tritium.frontends.http.messages import (
    HttpRequest,
    HttpResponse,
    HttpStreamResponse,
    response_head,
)
from tritium.options import AccessOptions, CorsOptions, HttpOptions, ServerOptions

PAGE = "http://127.0.0.1:8080"


def _preflight(origin: bytes, requested: bytes | None = None) -> dict[bytes, bytes]:
    headers = {b"origin": origin, b"access-control-request-method": b"POST"}
    if requested is not None:
        headers[b"access-control-request-headers"] = requested
    return headers


def _options(*flags: str) -> ServerOptions:
    return options_from_args(
        build_parser().parse_args(["serve", "--model-repository", "r", *flags])
    )


@pytest.mark.parametrize(
    ("text", "origin"),
    [
        ("https://App.Example.com", "https://app.example.com"),
        ("http://127.0.0.1:8080", "http://127.0.0.1:8080"),
        ("https://example.com:443", "https://example.com"),  # browsers drop a default port
        ("http://example.com:80", "http://example.com"),
        ("http://example.com:443", "http://example.com:443"),
        ("http://[::1]:9000", "http://[::1]:9000"),
        ("chrome-extension://abcdef", "chrome-extension://abcdef"),
        ("*", "*"),
    ],
)
def test_configured_origins_are_serialized_as_browsers_send_them(text: str, origin: str) -> None:
    assert parse_origin(text) == origin


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("https://example.com/", "drop the trailing '/'"),
        ("https://example.com/app", "not an origin"),
        ("example.com", "not an origin"),
        ("https://exa mple.com", "not an origin"),
        ("https://user@example.com", "not an origin"),
        ("https://example.com:99999", "out of range"),
        ("https://example.com:0", "out of range"),
        ("null", "sandboxed"),
        ("", "not an origin"),
    ],
)
def test_what_is_not_an_origin_is_refused_with_the_reason(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        parse_origin(text)


def test_only_a_listed_origin_is_allowed_byte_for_byte() -> None:
    policy = CorsPolicy([PAGE, "https://b.example"])
    assert policy.allowed_origin(PAGE.encode()) == PAGE.encode()
    assert policy.allowed_origin(b"https://b.example") == b"https://b.example"
    for other in (
        b"http://127.0.0.1:8081",
        b"HTTP://127.0.0.1:8080",  # no normalising of what a client sends
        b"http://127.0.0.1:8080/",
        b"http://127.0.0.1:8080.evil.example",
        b"https://evil.example",
        b"null",
        b"",
    ):
        assert policy.allowed_origin(other) is None
    assert policy.allowed_origin(None) is None


def test_any_origin_is_answered_with_a_star_never_with_the_clients_origin() -> None:
    policy = CorsPolicy(["*"])
    assert policy.allowed_origin(b"https://anything.example") == b"*"
    assert policy.allowed_origin(b"\r\nX-Injected: 1") == b"*"
    assert policy.allowed_origin(b"x" * (MAX_ORIGIN_BYTES + 1)) is None  # bounded
    assert policy.allowed_origin(None) is None  # no Origin: not a cross-origin request


def test_an_origin_longer_than_the_bound_is_never_compared() -> None:
    long = "https://" + "a" * 300 + ".example"
    policy = CorsPolicy([long])
    assert policy.allowed_origin(long.encode()) == long.encode()
    assert policy.allowed_origin(long.encode() + b"x" * MAX_ORIGIN_BYTES) is None


def test_response_headers_of_an_allowed_and_of_another_origin() -> None:
    policy = CorsPolicy([PAGE])
    assert dict(policy.response_headers(PAGE.encode())) == {
        b"Vary": b"Origin",
        b"Access-Control-Allow-Origin": PAGE.encode(),
        b"Access-Control-Expose-Headers": b"Inference-Header-Content-Length, WWW-Authenticate",
    }
    assert policy.response_headers(b"https://evil.example") == [(b"Vary", b"Origin")]
    assert policy.response_headers(None) == [(b"Vary", b"Origin")]


def test_credentials_are_allowed_only_when_configured_and_never_for_any_origin() -> None:
    with_credentials = CorsPolicy([PAGE], allow_credentials=True)
    headers = dict(with_credentials.response_headers(PAGE.encode()))
    assert headers[b"Access-Control-Allow-Credentials"] == b"true"
    assert b"Access-Control-Allow-Credentials" not in dict(
        CorsPolicy([PAGE]).response_headers(PAGE.encode())
    )
    with pytest.raises(ValueError, match="credentials cannot be allowed for any origin"):
        CorsPolicy(["*", PAGE], allow_credentials=True)


def test_preflight_is_an_options_request_with_origin_and_requested_method() -> None:
    assert CorsPolicy.is_preflight("OPTIONS", _preflight(PAGE.encode()))
    assert not CorsPolicy.is_preflight("POST", _preflight(PAGE.encode()))
    assert not CorsPolicy.is_preflight("OPTIONS", {b"origin": PAGE.encode()})
    assert not CorsPolicy.is_preflight("OPTIONS", {b"access-control-request-method": b"POST"})


def test_preflight_of_an_allowed_origin_is_204_with_the_allowed_requested_headers() -> None:
    policy = CorsPolicy([PAGE], max_age_secs=90)
    requested = b"content-type,inference-header-content-length,authorization,x-evil"
    answer = policy.preflight(_preflight(PAGE.encode(), requested))
    assert (answer.status, answer.body) == (204, [])
    assert dict(answer.headers) == {
        b"Access-Control-Allow-Methods": b"GET, POST",
        b"Access-Control-Max-Age": b"90",
        b"Access-Control-Allow-Headers": (
            b"Content-Type, Inference-Header-Content-Length, Authorization"
        ),
    }


def test_preflight_without_requested_headers_allows_none() -> None:
    answer = CorsPolicy([PAGE]).preflight(_preflight(PAGE.encode()))
    assert answer.status == 204
    assert b"Access-Control-Allow-Headers" not in dict(answer.headers)


def test_preflight_of_another_origin_is_refused_403_without_cors_headers() -> None:
    answer = CorsPolicy([PAGE]).preflight(_preflight(b"https://evil.example", b"content-type"))
    assert answer.status == 403
    assert answer.body == [b'{"error":"' + REFUSED.encode() + b'"}']
    assert answer.headers == []


def test_requested_headers_are_matched_case_insensitively_and_answered_as_configured() -> None:
    policy = CorsPolicy([PAGE], ["X-Request-Tag"])
    assert policy.allowed_headers(b" Content-Type , X-REQUEST-TAG,content-type") == (
        b"Content-Type, X-Request-Tag"
    )
    assert policy.allowed_headers(b"x-other") == b""
    assert policy.allowed_headers(b"") == b""
    assert policy.allowed_headers(None) == b""


def test_a_requested_header_list_over_the_bounds_allows_none() -> None:
    policy = CorsPolicy([PAGE])
    many = b",".join([b"content-type"] * (MAX_REQUESTED_HEADERS + 1))
    assert policy.allowed_headers(many) == b""
    assert policy.allowed_headers(b"content-type," + b" " * 4096) == b""
    assert policy.allowed_headers(b",".join([b"content-type"] * MAX_REQUESTED_HEADERS)) == (
        b"Content-Type"
    )


def test_bad_policy_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="at least one allowed origin"):
        CorsPolicy([])
    with pytest.raises(ValueError, match="not an HTTP header name"):
        CorsPolicy([PAGE], ["Bad Header"])
    with pytest.raises(ValueError, match="max age"):
        CorsPolicy([PAGE], max_age_secs=-1)


def test_a_204_head_has_no_content_length() -> None:
    head = response_head(CorsPolicy([PAGE]).preflight(_preflight(PAGE.encode())), [], 0, True)
    assert head.startswith(b"HTTP/1.1 204 No Content\r\n")
    assert b"Content-Length" not in head
    assert b"Content-Type" not in head


def test_cors_is_off_by_default() -> None:
    options = _options()
    assert options.http.cors.allow_origins == ()
    assert cors_policy(options) is None


def test_flags_reach_the_policy() -> None:
    options = _options(
        *("--http-cors-allow-origin", PAGE, "--http-cors-allow-origin", "https://B.example:443"),
        *("--http-cors-allow-header", "X-Request-Tag", "--http-cors-max-age-secs", "30"),
        "--http-cors-allow-credentials",
        *("--http-restricted-api", "model-repository:admin-key=secret"),
    )
    assert options.http.cors.allow_origins == (PAGE, "https://b.example")
    assert options.http.cors.allow_headers == ("X-Request-Tag",)
    assert (options.http.cors.max_age_secs, options.http.cors.allow_credentials) == (30, True)
    policy = cors_policy(options)
    assert policy is not None
    answer = policy.preflight(_preflight(b"https://b.example", b"x-request-tag,admin-key"))
    assert dict(answer.headers)[b"Access-Control-Max-Age"] == b"30"
    # the restricted API's header is allowed too: a page must be able to send it
    assert dict(answer.headers)[b"Access-Control-Allow-Headers"] == b"X-Request-Tag, admin-key"
    assert dict(policy.response_headers(PAGE.encode()))[b"Access-Control-Allow-Credentials"]


def test_a_restricted_api_key_that_is_no_header_name_is_not_allowed() -> None:
    options = ServerOptions(
        http=HttpOptions(cors=CorsOptions(allow_origins=(PAGE,))),
        access=AccessOptions(
            http_restrictions=(Restriction(ApiGroup.MODEL_REPOSITORY, "admin key", "v"),)
        ),
    )
    policy = cors_policy(options)
    assert policy is not None
    assert policy.allowed_headers(b"admin key") == b""


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--http-cors-allow-origin", "https://a.example/"), "drop the trailing"),
        (("--http-cors-allow-origin", "null"), "sandboxed"),
        (("--http-cors-allow-origin", "*", "--http-cors-allow-credentials"), "any origin"),
        (("--http-cors-allow-origin", PAGE, "--http-cors-allow-header", "a b"), "header name"),
        (("--http-cors-allow-origin", PAGE, "--http-cors-max-age-secs", "-1"), "integer >= 0"),
        (("--http-cors-allow-header", "X-Tag"), "needs --http-cors-allow-origin"),
        (("--http-cors-max-age-secs", "600"), "needs --http-cors-allow-origin"),
        (("--http-cors-allow-credentials",), "needs --http-cors-allow-origin"),
    ],
)
def test_bad_flags_are_refused_with_the_reason(
    flags: tuple[str, ...], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        _options(*flags)
    said = str(info.value.code) + capsys.readouterr().err
    assert message in said


class _CorsHandler:
    """A handler with a policy, as HttpApp is: the connection adds its headers."""

    def __init__(self, answer: Callable[[HttpRequest], Any]) -> None:
        self.cors = CorsPolicy([PAGE])
        self._answer = answer

    def __call__(self, request: HttpRequest) -> Any:
        return self._answer(request)


def _get(origin: str = PAGE, extra: str = "") -> bytes:
    return f"GET /a HTTP/1.1\r\nHost: x\r\nOrigin: {origin}\r\n{extra}\r\n".encode()


def _whole(data: bytes) -> list[Any]:
    """The responses in ``data`` once they are complete (none while one is cut short)."""
    if not data.endswith((b"}", b"0\r\n\r\n")):
        return []
    try:
        return responses(data)
    except (ValueError, KeyError, IndexError):
        return []


def _boom(request: HttpRequest) -> HttpResponse:
    raise KeyError("bug")


async def _streamed(request: HttpRequest) -> HttpStreamResponse:
    async def chunks() -> AsyncIterator[bytes]:
        yield b"data: x\n\n"

    return HttpStreamResponse(chunks())


@pytest.mark.parametrize(
    "answer",
    [lambda r: HttpResponse(200, [b"{}"]), _boom, _streamed],
    ids=["answer", "rendered-error", "stream"],
)
def test_every_answer_of_the_api_carries_the_origins_headers(
    answer: Callable[[HttpRequest], Any],
) -> None:
    async def main() -> None:
        protocol, transport = connect(_CorsHandler(answer))
        protocol.data_received(_get() + _get("https://evil.example"))
        await until(lambda: len(_whole(bytes(transport.buffer))) == 2)
        (_, allowed, _), (_, other, _) = responses(transport.take())
        assert allowed["access-control-allow-origin"] == PAGE
        assert allowed["vary"] == "Origin"
        assert "Inference-Header-Content-Length" in allowed["access-control-expose-headers"]
        assert other["vary"] == "Origin"
        assert not any(name.startswith("access-control-") for name in other)

    run(main)


def test_without_a_policy_answers_are_as_before() -> None:
    async def main() -> None:
        protocol, transport = connect(lambda r: HttpResponse(200, [b"{}"]))
        protocol.data_received(_get())
        [(_, headers, _)] = responses(await written(transport))
        assert "vary" not in headers
        assert not any(name.startswith("access-control-") for name in headers)

    run(main)


def test_the_transports_own_errors_carry_no_cors_headers() -> None:
    async def main() -> None:
        protocol, transport = connect(
            _CorsHandler(lambda r: HttpResponse(200, [b"{}"])), max_header_bytes=64
        )
        protocol.data_received(_get(extra="X-Big: " + "y" * 100 + "\r\n"))
        [(status, headers, _)] = responses(transport.take())
        assert status == 431
        assert "vary" not in headers and "access-control-allow-origin" not in headers

    run(main)
