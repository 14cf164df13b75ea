"""CORS (the Fetch standard's cross-origin checks) for browser clients of the HTTP/REST API:
tritium's own, opt-in with ``--http-cors-allow-origin`` (Triton has none: server issues #1147,
#5971). Pure policy: header values in, header values out; no I/O.

- A preflight (``OPTIONS`` with ``Origin`` and ``Access-Control-Request-Method``) from an
  allowed origin is answered 204 with ``Access-Control-Allow-Methods``, the requested headers
  that are allowed (``Access-Control-Allow-Headers``; none allowed: no such header, and the
  browser refuses) and ``Access-Control-Max-Age``; from any other origin 403 with Triton's
  error document. It is answered before access control: a browser's preflight carries no
  credentials.
- Every response of the HTTP API carries ``Vary: Origin`` (the answer depends on it); one to an
  allowed origin also ``Access-Control-Allow-Origin`` (the origin itself, or ``*`` when any is
  allowed), ``Access-Control-Expose-Headers`` (``Inference-Header-Content-Length``, so a page
  can split a binary answer; ``WWW-Authenticate``) and, when configured,
  ``Access-Control-Allow-Credentials: true``.

The ``Origin`` header is a client's: it is compared byte for byte with the configured origins
(bounded length, no parsing, no normalising), and only a configured origin is ever written
back; ``*`` is sent as ``*``, never as the client's origin.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

from .messages import HttpResponse, error_body

if TYPE_CHECKING:
    from ...options import ServerOptions

MAX_ORIGIN_BYTES = 512  # longer than any scheme://host:port a browser sends
MAX_REQUEST_HEADERS_BYTES = 2048  # Access-Control-Request-Headers read at most this long
MAX_REQUESTED_HEADERS = 32  # names looked at in one Access-Control-Request-Headers
DEFAULT_MAX_AGE_SECS = 600
WILDCARD = "*"
ALLOW_METHODS = b"GET, POST"  # every route of the HTTP API is one of these
# Request headers tritium reads that a page may send (Content-Type: application/json and the
# others are not "CORS-safelisted", so a browser asks for them in the preflight).
DEFAULT_ALLOW_HEADERS = (
    "Authorization",
    "Content-Encoding",
    "Content-Type",
    "Inference-Header-Content-Length",
    "traceparent",
    "tracestate",
)
EXPOSE_HEADERS = b"Inference-Header-Content-Length, WWW-Authenticate"
REFUSED = "CORS preflight refused: the origin is not allowed"

_SCHEME = r"[a-z][a-z0-9+.-]*"
_HOST = r"[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*|\[[0-9a-f:.]+\]"
_ORIGIN = re.compile(rf"(?P<scheme>{_SCHEME})://(?P<host>{_HOST})(:(?P<port>[0-9]{{1,5}}))?")
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # RFC 9110 token: a header name
_DEFAULT_PORTS = {"http": "80", "https": "443"}


def parse_origin(text: str) -> str:
    """A configured origin as a browser serializes it (``scheme://host[:port]``, lower case,
    no default port), or ``*``; ``ValueError`` says what is wrong."""
    if text == WILDCARD:
        return text
    if text == "null":
        raise ValueError("'null' is not allowed: any sandboxed page or local file sends it")
    value = text.strip().lower()
    found = _ORIGIN.fullmatch(value)
    if found is None:
        hint = " (an origin has no path: drop the trailing '/')" if value.endswith("/") else ""
        raise ValueError(f"'{text}' is not an origin, expected scheme://host[:port]{hint}")
    port = found["port"]
    if port is not None and not 0 < int(port) < 65536:
        raise ValueError(f"'{text}': port {port} is out of range")
    if port is not None and _DEFAULT_PORTS.get(found["scheme"]) == port:
        value = value.rsplit(":", 1)[0]  # browsers never send a scheme's default port
    return value


def parse_header_name(text: str) -> str:
    name = text.strip()
    if _TOKEN.fullmatch(name) is None:
        raise ValueError(f"'{text}' is not an HTTP header name")
    return name


class CorsPolicy:
    """Which origins may call the API from a browser, and the headers that tell it so."""

    __slots__ = ("_any", "_origins", "_headers", "_origin_headers", "_preflight_headers")

    def __init__(
        self,
        origins: Iterable[str],
        allow_headers: Iterable[str] = (),
        max_age_secs: int = DEFAULT_MAX_AGE_SECS,
        allow_credentials: bool = False,
    ) -> None:
        parsed = {parse_origin(o) for o in origins}
        if not parsed:
            raise ValueError("CORS needs at least one allowed origin")
        self._any = WILDCARD in parsed
        if self._any and allow_credentials:
            raise ValueError("credentials cannot be allowed for any origin ('*'): list the origins")
        if max_age_secs < 0:
            raise ValueError(f"max age must be 0 or more seconds, got {max_age_secs}")
        self._origins = frozenset(o.encode("ascii") for o in parsed if o != WILDCARD)
        # lower-case name -> the name as answered (configured spelling, never the client's)
        names = [*DEFAULT_ALLOW_HEADERS, *(parse_header_name(h) for h in allow_headers)]
        self._headers = {n.lower().encode("ascii"): n.encode("ascii") for n in names}
        self._origin_headers = [(b"Access-Control-Expose-Headers", EXPOSE_HEADERS)]
        if allow_credentials:
            self._origin_headers.append((b"Access-Control-Allow-Credentials", b"true"))
        self._preflight_headers = [
            (b"Access-Control-Allow-Methods", ALLOW_METHODS),
            (b"Access-Control-Max-Age", b"%d" % max_age_secs),
        ]

    def allowed_origin(self, origin: bytes | None) -> bytes | None:
        """The ``Access-Control-Allow-Origin`` value for this ``Origin``; None: not allowed."""
        if origin is None or len(origin) > MAX_ORIGIN_BYTES:
            return None
        if origin in self._origins:
            return origin  # equal to a configured origin, byte for byte
        return b"*" if self._any else None

    def response_headers(self, origin: bytes | None) -> list[tuple[bytes, bytes]]:
        """The headers every response of the API carries for a request with this Origin."""
        allowed = self.allowed_origin(origin)
        if allowed is None:
            return [(b"Vary", b"Origin")]
        return [
            (b"Vary", b"Origin"),
            (b"Access-Control-Allow-Origin", allowed),
            *self._origin_headers,
        ]

    @staticmethod
    def is_preflight(method: str, headers: dict[bytes, bytes]) -> bool:
        return (
            method == "OPTIONS"
            and b"origin" in headers
            and b"access-control-request-method" in headers
        )

    def preflight(self, headers: dict[bytes, bytes]) -> HttpResponse:
        """The answer to a preflight, less the origin's headers (``response_headers``, which
        the request cycle adds to every answer)."""
        if self.allowed_origin(headers.get(b"origin")) is None:
            return HttpResponse(403, [error_body(REFUSED)])
        answer = list(self._preflight_headers)
        allowed = self.allowed_headers(headers.get(b"access-control-request-headers"))
        if allowed:
            answer.append((b"Access-Control-Allow-Headers", allowed))
        return HttpResponse(204, [], None, answer)

    def allowed_headers(self, requested: bytes | None) -> bytes:
        """Of the requested header names, those allowed, comma-separated; a list longer than
        the bounds allows none."""
        if not requested or len(requested) > MAX_REQUEST_HEADERS_BYTES:
            return b""
        names = requested.split(b",")
        if len(names) > MAX_REQUESTED_HEADERS:
            return b""
        found: dict[bytes, None] = {}
        for name in names:
            known = self._headers.get(name.strip().lower())
            if known is not None:
                found[known] = None
        return b", ".join(found)


def cors_policy(options: ServerOptions) -> CorsPolicy | None:
    """The policy of ``--http-cors-*`` (None: CORS is off). The headers that
    ``--http-restricted-api`` requires are allowed too: a page must be able to send them (a
    key that is no header name could not be sent by a browser at all)."""
    if not options.http.cors.allow_origins:
        return None
    keys = (r.header for r in options.access.http_restrictions)
    restricted = dict.fromkeys(k for k in keys if _TOKEN.fullmatch(k))
    return CorsPolicy(
        options.http.cors.allow_origins,
        [*options.http.cors.allow_headers, *restricted],
        options.http.cors.max_age_secs,
        options.http.cors.allow_credentials,
    )
