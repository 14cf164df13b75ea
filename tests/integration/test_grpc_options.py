"""Triton's gRPC options on the gRPC endpoint: ``--grpc-header-forward-pattern`` (metadata that
becomes request parameters, for ModelInfer and ModelStreamInfer),
``--grpc-infer-response-compression-level``, message compression both ways with tritonclient's
``compression_algorithm``, and ``--reuse-grpc-port``. Where tritonclient cannot show what went
over the wire (the response's ``grpc-encoding``), a few lines of ``h2`` speak gRPC directly."""

from __future__ import annotations

import asyncio
import errno
import json
import queue
import shutil
import socket
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import h2.config
import h2.connection
import h2.events
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
from tests.support.clients import (
    add_sub_inputs,
    make_input,
    simple_grpc_infer_aio,
    simple_grpc_infer_client,
)
from tests.support.models import build_test_repository
from testkit.server_process import ServerProcess
from tritonclient.grpc import service_pb2 as pb

# Forward my_header*, and try to forward what must never be: grpc's own metadata, te,
# content-type, and a header named like a reserved parameter. user-agent is forwarded, as grpc
# core hands it to Triton's handlers.
FORWARD_PATTERN = "my_header.*|grpc-.*|^te$|content-type|user-agent|^priority$"
MAX_INPUT = 1 << 20  # --http-max-input-size: also the gRPC max receive size, after inflation


