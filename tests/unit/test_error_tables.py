"""Each front-end maps the core's error kinds in one table; every kind appears in both."""

from __future__ import annotations

import grpc
import pytest

from tritium.errors import ErrorKind
from tritium.frontends.grpc.errors import CODE
from tritium.transport.grpc.status import StatusCode
from tritium.frontends.http.errors import STATUS


@pytest.mark.parametrize("kind", list(ErrorKind), ids=lambda k: k.name)
def test_every_kind_has_an_http_status_and_a_grpc_code(kind: ErrorKind) -> None:
    assert 400 <= STATUS[kind] < 600
    code = CODE[kind]
    assert isinstance(code, StatusCode) and code is not StatusCode.OK
    # tritium's own codes carry grpc's numbers and names (what clients decode)
    assert grpc.StatusCode[code.name].value[0] == int(code)


def test_tables_hold_nothing_else() -> None:
    assert set(STATUS) == set(ErrorKind) == set(CODE)


def test_grpc_status_messages_stay_bounded() -> None:
    """Errors echo client input (names, keys); gRPC clients refuse trailers past ~16 KiB."""
    from tritium.transport.grpc.status import MAX_MESSAGE_CHARS, status_message

    assert status_message("short") == "short"
    long = status_message("x" * 100_000)
    assert len(long) <= MAX_MESSAGE_CHARS and long.endswith("(100000 characters)")


def test_status_codes_are_grpcs() -> None:
    for code in StatusCode:
        assert grpc.StatusCode[code.name].value[0] == int(code)
