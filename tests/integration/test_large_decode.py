"""One large request does not stall every client (issue 10 item 6): while a 48 MiB BYTES tensor
of empty strings or a 24 MiB one of mixed lengths (HTTP binary; gRPC raw_input_contents and
bytes_contents, on a ModelStreamInfer stream) or a 60 MiB JSON array is decoded,
/v2/health/ready keeps being answered on another connection, and the big request itself is
answered (here: refused by the model's shape, once decoded). No timing assertions: the health
check must be answered several times while a slow decode is in flight, which a loop blocked
for the whole decode cannot do. `python -m bench large-request` measures."""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Callable
from typing import Any

import grpc
import numpy as np
import pytest
from testkit.server_process import ServerProcess
from tritonclient.grpc import service_pb2 as pb

MIB = 1 << 20
BYTES_COUNT = 48 * MIB // 4
HEALTH_ANSWERS = 5
GRPC_OPTIONS = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]


class Health(threading.Thread):
    """GET /v2/health/ready back to back; counts the answers after ``start_counting``."""

    def __init__(self, server: ServerProcess) -> None:
        super().__init__(daemon=True)
        self._conn = http.client.HTTPConnection(server.http_url, timeout=120)
        self.counting = threading.Event()
        self.done = threading.Event()
        self.answers = 0

    def run(self) -> None:
        while not self.done.is_set():
            self._conn.request("GET", "/v2/health/ready")
            response = self._conn.getresponse()
            response.read()
            assert response.status == 200
            if self.counting.is_set() and not self.done.is_set():
                self.answers += 1
            self.done.wait(0.01)
        self._conn.close()


def _with_health(server: ServerProcess, big: Callable[[threading.Event], Any]) -> tuple[Any, int]:
    """Run ``big`` (which sets the event once its request is sent) while polling health."""
    health = Health(server)
    health.start()
    try:
        answer = big(health.counting)
    finally:
        health.done.set()
        health.join(timeout=120)
    return answer, health.answers


def _http(server: ServerProcess, path: str, body: bytes, headers: dict[str, str]) -> Any:
    def big(sent: threading.Event) -> tuple[int, str]:
        conn = http.client.HTTPConnection(server.http_url, timeout=300)
        try:
            conn.request("POST", path, body, headers)
            sent.set()
            response = conn.getresponse()
            return response.status, response.read().decode(errors="replace")
        finally:
            conn.close()

    return big


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _grpc(server: ServerProcess, message: bytes) -> Any:
    """The big message on a ModelStreamInfer stream: grpc pulls the next request only once
    the big one is written out, so ``sent`` is set when the server has (nearly) all of it."""

    def big(sent: threading.Event) -> tuple[str, str]:
        answered = threading.Event()

        def requests() -> Any:
            yield message
            sent.set()
            answered.wait(300)

        with grpc.insecure_channel(server.grpc_url, options=GRPC_OPTIONS) as channel:
            call = channel.stream_stream(
                "/inference.GRPCInferenceService/ModelStreamInfer",
                request_serializer=None,
                response_deserializer=pb.ModelStreamInferResponse.FromString,
            )
            responses = call(requests(), timeout=300)
            first = next(responses)
            answered.set()
            responses.cancel()
        return first.error_message, first.infer_response.model_name

    return big


