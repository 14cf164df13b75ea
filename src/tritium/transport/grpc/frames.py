"""The HTTP/2 headers of gRPC answers, encoded once (``transport/http2/headers.py`` caches
each header's encoding): response headers (with ``grpc-encoding`` when the messages are
compressed) and the OK trailers of a successful call; and a response message in pieces
(``Pieces``), written without joining them."""

from __future__ import annotations

from ..http2.headers import Headers

RESPONSE_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b":status", b"200"),
    (b"content-type", b"application/grpc"),
    (b"grpc-accept-encoding", b"identity,deflate,gzip"),  # no spaces: grpc-js splits on ','
)
OK_TRAILERS: Headers = ((b"grpc-status", b"0"),)
_BY_ENCODING: dict[str | None, Headers] = {None: RESPONSE_HEADERS}


def response_headers(encoding: str | None) -> Headers:
    """The response headers of a call whose messages go out in ``encoding`` (None: as
    they are)."""
    headers = _BY_ENCODING.get(encoding)
    if headers is None:
        headers = _BY_ENCODING[encoding] = (
            *RESPONSE_HEADERS,
            (b"grpc-encoding", str(encoding).encode()),
        )
    return headers


class Pieces:
    """A message's bytes as parts to write in order, the large ones views of the arrays they
    came from (no copy); ``parts[0]`` is bytes. ``len`` is the message's length."""

    __slots__ = ("parts", "size")

    def __init__(self, parts: list[bytes | memoryview], size: int) -> None:
        self.parts = parts
        self.size = size

    def __len__(self) -> int:
        return self.size

    def join(self) -> bytes:
        return b"".join(self.parts)
