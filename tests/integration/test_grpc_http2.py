"""gRPC semantics on the wire (issue 12, items 2 and 5), driven by a raw-socket HTTP/2 client
(testkit/h2client.py, on ``h2``) so every frame boundary, header and flag is the test's
choice:
messages cut across DATA frames or packed several to a frame, trailers and Trailers-Only with
percent-encoded grpc-message, grpc-timeout, RST_STREAM, message compression both ways, the
receive-size bound, unknown methods, content-type and method checks.

The connection-level cases (flow control, SETTINGS, HPACK bomb, pings, GOAWAY, malformed
frames) are in test_grpc_http2_connection.py."""

from __future__ import annotations

import gzip
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from testkit.grpc_raw import (
    DEADLINE_EXCEEDED,
    GZIP,
    INFER,
    INTERNAL,
    MAX_INPUT,
    NOT_FOUND,
    OK,
    RESOURCE_EXHAUSTED,
    SERVICE,
    STREAM,
    UNIMPLEMENTED,
    check_simple,
    fp32_output,
    fp32_request,
    simple_request,
    start_server,
    stream_responses,
)
from testkit.h2client import H2Client, grpc_message
from tritonclient.grpc import service_pb2 as pb

from testkit.server_process import ServerProcess


@pytest.fixture(scope="module")
def h2server(example_repo: Path, test_repo: Path) -> Iterator[ServerProcess]:
    proc = start_server(
        [example_repo, test_repo],
        ["simple", "slow", "identity_fp32"],
        "--grpc-infer-response-compression-level=high",
    )
    yield proc
    proc.stop()


@pytest.fixture
def client(h2server: ServerProcess) -> Iterator[H2Client]:
    with H2Client(h2server.grpc_url) as c:
        yield c


def assert_simple_works(client: H2Client, seed: int = 11) -> None:
    """The connection still serves: a plain ModelInfer on it answers right."""
    result = client.call(INFER, simple_request(seed))
    assert result.status == OK, (result.status, result.message)
    check_simple(result.payloads()[0], seed)


@pytest.mark.parametrize("chunk", [1, 7, 100, None])
def test_message_split_across_data_frames(client: H2Client, chunk: int | None) -> None:
    """A ModelInfer message cut into DATA frames of ``chunk`` bytes (1: one frame per byte,
    the 5-byte prefix cut too) is reassembled; the answer has gRPC's headers and trailers."""
    result = client.call(INFER, simple_request(5), chunk=chunk)
    assert result.headers is not None and result.headers[":status"] == "200"
    assert result.headers["content-type"].startswith("application/grpc")
    assert result.trailers is not None and result.trailers["grpc-status"] == "0"
    [(flag, payload)] = result.messages()
    assert flag == 0
    check_simple(payload, 5)


def test_several_stream_messages_in_one_data_frame(client: H2Client) -> None:
    """Six ModelStreamInfer requests packed into one DATA frame get six right answers."""
    packed = b"".join(grpc_message(simple_request(i, rid=str(i))) for i in range(6))
    assert len(packed) < 16384  # one frame at the default SETTINGS_MAX_FRAME_SIZE
    sid = client.start_call(STREAM)
    client.send_data(sid, packed, end_stream=True)
    result = client.streams[sid]
    assert client.wait_for(lambda: result.done)
    assert result.status == OK, result.message
    responses = stream_responses(result.payloads())
    assert sorted(r.id for r in responses) == [str(i) for i in range(6)]
    for response in responses:
        check_simple(response.SerializeToString(), int(response.id))


def test_stream_message_split_and_packed(client: H2Client) -> None:
    """Messages straddling frame boundaries (3 messages cut in 50-byte frames) on a stream."""
    packed = b"".join(grpc_message(simple_request(i, rid=str(i))) for i in range(3))
    sid = client.start_call(STREAM)
    client.send_data(sid, packed, end_stream=True, chunk=50)
    result = client.streams[sid]
    assert client.wait_for(lambda: result.done)
    assert result.status == OK, result.message
    assert sorted(r.id for r in stream_responses(result.payloads())) == ["0", "1", "2"]


