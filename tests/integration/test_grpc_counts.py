"""One gRPC message of many empty repeated entries (issue 44 C1): 2 bytes each on the wire,
500k ``inputs`` in 976 KiB. Such a message is refused INVALID_ARGUMENT from the first walk over
its bytes (``wire._Census``), over ModelInfer and on a ModelStreamInfer stream (an error
response in the stream, which then answers its next message), and the connection keeps
serving. Meanwhile another client polls ``/v2/health/ready``: the longest latency it saw is
printed (not asserted; `python -m bench repeated-fields` measures)."""

from __future__ import annotations

import http.client
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest
from testkit.grpc_raw import (
    INFER,
    MAX_INPUT,
    OK,
    STREAM,
    fp32_output,
    fp32_request,
    start_server,
)
from testkit.h2client import H2Client, grpc_message
from tests.support.models import build_test_repository
from testkit.server_process import ServerProcess
from tritonclient.grpc import service_pb2 as pb

INVALID_ARGUMENT = 3
MODEL = "identity_fp32"


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _input(extra: bytes) -> bytes:
    return _field(5, _field(1, b"INPUT0") + _field(2, b"FP32") + extra)


# kind -> (message of about ``size`` bytes, the phrase of its refusal)
def _message(kind: str, size: int) -> tuple[bytes, str]:
    head = _field(1, MODEL.encode())
    count = size // 2
    if kind == "inputs":  # empty InferInputTensor entries
        return head + b"\x2a\x00" * count, "more than 1024 inputs in one request"
    if kind == "outputs":
        return head + b"\x32\x00" * count, "more than 1024 outputs in one request"
    if kind == "parameters":  # empty map entries of ModelInferRequest.parameters
        return head + b"\x22\x00" * count, "more than 128 parameters in one request"
    if kind == "input_parameters":
        return head + _input(b"\x22\x00" * count), "more than 128 parameters for input 'INPUT0'"
    if kind == "rank":  # one packed shape of ``size`` dimensions 0
        phrase = "unable to parse 'shape' for input 'INPUT0': more than 32 dimensions"
        return head + _input(_field(3, bytes(size))), phrase
    assert kind == "unknown_fields"  # field 15, empty, repeated
    return head + b"\x7a\x00" * count, "more than 8192 fields"


KINDS = ["inputs", "outputs", "parameters", "input_parameters", "rank", "unknown_fields"]
# 976 KiB is decoded on the event loop, 3.5 MiB on a worker thread (past OFFLOAD_BYTES).
SIZES = [976 << 10, 7 * MAX_INPUT // 8]


@pytest.fixture(scope="module")
def counts_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = build_test_repository(tmp_path_factory.mktemp("counts") / "repo", [MODEL])
    proc = start_server([repo], [MODEL])
    yield proc
    proc.stop()


class Health(threading.Thread):
    """GET /v2/health/ready back to back on its own connection; keeps the longest latency."""

    def __init__(self, server: ServerProcess) -> None:
        super().__init__(daemon=True)
        self._conn = http.client.HTTPConnection(server.http_url, timeout=60)
        self.done = threading.Event()
        self.longest = 0.0
        self.answers = 0

    def run(self) -> None:
        while not self.done.is_set():
            start = time.perf_counter()
            self._conn.request("GET", "/v2/health/ready")
            response = self._conn.getresponse()
            response.read()
            assert response.status == 200
            self.longest = max(self.longest, time.perf_counter() - start)
            self.answers += 1
            self.done.wait(0.005)
        self._conn.close()

    def __enter__(self) -> Health:
        self.start()
        time.sleep(0.1)
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.join(timeout=60)


def _good(client: H2Client) -> None:
    """The connection still serves: a plain ModelInfer on it answers right."""
    result = client.call(INFER, fp32_request(MODEL, np.arange(4)))
    assert result.status == OK, result.message
    answer = pb.ModelInferResponse.FromString(result.payloads()[0])
    np.testing.assert_array_equal(fp32_output(answer), np.arange(4, dtype=np.float32))


@pytest.mark.parametrize("size", SIZES, ids=["976KiB", "3.5MiB"])
@pytest.mark.parametrize("kind", KINDS)
def test_unary_refused_from_the_counts(counts_server: ServerProcess, kind: str, size: int) -> None:
    message, phrase = _message(kind, size)
    with H2Client(counts_server.grpc_url) as client, Health(counts_server) as health:
        start = time.perf_counter()
        result = client.call(INFER, message, timeout=60)
        took = time.perf_counter() - start
        assert result.status == INVALID_ARGUMENT, result.message
        assert phrase in result.message, result.message
        _good(client)
    print(
        f"unary {kind} {len(message)} bytes: refused in {took * 1000:.1f} ms; another "
        f"client's longest health latency {health.longest * 1000:.1f} ms ({health.answers})"
    )


@pytest.mark.parametrize("size", SIZES, ids=["976KiB", "3.5MiB"])
@pytest.mark.parametrize("kind", KINDS)
def test_stream_answers_the_error_and_goes_on(
    counts_server: ServerProcess, kind: str, size: int
) -> None:
    message, phrase = _message(kind, size)
    good = fp32_request(MODEL, np.arange(3), rid="after")
    with H2Client(counts_server.grpc_url) as client, Health(counts_server) as health:
        sid = client.start_call(STREAM)
        start = time.perf_counter()
        client.send_data(sid, grpc_message(message) + grpc_message(good), end_stream=True)
        result = client.streams[sid]
        assert client.wait_for(lambda: result.done, 60)
        took = time.perf_counter() - start
        assert result.status == OK, result.message
        answers = [pb.ModelStreamInferResponse.FromString(p) for p in result.payloads()]
        assert len(answers) == 2, answers
        assert phrase in answers[0].error_message, answers[0].error_message
        assert answers[1].error_message == ""
        assert answers[1].infer_response.id == "after"
        np.testing.assert_array_equal(fp32_output(answers[1].infer_response), np.arange(3))
        _good(client)
    print(
        f"stream {kind} {len(message)} bytes: both answered in {took * 1000:.1f} ms; another "
        f"client's longest health latency {health.longest * 1000:.1f} ms ({health.answers})"
    )


def test_more_inputs_than_the_model_has(counts_server: ServerProcess) -> None:
    """Inputs past the model's own count: Triton's count check comes first (its wording),
    before any input's name is looked at."""
    request = pb.ModelInferRequest(model_name=MODEL)
    for index in range(3):
        request.inputs.add(name=f"EXTRA{index}", datatype="FP32", shape=[1])
        request.raw_input_contents.append(np.zeros(1, np.float32).tobytes())
    with H2Client(counts_server.grpc_url) as client:
        result = client.call(INFER, request.SerializeToString())
        assert result.status == INVALID_ARGUMENT, result.message
        assert f"expected 1 inputs but got 3 inputs for model '{MODEL}'" in result.message
        _good(client)
