"""Interoperability with an independent gRPC implementation: @grpc/grpc-js on Node.js.

tritonclient and grpcio's stubs share grpcio's C core; grpc-js is a separate HTTP/2 (Node's
nghttp2) and gRPC stack, so these tests catch a server that only works with the client it was
written against. The messages are still tritonclient's generated protobuf classes
(tests/support/grpc_messages.py); tests/interop/node/client.js moves the bytes
(tests/support/node_grpc.py).
Here, on the shared server: unary calls, unknown methods, bidirectional streams with requests
written while responses arrive (non-decoupled and decoupled models, several streams on one
connection), deadlines, cancellation and request compression. TLS and response compression,
which need servers of their own, are in test_grpc_interop_node_tls.py.

Needs ``node`` (skipped without it) and ``make interop-deps`` (a failure without it).
"""

from __future__ import annotations

import numpy as np
import pytest
from grpc_health.v1 import health_pb2
from tests.support.grpc_messages import (
    assert_simple_answer,
    output,
    repeat_request,
    simple_request,
    slow_request,
    square_request,
    stream_responses,
)
from tests.support.node_grpc import (  # noqa: F401 (grpc_js_installed: an autouse fixture)
    NEEDS_NODE,
    CANCELLED,
    DEADLINE_EXCEEDED,
    DEFLATE,
    GZIP,
    SERVICE,
    UNIMPLEMENTED,
    NodeCall,
    NodeRun,
    assert_ok,
    grpc_js_installed,
    run_node,
    window_gates,
)
from testkit.server_process import ServerProcess
from tritonclient.grpc import service_pb2 as pb

pytestmark = NEEDS_NODE

INFER, STREAM = "ModelInfer", "ModelStreamInfer"


# --- unary ---


def test_unary_model_infer_simple(server: ServerProcess) -> None:
    run = run_node(server.grpc_url, [NodeCall.unary(INFER, simple_request(5, "u1"))])
    assert_ok(run)
    (raw,) = run.calls[0].responses
    response = pb.ModelInferResponse.FromString(raw)
    assert response.model_name == "simple"
    assert response.id == "u1"
    assert_simple_answer(response, 5)


def test_unary_health_and_metadata(server: ServerProcess) -> None:
    calls = [
        NodeCall.unary("ServerLive", pb.ServerLiveRequest()),
        NodeCall.unary("ServerReady", pb.ServerReadyRequest()),
        NodeCall.unary("ModelMetadata", pb.ModelMetadataRequest(name="simple")),
        NodeCall.unary("/grpc.health.v1.Health/Check", health_pb2.HealthCheckRequest()),
    ]
    run = run_node(server.grpc_url, calls, serial=True)
    for index in range(len(calls)):
        assert_ok(run, index)
    live, ready, metadata, health = (call.responses[0] for call in run.calls)
    assert pb.ServerLiveResponse.FromString(live).live
    assert pb.ServerReadyResponse.FromString(ready).ready
    parsed = pb.ModelMetadataResponse.FromString(metadata)
    assert parsed.name == "simple"
    assert [(t.name, t.datatype, list(t.shape)) for t in parsed.inputs] == [
        ("INPUT0", "INT32", [-1, 16]),
        ("INPUT1", "INT32", [-1, 16]),
    ]
    serving = health_pb2.HealthCheckResponse.SERVING
    assert health_pb2.HealthCheckResponse.FromString(health).status == serving


@pytest.mark.parametrize(
    "method",
    ["/inference.GRPCInferenceService/NoSuchMethod", "/no.such.Service/ModelInfer"],
)
def test_unknown_method_is_unimplemented(server: ServerProcess, method: str) -> None:
    run = run_node(server.grpc_url, [NodeCall.unary(method, b"")])
    assert run.calls[0].status == UNIMPLEMENTED, run.calls[0]
    assert run.calls[0].responses == []


# --- bidirectional streams ---


def test_stream_interleaved_in_order(server: ServerProcess) -> None:
    """64 requests, at most 4 in flight: each is written after earlier answers arrived, and a
    non-decoupled model answers in send order."""
    count = 64
    requests = [simple_request(i, f"s{i}") for i in range(count)]
    call = NodeCall.bidi(STREAM, requests, gates=window_gates(count, 4))
    run = run_node(server.grpc_url, [call])
    assert_ok(run)
    responses = stream_responses(run.calls[0].responses)
    assert [r.id for r in responses] == [f"s{i}" for i in range(count)]
    for i, response in enumerate(responses):
        assert_simple_answer(response, i)
    assert run.calls[0].written_at[0] < count, "requests and responses did not interleave"


def _square_ns(count: int) -> list[int]:
    return [1 + i % 5 for i in range(count)]


def square_stream(count: int, prefix: str) -> NodeCall:
    """``count`` square_int32 requests (N = 1..5), each written once the answers of all but the
    last two requests before it have arrived."""
    ns = _square_ns(count)
    gates = [sum(ns[: max(0, i - 2)]) for i in range(count)]
    requests = [square_request(n, f"{prefix}{i}") for i, n in enumerate(ns)]
    return NodeCall.bidi(STREAM, requests, gates=gates)


def assert_square_answers(run: NodeRun, index: int, count: int, prefix: str) -> None:
    assert_ok(run, index)
    seen: dict[str, list[int]] = {}
    for response in stream_responses(run.calls[index].responses):
        seen.setdefault(response.id, []).extend(output(response, "OUT", np.int32).tolist())
    assert seen == {f"{prefix}{i}": [n] * n for i, n in enumerate(_square_ns(count))}


