"""Raw binary requests (tritium.extensions.raw_input): the one input deduced as Triton core
does, and --reuse-http-port on the HTTP listener."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from tritium.errors import ServerError
from tritium.frontends.http.limits import HttpLimits
from tritium.frontends.http.listener import listen_http
from tritium.extensions.raw_input import raw_tensor
from tritium.types import DataType


def test_variable_dimension_comes_from_the_body_size() -> None:
    body = np.arange(6, dtype=np.float32).tobytes()
    tensor = raw_tensor("m", [("X", DataType.FP32, (-1, 3))], True, body)
    assert tensor.name == "X" and tensor.shape == (1, 2, 3)
    assert np.array_equal(tensor.data.ravel(), np.arange(6, dtype=np.float32))


def test_fixed_shape_must_match_the_body() -> None:
    tensor = raw_tensor("m", [("X", DataType.INT32, (2,))], False, b"\0" * 8)
    assert tensor.shape == (2,)
    with pytest.raises(ServerError, match="Expected 8, got 4"):
        raw_tensor("m", [("X", DataType.INT32, (2,))], False, b"\0" * 4)


def test_bytes_input_is_the_whole_body() -> None:
    tensor = raw_tensor("m", [("S", DataType.BYTES, (1,))], True, b"hello")
    assert tensor.shape == (1, 1) and tensor.data.ravel()[0] == b"hello"
    with pytest.raises(ServerError, match=r"must have input shape \[1\]"):
        raw_tensor("m", [("S", DataType.BYTES, (-1,))], False, b"hello")


def test_refusals_are_tritons() -> None:
    with pytest.raises(ServerError, match="to be deduced but got 2 inputs in 'm'"):
        raw_tensor("m", [("A", DataType.FP32, (1,)), ("B", DataType.FP32, (1,))], False, b"")
    with pytest.raises(ServerError, match="more than one variable-sized dimension"):
        raw_tensor("m", [("A", DataType.FP32, (-1, -1))], False, b"")


def _app(request):  # type: ignore[no-untyped-def]
    raise AssertionError("no request is sent")


def test_reuse_http_port_lets_two_listeners_share_a_port() -> None:
    async def main() -> None:
        first = await listen_http(_app, ("127.0.0.1", 0), HttpLimits(), reuse_port=True)
        port = first.sockets[0].getsockname()[1]
        try:
            second = await listen_http(_app, ("127.0.0.1", port), HttpLimits(), reuse_port=True)
            second.close()
            with pytest.raises(OSError):
                await listen_http(_app, ("127.0.0.1", port), HttpLimits())
        finally:
            first.close()

    asyncio.run(main())