# A BYTES tensor of empty strings (48 MiB: every length prefix is 0, split by numpy), or of
# mixed lengths ("", "a", ... 24 MiB: scanned element by element on a worker thread).
PAYLOADS = {
    "empty": (BYTES_COUNT, bytes(4 * BYTES_COUNT), b"\x42\x00" * (48 * MIB // 2)),
    "mixed": (
        24 * MIB // 9 * 2,
        b"\x00\x00\x00\x00\x01\x00\x00\x00a" * (24 * MIB // 9),
        b"\x42\x00\x42\x01a" * (24 * MIB // 9),
    ),
}


def _grpc_bytes_message(kind: str, typed: bool) -> tuple[int, bytes]:
    count, raw, contents = PAYLOADS[kind]
    if typed and kind == "empty":
        count = 48 * MIB // 2
    tensor = pb.ModelInferRequest.InferInputTensor(name="INPUT0", datatype="BYTES", shape=[count])
    head = pb.ModelInferRequest(model_name="simple_string").SerializeToString()
    if typed:
        return count, head + _field(5, tensor.SerializeToString() + _field(5, contents))
    return count, head + _field(5, tensor.SerializeToString()) + _field(7, raw)


def _enough_health(kind: str, answers: int) -> None:
    """Mixed lengths take a while to decode (seconds before the fix, with the loop blocked):
    health must be answered meanwhile. Empty strings now decode in a few numpy calls, too
    quickly to count on; their answer is what is checked."""
    if kind == "mixed":
        assert answers >= HEALTH_ANSWERS


@pytest.mark.parametrize("kind", list(PAYLOADS))
def test_http_binary_bytes_tensor(server: ServerProcess, kind: str) -> None:
    count, raw, _ = PAYLOADS[kind]
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "datatype": "BYTES",
                    "shape": [count],
                    "parameters": {"binary_data_size": len(raw)},
                }
            ]
        }
    ).encode()
    big = _http(
        server,
        "/v2/models/simple_string/infer",
        header + raw,
        {"Inference-Header-Content-Length": str(len(header))},
    )
    (status, text), answers = _with_health(server, big)
    assert status == 400, text
    assert f"got [{count}]" in json.loads(text)["error"]
    _enough_health(kind, answers)


def test_http_json_array(server: ServerProcess) -> None:
    count = 30 * MIB
    head = b'{"inputs":[{"name":"INPUT0","datatype":"INT32","shape":[%d],"data":[' % count
    body = head + b"0," * (count - 1) + b"0]}]}"
    big = _http(server, "/v2/models/simple/infer", body, {"Content-Type": "application/json"})
    (status, text), answers = _with_health(server, big)
    assert status == 400, text
    assert f"got [{count}]" in json.loads(text)["error"]
    assert answers >= HEALTH_ANSWERS


@pytest.mark.parametrize("kind", list(PAYLOADS))
@pytest.mark.parametrize("typed", [False, True], ids=["raw_input_contents", "bytes_contents"])
def test_grpc_bytes_tensor(server: ServerProcess, typed: bool, kind: str) -> None:
    count, message = _grpc_bytes_message(kind, typed)
    (error, _), answers = _with_health(server, _grpc(server, message))
    assert "unexpected shape for input 'INPUT0' for model 'simple_string'" in error, error
    assert f"got [{count}]" in error, error
    _enough_health(kind, answers)


def test_large_requests_answered_correctly(server: ServerProcess) -> None:
    """Past the 1 MiB threshold the decode moves to a worker thread: values come back intact
    (mixed-length BYTES over binary HTTP, a large JSON array of INT32)."""
    values = [b"", b"a", b"bc\x00", b"\xff" * 7] * 100_000
    wire = b"".join(len(v).to_bytes(4, "little") + v for v in values)
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "datatype": "BYTES",
                    "shape": [len(values)],
                    "parameters": {"binary_data_size": len(wire)},
                }
            ],
            "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
        }
    ).encode()
    status, text = _post_raw(server, "/v2/models/identity_bytes/infer", header + wire, header)
    assert status == 200
    assert text.endswith(wire)

    data = np.arange(-300_000, 300_000, dtype=np.int32)
    doc = {"inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [data.size], "data": []}]}
    doc["inputs"][0]["data"] = [data[:300_000].tolist(), data[300_000:].tolist()]  # nested
    status, body = _post_raw(server, "/v2/models/identity_int32/infer", json.dumps(doc).encode())
    assert status == 200, body[:200]
    assert json.loads(body)["outputs"][0]["data"] == data.tolist()


def _post_raw(server: ServerProcess, path: str, body: bytes, header: bytes = b"") -> Any:
    conn = http.client.HTTPConnection(server.http_url, timeout=120)
    headers = {"Inference-Header-Content-Length": str(len(header))} if header else {}
    try:
        conn.request("POST", path, body, headers)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()
