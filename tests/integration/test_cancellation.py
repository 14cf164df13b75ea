"""A client that goes away stops the work that only it was waiting for: queued requests are
dropped, and a running Python model sees ``request.is_cancelled()`` turn true."""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tests.support.models import SLOW_SECONDS
from testkit.server_process import ServerProcess

_PROBE_CONFIG = """\
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "IN", data_type: TYPE_INT32, dims: [ 1 ] } ]
output [ { name: "OUT", data_type: TYPE_INT32, dims: [ 1 ] } ]
"""

# Sends one response, then waits (up to 30 s) for the client to cancel; when it notices, it
# writes the file named by the request parameter "marker" and closes the request.
_PROBE_PY = """\
import json, threading, time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            threading.Thread(target=self.wait, args=(request,), daemon=True).start()
        return None

    def wait(self, request):
        marker = json.loads(request.parameters())["marker"]
        sender = request.get_response_sender()
        out = pb_utils.Tensor("OUT", np.array([1], dtype=np.int32))
        sender.send(pb_utils.InferenceResponse([out]))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not request.is_cancelled():
            time.sleep(0.02)
        if request.is_cancelled():
            with open(marker, "w") as handle:
                handle.write("cancelled")
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
"""


@pytest.fixture(scope="module")
def probe_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("cancel") / "repo"
    (repo / "cancel_probe" / "1").mkdir(parents=True)
    (repo / "cancel_probe" / "config.pbtxt").write_text(_PROBE_CONFIG)
    (repo / "cancel_probe" / "1" / "model.py").write_text(_PROBE_PY)
    proc = ServerProcess([repo])
    yield proc
    proc.stop()


def test_dropped_stream_cancels_the_running_request(
    probe_server: ServerProcess, tmp_path: Path
) -> None:
    marker = tmp_path / "marker"
    client = grpcclient.InferenceServerClient(probe_server.grpc_url)
    responses: queue.Queue = queue.Queue()
    client.start_stream(lambda result, error: responses.put((result, error)))
    inp = grpcclient.InferInput("IN", [1], "INT32")
    inp.set_data_from_numpy(np.array([7], dtype=np.int32))
    client.async_stream_infer(
        "cancel_probe", [inp], request_id="r1", parameters={"marker": str(marker)}
    )
    result, error = responses.get(timeout=30)
    assert error is None and result.as_numpy("OUT").tolist() == [1]
    client.stop_stream(cancel_requests=True)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and not marker.exists():
        time.sleep(0.05)
    assert marker.exists(), "the model never saw its request cancelled"
    assert marker.read_text() == "cancelled"
    # the server goes on serving new streams (a fresh queue: the old stream's callback may
    # still report its own local cancellation)
    responses = queue.Queue()
    client.start_stream(lambda result, error: responses.put((result, error)))
    client.async_stream_infer(
        "cancel_probe", [inp], request_id="r2", parameters={"marker": str(tmp_path / "other")}
    )
    result, error = responses.get(timeout=30)
    assert error is None and result.get_response().id == "r2"
    client.stop_stream(cancel_requests=True)
    client.close()


def test_a_passed_deadline_cancels_the_running_request(
    probe_server: ServerProcess, tmp_path: Path
) -> None:
    """grpc-timeout on a stream: when it passes the call ends DEADLINE_EXCEEDED and the
    request running inside the server is cancelled (the model sees it). The server's own
    deadline, without a client enforcing it, is tested on a raw socket in
    test_grpc_http2.py."""
    marker = tmp_path / "marker"
    client = grpcclient.InferenceServerClient(probe_server.grpc_url)
    responses: queue.Queue = queue.Queue()
    client.start_stream(lambda result, error: responses.put((result, error)), stream_timeout=1.5)
    inp = grpcclient.InferInput("IN", [1], "INT32")
    inp.set_data_from_numpy(np.array([7], dtype=np.int32))
    client.async_stream_infer(
        "cancel_probe", [inp], request_id="d1", parameters={"marker": str(marker)}
    )
    result, error = responses.get(timeout=30)
    assert error is None and result.as_numpy("OUT").tolist() == [1]
    result, error = responses.get(timeout=30)  # the deadline ends the stream
    assert result is None and "DEADLINE_EXCEEDED" in str(error.status())
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and not marker.exists():
        time.sleep(0.05)
    assert marker.exists(), "the model never saw its request cancelled"
    client.stop_stream()
    assert client.is_server_live()
    client.close()


def test_a_cancelled_unary_request_is_still_accounted(server: ServerProcess, protocol: str) -> None:
    """A unary call given up while its model runs: the model's answer, which nobody waits
    for any more, still closes the request (it is counted in the statistics, and nothing
    stays in flight to hold up a graceful shutdown)."""
    import asyncio

    import tritonclient.grpc.aio as grpcaio
    import tritonclient.http.aio as httpaio

    aio = httpaio if protocol == "http" else grpcaio
    kw = {"as_json": True} if protocol == "grpc" else {}

    async def finished(conn) -> int:
        stats = (await conn.get_inference_statistics("slow", **kw))["model_stats"][0]
        counts = stats["inference_stats"]
        return sum(int(counts[k].get("count", 0)) for k in ("success", "fail"))

    async def main() -> tuple[int, int]:
        conn = aio.InferenceServerClient(server.url(protocol))
        try:
            before = await finished(conn)
            inp = aio.InferInput("INPUT0", [1], "FP32")
            inp.set_data_from_numpy(np.ones(1, np.float32))
            call = asyncio.ensure_future(conn.infer("slow", [inp]))
            await asyncio.sleep(SLOW_SECONDS / 4)
            call.cancel()
            await asyncio.gather(call, return_exceptions=True)
            deadline = time.monotonic() + 15
            after = await finished(conn)
            while after == before and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
                after = await finished(conn)
            return before, after
        finally:
            await conn.close()

    before, after = asyncio.run(main())
    assert after == before + 1