@pytest.fixture(scope="module")
def options_repo(example_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = build_test_repository(
        tmp_path_factory.mktemp("grpc-options") / "repo", ["parameters_echo"]
    )
    shutil.copytree(example_repo / "simple", repo / "simple")
    return repo


@pytest.fixture(scope="module")
def server(options_repo: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess(
        [options_repo],
        *("--grpc-header-forward-pattern", FORWARD_PATTERN),
        "--grpc-infer-response-compression-level=high",
        "--reuse-grpc-port",
        *("--http-max-input-size", str(MAX_INPUT)),
    )
    yield proc
    proc.stop()


def _echo_inputs() -> list[Any]:
    return [make_input("grpc", "INPUT0", np.array([1], dtype=np.int32), "INT32")]


def _parameters(result: Any) -> dict[str, Any]:
    params: dict[str, Any] = json.loads(result.as_numpy("OUTPUT0")[0])
    return params


HEADERS = {"my_header_1": "my_value_1", "other_header": "not forwarded", "priority": "9"}


def _assert_forwarded(params: dict[str, Any], expected: dict[str, str]) -> None:
    assert params.pop("user-agent").startswith("grpc-")  # grpc-python/…, grpc-c/…
    assert params == expected


# ------------------------------------------------------------------------- header forwarding


def test_matching_headers_become_parameters_for_model_infer(server: ServerProcess) -> None:
    c = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        result = c.infer(
            "parameters_echo",
            _echo_inputs(),
            parameters={"key1": "value1"},
            headers=HEADERS,
            client_timeout=30,  # sends grpc-timeout, which the pattern matches and must not pass
        )
    finally:
        c.close()
    _assert_forwarded(_parameters(result), {"key1": "value1", "my_header_1": "my_value_1"})


def test_matching_headers_become_parameters_for_the_aio_client(server: ServerProcess) -> None:
    async def main() -> Any:
        c = aioclient.InferenceServerClient(server.grpc_url)
        try:
            return await c.infer(
                "parameters_echo",
                _echo_inputs(),
                headers={"my_header_2": 'a "quoted" value with a backslash\\'},
                compression_algorithm="gzip",  # grpc-encoding must not be forwarded either
            )
        finally:
            await c.close()

    expected = {"my_header_2": 'a "quoted" value with a backslash\\'}
    _assert_forwarded(_parameters(asyncio.run(main())), expected)


def test_header_values_with_surrounding_spaces_are_served(server: ServerProcess) -> None:
    """Triton's own qa (L0_parameters) forwards 'This is a "quoted" string with a backslash\\ '
    (a trailing space): grpc core takes such values, so the call is served, not the connection
    ended."""
    value = 'This is a "quoted" string with a backslash\\ '
    c = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        result = c.infer("parameters_echo", _echo_inputs(), headers={"my_header_3": value})
        assert c.is_server_live()
    finally:
        c.close()
    _assert_forwarded(_parameters(result), {"my_header_3": value})


def test_stream_headers_become_parameters_of_every_request(server: ServerProcess) -> None:
    """The stream's metadata is sent once; each request on it carries the forwarded headers."""
    responses: queue.Queue[Any] = queue.Queue()
    c = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        c.start_stream(
            callback=lambda result, error: responses.put(error or result), headers=HEADERS
        )
        for index in range(2):
            c.async_stream_infer("parameters_echo", _echo_inputs(), parameters={"n": str(index)})
        results = [responses.get(timeout=30) for _ in range(2)]
        c.stop_stream()
    finally:
        c.close()
    seen = []
    for result in results:
        assert not isinstance(result, Exception), result
        params = _parameters(result)
        seen.append(params.pop("n"))
        _assert_forwarded(params, {"my_header_1": "my_value_1"})
    assert sorted(seen) == ["0", "1"]


def test_no_headers_no_parameters(server: ServerProcess) -> None:
    c = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        result = c.infer("parameters_echo", _echo_inputs())
    finally:
        c.close()
    _assert_forwarded(_parameters(result), {})


# ------------------------------------------------------------------------- compression


@pytest.mark.parametrize("algorithm", [None, "gzip", "deflate"])
def test_simple_grpc_infer_client_with_compression(
    server: ServerProcess, algorithm: str | None
) -> None:
    c = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        simple_grpc_infer_client(c, compression=algorithm)
    finally:
        c.close()


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_aio_client_with_compression(server: ServerProcess, algorithm: str) -> None:
    async def main() -> None:
        c = aioclient.InferenceServerClient(server.grpc_url)
        try:
            await simple_grpc_infer_aio(c, compression=algorithm)
        finally:
            await c.close()

    asyncio.run(main())


def test_streaming_with_compression(server: ServerProcess) -> None:
    responses: queue.Queue[Any] = queue.Queue()
    c = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        c.start_stream(
            callback=lambda result, error: responses.put(error or result),
            compression_algorithm="gzip",
        )
        inputs, a, b = add_sub_inputs("grpc")
        c.async_stream_infer("simple", inputs)
        result = responses.get(timeout=30)
        c.stop_stream()
    finally:
        c.close()
    assert not isinstance(result, Exception), result
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


class RawCall:
    """One unary gRPC call over a fresh plaintext HTTP/2 connection, with the ``h2`` state
    machine: what the server put on the wire (headers, the message bytes, trailers)."""

    def __init__(self, port: int, method: str, message: bytes, headers: list[tuple[str, str]]):
        self.headers: dict[str, str] = {}
        self.trailers: dict[str, str] = {}
        self.body = bytearray()
        config = h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
        conn = h2.connection.H2Connection(config)
        conn.initiate_connection()
        stream = conn.get_next_available_stream_id()
        request_headers = [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", f"/inference.GRPCInferenceService/{method}"),
            (":authority", f"127.0.0.1:{port}"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
            *headers,
        ]
        conn.send_headers(stream, request_headers)
        conn.send_data(stream, message, end_stream=True)
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            sock.sendall(conn.data_to_send())
            while not self._pump(conn, sock.recv(65536)):
                sock.sendall(conn.data_to_send())

    def _pump(self, conn: h2.connection.H2Connection, data: bytes) -> bool:
        if not data:
            raise ConnectionError("the server closed the connection mid-call")
        for event in conn.receive_data(data):
            if isinstance(event, h2.events.ResponseReceived):
                self.headers = dict(event.headers)  # type: ignore[arg-type]
            elif isinstance(event, h2.events.DataReceived):
                self.body += event.data
                conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.TrailersReceived):
                self.trailers = dict(event.headers)  # type: ignore[arg-type]
            elif isinstance(event, h2.events.StreamReset):
                raise ConnectionError(f"stream reset: {event.error_code!r}")
            elif isinstance(event, h2.events.StreamEnded):
                return True
        return False

    @property
    def status(self) -> int:
        return int(self.trailers.get("grpc-status", self.headers.get("grpc-status", "-1")))

    def message(self) -> tuple[int, bytes]:
        """(compressed flag, payload) of the one response message."""
        assert len(self.body) >= 5, self.body
        length = int.from_bytes(self.body[1:5], "big")
        assert len(self.body) == 5 + length
        return self.body[0], bytes(self.body[5:])


def _simple_request() -> bytes:
    zeros = np.zeros((1, 16), dtype=np.int32)
    request = pb.ModelInferRequest(model_name="simple")
    for name in ("INPUT0", "INPUT1"):
        tensor = request.inputs.add(name=name, datatype="INT32")
        tensor.shape.extend([1, 16])
        request.raw_input_contents.append(zeros.tobytes())
    return _frame(request.SerializeToString())


def _frame(payload: bytes, compressed: bool = False) -> bytes:
    return bytes([int(compressed)]) + len(payload).to_bytes(4, "big") + payload


@pytest.mark.parametrize(
    ("accept", "expected"),
    [
        ("identity,deflate,gzip", "deflate"),  # grpc core: "high" takes the last of gzip, deflate
        ("identity,gzip", "gzip"),
        ("identity", None),
    ],
)
def test_high_compression_level_compresses_responses_as_grpc_core_does(
    server: ServerProcess, accept: str, expected: str | None
) -> None:
    call = RawCall(
        server.ports["grpc"], "ModelInfer", _simple_request(), [("grpc-accept-encoding", accept)]
    )
    assert call.status == 0, (call.headers, call.trailers)
    flag, payload = call.message()
    if expected is None:
        assert call.headers.get("grpc-encoding", "identity") == "identity"
        assert flag == 0
    else:
        assert call.headers.get("grpc-encoding") == expected
        assert flag == 1
        wbits = zlib.MAX_WBITS | (16 if expected == "gzip" else 0)
        payload = zlib.decompress(payload, wbits)
    response = pb.ModelInferResponse.FromString(payload)
    assert [output.name for output in response.outputs] == ["OUTPUT0", "OUTPUT1"]
    assert np.frombuffer(response.raw_output_contents[0], dtype=np.int32).sum() == 0


def test_a_compressed_bomb_is_refused_and_the_server_goes_on(server: ServerProcess) -> None:
    """A few KiB that inflate past the max receive size: RESOURCE_EXHAUSTED, nothing else."""
    bomb = zlib.compress(bytes(16 * MAX_INPUT), 9)
    call = RawCall(
        server.ports["grpc"],
        "ModelInfer",
        _frame(bomb, compressed=True),
        [("grpc-encoding", "deflate")],
    )
    assert call.status == 8, (call.headers, call.trailers)  # RESOURCE_EXHAUSTED
    c = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        simple_grpc_infer_client(c)
    finally:
        c.close()


# ------------------------------------------------------------------------- --reuse-grpc-port


def test_reuse_grpc_port_lets_a_second_socket_bind_it(server: ServerProcess) -> None:
    """With SO_REUSEPORT on the server's socket, another SO_REUSEPORT socket of the same user
    may bind the same address; without it the kernel answers EADDRINUSE."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        try:
            sock.bind(("127.0.0.1", server.ports["grpc"]))
        except OSError as exc:
            assert exc.errno != errno.EADDRINUSE, "the gRPC socket has no SO_REUSEPORT"
            raise


def test_two_servers_share_the_grpc_port(server: ServerProcess, options_repo: Path) -> None:
    port = str(server.ports["grpc"])
    second = ServerProcess([options_repo], "--reuse-grpc-port", "--grpc-port", port)
    try:
        assert second.ports["grpc"] == server.ports["grpc"]
        for _ in range(4):  # the kernel spreads new connections over both listeners
            c = grpcclient.InferenceServerClient(server.grpc_url)
            try:
                simple_grpc_infer_client(c)
            finally:
                c.close()
        assert second.proc.poll() is None and server.proc.poll() is None
    finally:
        second.stop()