def test_error_is_trailers_only_with_percent_encoded_message(client: H2Client) -> None:
    """An unknown model fails before any message: Trailers-Only (one HEADERS with :status 200,
    grpc-status, END_STREAM), grpc-message percent-encoded (non-ASCII and '%')."""
    name = "nopé%model"
    result = client.call(INFER, simple_request(model=name))
    assert result.trailers_only, (result.headers, result.trailers)
    assert result.headers is not None and result.headers[":status"] == "200"
    assert result.headers["content-type"].startswith("application/grpc")
    assert not result.data
    assert result.status == NOT_FOUND
    raw = result.message
    assert raw.isascii() and "%C3%A9%25" in raw.upper(), raw
    assert urllib.parse.unquote(raw) == f"Request for unknown model: '{name}' is not found"
    assert_simple_works(client)


def test_grpc_timeout_deadline_exceeded(client: H2Client) -> None:
    """grpc-timeout 100m on the slow model (0.5 s): DEADLINE_EXCEEDED; the connection and the
    server go on."""
    sid = client.start_call(INFER, [("grpc-timeout", "100m")])
    client.send_data(sid, grpc_message(fp32_request("slow", np.ones(4))), end_stream=True)
    result = client.streams[sid]
    assert client.wait_for(lambda: result.done)
    assert result.status == DEADLINE_EXCEEDED, (result.status, result.message, result.reset)
    assert_simple_works(client)


def test_rst_stream_mid_call_leaves_connection_serving(client: H2Client) -> None:
    """RST_STREAM(CANCEL) on a call in flight and on a half-sent message: the next calls on
    the same connection are answered."""
    sid = client.start_call(INFER)
    client.send_data(sid, grpc_message(fp32_request("slow", np.ones(4))), end_stream=True)
    client.reset(sid)
    half = grpc_message(simple_request())[:20]
    sid = client.start_call(INFER)
    client.send_data(sid, half)
    client.reset(sid)
    assert_simple_works(client)
    assert not client.goaways and not client.closed


def test_gzip_request(client: H2Client) -> None:
    """grpc-encoding gzip with a compressed message (flag 1) is inflated and answered."""
    sid = client.start_call(INFER, GZIP)
    client.send_data(sid, grpc_message(simple_request(2), compressed=True), end_stream=True)
    result = client.streams[sid]
    assert client.wait_for(lambda: result.done)
    assert result.status == OK, result.message
    check_simple(result.payloads()[0], 2)


def test_compressed_flag_without_encoding_is_internal(client: H2Client) -> None:
    """gRPC: a message flagged compressed on a call with no grpc-encoding is INTERNAL."""
    sid = client.start_call(INFER)
    client.send_data(sid, grpc_message(simple_request(), compressed=True), end_stream=True)
    result = client.streams[sid]
    assert client.wait_for(lambda: result.done)
    assert result.status == INTERNAL, (result.status, result.message)
    assert_simple_works(client)


def test_unknown_encoding_is_unimplemented(client: H2Client) -> None:
    """gRPC: a message compressed with an algorithm the server lacks is UNIMPLEMENTED."""
    sid = client.start_call(INFER, [("grpc-encoding", "x-unheard-of")])
    client.send_data(sid, grpc_message(simple_request(), compressed=True), end_stream=True)
    result = client.streams[sid]
    assert client.wait_for(lambda: result.done)
    assert result.status == UNIMPLEMENTED, (result.status, result.message)
    assert_simple_works(client)


