"""Response heads: the remembered beginning of a plain answer's head (messages._HEADS) gives
the very bytes the head is written out as, for every status, type, header and connection."""

from __future__ import annotations

import pytest

from tritium.frontends.http import messages
from tritium.frontends.http.messages import HttpResponse, response_head


def test_a_plain_json_answer() -> None:
    response = HttpResponse(200, [b"{}"])
    assert response_head(response, [], 2, True) == (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n"
    )


@pytest.mark.parametrize("status", [200, 204, 400, 404, 503, 599])
@pytest.mark.parametrize("content_type", [b"application/json", b"application/octet-stream", None])
@pytest.mark.parametrize("body", [[b"abc"], []])
@pytest.mark.parametrize("headers", [[], [(b"X-Extra", b"1")]])
@pytest.mark.parametrize("keep_alive", [True, False])
def test_the_same_head_as_written_out(
    status: int,
    content_type: bytes | None,
    body: list[bytes],
    headers: list[tuple[bytes, bytes]],
    keep_alive: bool,
) -> None:
    response = HttpResponse(status, body, content_type)
    length = sum(map(len, body))
    expected = messages._head(response, headers, length, keep_alive)
    for _ in range(2):  # made, then remembered
        assert response_head(response, headers, length, keep_alive) == expected
    if status == 204:
        assert b"Content-Length" not in expected


def test_the_heads_remembered_are_bounded() -> None:
    for status in range(300, 300 + 4 * messages._HEADS_MAX):  # 204 aside: no length
        head = response_head(HttpResponse(status, [b"x"]), [], 1, True)
        assert head.startswith(b"HTTP/1.1 %d " % status) and head.endswith(b"1\r\n\r\n")
    assert 0 < len(messages._HEADS) <= messages._HEADS_MAX
