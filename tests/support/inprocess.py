"""The fast in-process tier for front-end handlers: a real ``InferenceServer`` started on the
test's own event loop over a small repository (examples' ``simple`` config with its add/sub
ONNX graph, and ``split``, a decoupled ONNX identity), with both doors on in-memory
transports: the real ``HttpApp`` in an ``HttpProtocol`` on ``http_fakes.FakeTransport`` (raw
HTTP/1.1 bytes in, parsed responses out) and the real gRPC method table and ``GrpcEndpoint``
(built by ``frontends/grpc/listener.py:GrpcListener``) in a ``GrpcConnection`` on
``grpc_memory.MemoryTransport``, driven by an h2 client sending KServe protobuf messages.
No socket, no process, no mock of the protocol: real app, codecs, transport and server.

A test module shares one started server (a module-scoped fixture around ``serving``, as
``tests/unit/test_frontends_inprocess.py``'s ``doors``), so each test costs milliseconds:

    with serving(tmp_path) as doors:
        status, headers, body = doors.http("POST", "/v2/models/simple/infer", body)
        answer = doors.grpc_call("ModelInfer", request)   # .status, .message, .reply(type)

The integration tests (``tests/integration``) keep the real sockets, the official clients and
the server process around them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import unquote

import h2.config
import h2.connection
import h2.events
from google.protobuf.message import Message

from tests.support.grpc_memory import MemoryTransport
from testkit.http_fakes import FakeTransport, responses
from tests.support.models import _onnx_bytes, _onnx_identity_fp32, _unary_config

from tritium.frontends.grpc.listener import GrpcListener
from tritium.frontends.http.app import HttpApp
from tritium.frontends.http.limits import HttpLimits
from tritium.frontends.http.protocol import HttpProtocol
from tritium.options import ServerOptions
from tritium.server import InferenceServer
from tritium.transport.grpc.connection import GrpcConnection

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "model_repository"
SERVICE = "/inference.GRPCInferenceService/"
WAIT_S = 10.0  # a generous bound on one exchange (never a timing assertion)
HttpAnswer = tuple[int, dict[str, str], bytes]
T = TypeVar("T")


def _add_sub_onnx() -> bytes:
    """examples/build_models.py's ``simple``: OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 -
    INPUT1, INT32 [batch, 16]."""
    from onnx import TensorProto, helper

    shape = ["batch", 16]
    tensors = ("INPUT0", "INPUT1"), ("OUTPUT0", "OUTPUT1")
    inputs, outputs = (
        [helper.make_tensor_value_info(n, TensorProto.INT32, shape) for n in names]
        for names in tensors
    )
    nodes = [
        helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
        helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"]),
    ]
    return _onnx_bytes(helper.make_graph(nodes, "simple", inputs, outputs))


def write_repository(root: Path) -> Path:
    """``simple`` (examples' config) and ``split`` (decoupled FP32 identity) under ``root``."""
    models = {
        "simple": ((EXAMPLES / "simple" / "config.pbtxt").read_text(), _add_sub_onnx()),
        "split": (
            _unary_config(
                "split",
                "TYPE_FP32",
                [-1],
                backend="onnxruntime",
                extra="model_transaction_policy { decoupled: true }",
            ),
            _onnx_identity_fp32(),
        ),
    }
    for name, (config, graph) in models.items():
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(config)
        (root / name / "1" / "model.onnx").write_bytes(graph)
    return root


@dataclass
class GrpcAnswer:
    """One gRPC call's answer as an h2 client read it: ``status``/``message`` from the
    trailers (``grpc-message`` percent-decoded), the response messages' raw payloads."""

    headers: dict[str, str] = field(default_factory=dict)
    trailers: dict[str, str] = field(default_factory=dict)
    data: bytes = b""
    ended: bool = False

    @property
    def status(self) -> int:
        return int(self.trailers["grpc-status"])

    @property
    def message(self) -> str:
        return unquote(self.trailers.get("grpc-message", ""))

    def payloads(self) -> list[bytes]:
        found, data = [], self.data
        while data:
            assert data[0] == 0, "an uncompressed message"
            size = int.from_bytes(data[1:5], "big")
            found.append(data[5 : 5 + size])
            data = data[5 + size :]
        return found

    def reply(self, kind: type[T]) -> T:
        (payload,) = self.payloads()
        reply = kind()
        reply.ParseFromString(payload)  # type: ignore[attr-defined]
        return reply


def _text(pairs: Any) -> dict[str, str]:
    return {bytes(k).decode(): bytes(v).decode() for k, v in pairs}


class InProcess:
    """A started server and its two doors on one event loop (``run`` drives it)."""

    def __init__(self, repository: Path, options: ServerOptions | None = None) -> None:
        base = options if options is not None else ServerOptions()
        self.options = _with_repository(base, repository)
        self.loop = asyncio.new_event_loop()
        self.server = InferenceServer(self.options)
        self.run(self.server.start())
        self.app = HttpApp(self.server)
        self.limits = HttpLimits.from_options(self.options)
        self.grpc = GrpcListener(self.server, None).endpoint

    def run(self, work: Awaitable[T]) -> T:
        return self.loop.run_until_complete(asyncio.wait_for(work, WAIT_S))

    def close(self) -> None:
        try:
            self.run(self.server.stop())
        finally:
            self.loop.close()

    # ------------------------------------------------------------------ HTTP/1.1

    def http_raw(self, data: bytes, answers: int = 1) -> list[HttpAnswer]:
        """Feed ``data`` to one new connection; the first ``answers`` responses parsed."""
        return self.run(self._http(data, answers))

    def http(
        self,
        method: str,
        path: str,
        body: bytes = b"",
        headers: dict[str, str] | None = None,
    ) -> HttpAnswer:
        head = {"Host": "test", "Content-Length": str(len(body)), **(headers or {})}
        lines = [f"{method} {path} HTTP/1.1", *(f"{k}: {v}" for k, v in head.items())]
        (answer,) = self.http_raw("\r\n".join(lines).encode() + b"\r\n\r\n" + body)
        return answer

    async def _http(self, data: bytes, answers: int) -> list[HttpAnswer]:
        protocol = HttpProtocol(self.app, self.limits, self.app.render_error)
        transport = FakeTransport(protocol)
        protocol.connection_made(transport)
        protocol.data_received(data)
        got = bytearray()
        try:
            while True:
                await asyncio.sleep(0)
                got += transport.take()
                parsed = _parsed(bytes(got))
                if parsed is not None and len(parsed) >= answers:
                    return parsed
        finally:
            transport.lose(None)

    # ------------------------------------------------------------------ gRPC

    def grpc_call(self, method: str, request: Message, **metadata: str) -> GrpcAnswer:
        """One unary call of ``method`` (``ModelInfer``, or a full path) with ``request``."""
        path = method if method.startswith("/") else SERVICE + method
        return self.run(self._grpc(path, request.SerializeToString(), metadata))

    async def _grpc(self, path: str, payload: bytes, metadata: dict[str, str]) -> GrpcAnswer:
        client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        client.initiate_connection()
        transport = MemoryTransport()
        conn = GrpcConnection(self.grpc)
        conn.connection_made(transport)
        sid = client.get_next_available_stream_id()
        headers = [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", path),
            (":authority", "test"),
            ("te", "trailers"),
            ("content-type", "application/grpc"),
            *metadata.items(),
        ]
        client.send_headers(sid, headers)
        client.send_data(sid, b"\0" + len(payload).to_bytes(4, "big") + payload, end_stream=True)
        answer = GrpcAnswer()
        try:
            while not answer.ended:
                if pending := client.data_to_send():
                    conn.data_received(pending)
                await asyncio.sleep(0)
                for event in client.receive_data(transport.take()):
                    _record(client, answer, event)
            return answer
        finally:
            conn.connection_lost(None)


def _with_repository(options: ServerOptions, repository: Path) -> ServerOptions:
    return replace(options, repository=replace(options.repository, paths=(repository,)))


def _parsed(data: bytes) -> list[HttpAnswer] | None:
    """The complete responses in ``data``, or None while the last one is partial."""
    try:
        found = responses(data)
    except (IndexError, KeyError, ValueError):
        return None
    for _, headers, body in found:
        if "content-length" in headers and len(body) != int(headers["content-length"]):
            return None
    return found


def _record(client: Any, answer: GrpcAnswer, event: Any) -> None:
    if isinstance(event, h2.events.ResponseReceived):
        answer.headers = _text(event.headers)
        if "grpc-status" in answer.headers:  # trailers-only
            answer.trailers = answer.headers
    elif isinstance(event, h2.events.DataReceived):
        answer.data += event.data
        client.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
    elif isinstance(event, h2.events.TrailersReceived):
        answer.trailers = _text(event.headers)
    elif isinstance(event, h2.events.StreamEnded):
        answer.ended = True


@contextmanager
def serving(root: Path, options: ServerOptions | None = None) -> Iterator[InProcess]:
    """A started ``InProcess`` over ``write_repository(root)``, stopped on exit."""
    doors = InProcess(write_repository(root), options)
    try:
        yield doors
    finally:
        doors.close()