def test_gzip_inflating_past_max_size_is_resource_exhausted(client: H2Client) -> None:
    """A few KiB of gzip that inflate to twice the max message size: RESOURCE_EXHAUSTED."""
    bomb = gzip.compress(bytes(2 * MAX_INPUT))
    assert len(bomb) < MAX_INPUT // 100
    sid = client.start_call(INFER, GZIP)
    client.send_data(sid, bytes([1]) + len(bomb).to_bytes(4, "big") + bomb, end_stream=True)
    result = client.streams[sid]
    assert client.wait_for(lambda: result.done)
    assert result.status == RESOURCE_EXHAUSTED, (result.status, result.message)
    assert_simple_works(client)


def test_compressed_response_for_gzip_accepting_client(client: H2Client) -> None:
    """--grpc-infer-response-compression-level=high and grpc-accept-encoding gzip: the answer
    is gzip (grpc-encoding header, flag 1) and inflates to the right response."""
    values = np.zeros(4096, np.float32)  # compressible enough that any level compresses it
    sid = client.start_call(INFER, [("grpc-accept-encoding", "identity,gzip")])
    client.send_data(sid, grpc_message(fp32_request("identity_fp32", values)), end_stream=True)
    result = client.streams[sid]
    assert client.wait_for(lambda: result.done)
    assert result.status == OK, result.message
    assert result.headers is not None and result.headers.get("grpc-encoding") == "gzip"
    [(flag, payload)] = result.messages()
    assert flag == 1
    response = pb.ModelInferResponse.FromString(gzip.decompress(payload))
    np.testing.assert_array_equal(fp32_output(response), values)


def test_declared_length_over_max_is_refused_before_the_body(client: H2Client) -> None:
    """A message prefix declaring 4x the max size is refused (RESOURCE_EXHAUSTED) while the
    client has sent only the prefix and 1 KiB: the server does not wait for the rest."""
    sid = client.start_call(INFER)
    client.send_data(sid, bytes([0]) + (4 * MAX_INPUT).to_bytes(4, "big") + bytes(1024))
    result = client.streams[sid]
    assert client.wait_for(lambda: result.done)
    assert result.status == RESOURCE_EXHAUSTED, (result.status, result.message, result.reset)
    assert_simple_works(client)


@pytest.mark.parametrize(
    "path", [SERVICE + "NoSuchMethod", "/no.such.Service/ModelInfer", "/grpc.health.v1.Health/X"]
)
def test_unknown_method_is_unimplemented(client: H2Client, path: str) -> None:
    result = client.call(path, b"")
    assert result.status == UNIMPLEMENTED, (result.status, result.message)
    assert_simple_works(client)


@pytest.mark.parametrize("one_write", [False, True])
def test_wrong_content_type_is_415(client: H2Client, one_write: bool) -> None:
    """gRPC over HTTP/2: a content-type that is not application/grpc* is answered HTTP 415,
    whether the body arrives after the headers or in the same write (one read for the
    server: its stream is already half-closed when it answers)."""
    sid = client.start_call(INFER, content_type="text/plain", flush=not one_write)
    client.send_data(sid, grpc_message(simple_request()), end_stream=True)
    result = client.streams[sid]
    assert client.wait_for(lambda: result.done), (client.close_reason, client.goaways)
    assert result.headers is not None and result.headers[":status"] == "415", result.headers
    assert_simple_works(client)


@pytest.mark.parametrize("method", ["GET", "PUT"])
def test_other_http_methods_are_not_served(client: H2Client, method: str) -> None:
    """GET (headers only) or PUT (a gRPC body in the same write) is not a gRPC call: refused
    with HTTP 405, or the stream reset (grpc core's RST_STREAM); never a gRPC answer. The
    connection goes on."""
    sid = client.start_call(INFER, method=method, end_stream=method == "GET", flush=False)
    if method == "GET":
        client.flush()
    else:
        client.send_data(sid, grpc_message(simple_request()), end_stream=True)
    result = client.streams[sid]
    assert client.wait_for(lambda: result.done), (client.close_reason, client.goaways)
    assert not result.data and result.status is None, result
    if result.headers is not None:
        assert result.headers[":status"] == "405", result.headers
    else:
        assert result.reset is not None
    assert_simple_works(client)