def test_stream_decoupled_interleaved(server: ServerProcess) -> None:
    """square_int32 sends N responses per request; requests keep going out as they arrive."""
    run = run_node(server.grpc_url, [square_stream(24, "q")])
    assert_square_answers(run, 0, 24, "q")
    assert run.calls[0].written_at[0] < 24


def test_concurrent_streams_on_one_connection(server: ServerProcess) -> None:
    """Six non-decoupled and two decoupled streams at once on one grpc-js channel."""
    count = 32
    plain = [
        NodeCall.bidi(
            STREAM,
            [simple_request(100 * k + i, f"c{k}-{i}") for i in range(count)],
            gates=window_gates(count, 3),
        )
        for k in range(6)
    ]
    run = run_node(server.grpc_url, [*plain, square_stream(12, "qa"), square_stream(12, "qb")])
    for k in range(6):
        assert_ok(run, k)
        responses = stream_responses(run.calls[k].responses)
        assert [r.id for r in responses] == [f"c{k}-{i}" for i in range(count)]
        for i, response in enumerate(responses):
            assert_simple_answer(response, 100 * k + i)
    assert_square_answers(run, 6, 12, "qa")
    assert_square_answers(run, 7, 12, "qb")


# --- deadlines and cancellation: the server goes on serving ---


def _then_simple_works(server: ServerProcess, first: NodeCall) -> NodeRun:
    """``first``, then a ``simple`` infer on the same connection, then one on a new one."""
    run = run_node(server.grpc_url, [first, NodeCall.unary(INFER, simple_request(7))], serial=True)
    assert_ok(run, 1)
    assert_simple_answer(pb.ModelInferResponse.FromString(run.calls[1].responses[0]), 7)
    fresh = run_node(server.grpc_url, [NodeCall.unary(INFER, simple_request(8))])
    assert_ok(fresh)
    return run


@pytest.mark.parametrize("kind", ["unary", "bidi"])
def test_deadline_exceeded_then_server_answers(server: ServerProcess, kind: str) -> None:
    """``slow`` sleeps 0.5 s; a 100 ms deadline ends the call with DEADLINE_EXCEEDED."""
    if kind == "unary":
        first = NodeCall.unary(INFER, slow_request(), deadline_ms=100)
    else:
        first = NodeCall.bidi(STREAM, [slow_request()], deadline_ms=100)
    run = _then_simple_works(server, first)
    assert run.calls[0].status == DEADLINE_EXCEEDED, run.calls[0]
    assert run.calls[0].responses == []


def test_cancel_unary_mid_call_then_server_answers(server: ServerProcess) -> None:
    run = _then_simple_works(server, NodeCall.unary(INFER, slow_request(), cancel_after_ms=100))
    assert run.calls[0].status == CANCELLED, run.calls[0]
    assert run.calls[0].responses == []


def test_cancel_stream_mid_way_then_server_answers(server: ServerProcess) -> None:
    """repeat_int32 would send 20 responses 50 ms apart; the client cancels after 3."""
    first = NodeCall.bidi(STREAM, [repeat_request(20, 50)], cancel_after_responses=3)
    run = _then_simple_works(server, first)
    assert run.calls[0].status == CANCELLED, run.calls[0]
    assert len(run.calls[0].responses) == 3
    values = [output(r, "OUT", np.int32)[0] for r in stream_responses(run.calls[0].responses)]
    assert values == [0, 1, 2]


def test_cancel_stream_with_requests_outstanding(server: ServerProcess) -> None:
    """A stream cancelled with requests in flight and the request side still open."""
    requests = [simple_request(i, f"x{i}") for i in range(16)]
    first = NodeCall.bidi(STREAM, requests, half_close=False, cancel_after_responses=2)
    run = _then_simple_works(server, first)
    assert run.calls[0].status == CANCELLED, run.calls[0]


# --- compression ---


@pytest.mark.parametrize(("algorithm", "name"), [(GZIP, "gzip"), (DEFLATE, "deflate")])
def test_request_compression(server: ServerProcess, algorithm: int, name: str) -> None:
    """grpc-js compresses the request messages; the server inflates them and answers right.

    Both calls start together: grpc-js decides per call from what the server advertised on
    the channel so far (grpcio's ``identity, deflate, gzip``, with spaces, reads to grpc-js as
    "no gzip" and turns compression off for later calls)."""
    calls = [
        NodeCall.unary(INFER, simple_request(11)),
        NodeCall.bidi(STREAM, [simple_request(i, f"z{i}") for i in range(8)]),
    ]
    options = {"grpc.default_compression_algorithm": algorithm}
    run = run_node(server.grpc_url, calls, channel_options=options)
    assert_ok(run, 0)
    assert_simple_answer(pb.ModelInferResponse.FromString(run.calls[0].responses[0]), 11)
    assert_ok(run, 1)
    responses = stream_responses(run.calls[1].responses)
    assert [r.id for r in responses] == [f"z{i}" for i in range(8)]
    for i, response in enumerate(responses):
        assert_simple_answer(response, i)
    assert sorted((w["path"], w["grpc_encoding"]) for w in run.wire) == [
        (SERVICE + INFER, name),
        (SERVICE + STREAM, name),
    ]
    assert all(w["flags"][0] == 1 for w in run.wire), f"sent uncompressed: {run.wire}"
    for wire in run.wire:
        advertised = [token.strip() for token in (wire["accept_encoding"] or "").split(",")]
        assert name in advertised, wire
