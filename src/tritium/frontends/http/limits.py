"""The bounds every HTTP connection keeps (sizes, counts, timeouts), from the server options."""

from __future__ import annotations

from dataclasses import dataclass

from ...options import ServerOptions

_D = ServerOptions()


@dataclass(frozen=True, slots=True)
class HttpLimits:
    max_body: int = _D.http.max_input_size  # body bytes, before and after decompression
    max_header_bytes: int = _D.http.max_header_size  # names and values of the headers → 431
    max_url: int = _D.http.max_url_length  # the request target → 414
    max_headers: int = _D.http.max_headers  # header lines → 431
    max_pipelined: int = _D.http.max_pipelined  # requests held per connection, then no reading
    header_timeout: float = _D.http.header_timeout_secs  # first byte to end of headers → 408
    body_timeout: float = _D.http.body_timeout_secs  # longest pause within a body → 408
    keepalive_timeout: float = _D.http.keepalive_timeout_secs  # idle connections are closed

    @classmethod
    def from_options(cls, options: ServerOptions) -> HttpLimits:
        return cls(
            max_body=options.http.max_input_size,
            max_header_bytes=options.http.max_header_size,
            max_url=options.http.max_url_length,
            max_headers=options.http.max_headers,
            max_pipelined=options.http.max_pipelined,
            header_timeout=options.http.header_timeout_secs,
            body_timeout=options.http.body_timeout_secs,
            keepalive_timeout=options.http.keepalive_timeout_secs,
        )
