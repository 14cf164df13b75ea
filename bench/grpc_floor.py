"""grpcio's server floor on this machine, for comparison with tritium's gRPC rows.

Starts a bare grpcio server whose ``ModelInfer`` only computes add/sub on the two INT32 [1,16]
inputs (no model repository, no validation, no scheduling) and drives it with the same kind
of load as the scenario suites: tritonclient's asyncio gRPC client, closed loop. Two servers:
grpc.aio on uvloop (tritium's server before its own HTTP/2 transport) and grpcio's
synchronous thread-pool server. Both also answer ``ModelStreamInfer`` the same way, one request
after the other per stream (the ``grpc`` scenario suite measures the grpc.aio one as its
floor, ``start_server``).

    python -m bench grpcio-floor [--seconds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import subprocess
import sys
import time
from typing import IO

import numpy as np
import tritonclient.grpc.aio as grpcaio

from bench.proctree import cpu_seconds

_SERVER = r"""
import sys
import numpy as np
import grpc
from tritonclient.grpc import service_pb2 as pb, service_pb2_grpc as pbg


def answer(req):
    a = np.frombuffer(req.raw_input_contents[0], np.int32)
    b = np.frombuffer(req.raw_input_contents[1], np.int32)
    r = pb.ModelInferResponse(model_name=req.model_name, model_version="1", id=req.id)
    r.outputs.add(name="OUTPUT0", datatype="INT32", shape=[1, 16])
    r.outputs.add(name="OUTPUT1", datatype="INT32", shape=[1, 16])
    r.raw_output_contents.extend([(a + b).tobytes(), (a - b).tobytes()])
    return r


def stream_answer(req):
    r = pb.ModelStreamInferResponse(infer_response=answer(req))
    r.infer_response.parameters["triton_final_response"].bool_param = True  # as Triton
    return r


class Aio(pbg.GRPCInferenceServiceServicer):
    async def ModelInfer(self, req, ctx):
        return answer(req)

    async def ModelStreamInfer(self, requests, ctx):
        async for req in requests:
            yield stream_answer(req)


class Sync(pbg.GRPCInferenceServiceServicer):
    def ModelInfer(self, req, ctx):
        return answer(req)

    def ModelStreamInfer(self, requests, ctx):
        for req in requests:
            yield stream_answer(req)


async def serve_aio(port):
    server = grpc.aio.server()
    pbg.add_GRPCInferenceServiceServicer_to_server(Aio(), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


mode, port = sys.argv[1], int(sys.argv[2])
if mode == "aio":
    import uvloop
    uvloop.run(serve_aio(port))
else:
    from concurrent.futures import ThreadPoolExecutor
    server = grpc.server(ThreadPoolExecutor(16))
    pbg.add_GRPCInferenceServiceServicer_to_server(Sync(), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    server.wait_for_termination()
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def _load(url: str, concurrency: int, seconds: float) -> list[float]:
    client = grpcaio.InferenceServerClient(url)
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = [grpcaio.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
    for inp in inputs:
        inp.set_data_from_numpy(a)
    latencies: list[float] = []
    stop = time.monotonic() + seconds

    async def worker() -> None:
        while time.monotonic() < stop:
            started = time.perf_counter()
            result = await client.infer("simple", inputs)
            latencies.append(time.perf_counter() - started)
            assert (result.as_numpy("OUTPUT0") == 2 * a).all()

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    await client.close()
    return latencies


def start_server(
    mode: str, log: IO[bytes] | None = None, timeout: float = 30.0
) -> tuple[subprocess.Popen, int]:
    """The floor server (``mode``: ``aio`` or ``sync``) in a child process on 127.0.0.1 and
    its port, once its channel connects (its output to ``log``, else inherited)."""
    import grpc

    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-c", _SERVER, mode, str(port)], stdout=log, stderr=log
    )
    deadline = time.monotonic() + timeout
    while True:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            try:
                grpc.channel_ready_future(channel).result(timeout=0.5)
                return proc, port
            except grpc.FutureTimeoutError:
                pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            raise RuntimeError(f"grpc-{mode} floor server did not start (exit {proc.returncode})")


def measure(mode: str, seconds: float) -> None:
    proc, port = start_server(mode)
    try:
        asyncio.run(_load(f"127.0.0.1:{port}", 4, 0.5))  # warm-up
        for concurrency in (1, 16):
            cpu = cpu_seconds(proc.pid)
            latencies = sorted(asyncio.run(_load(f"127.0.0.1:{port}", concurrency, seconds)))
            used = cpu_seconds(proc.pid) - cpu
            count = len(latencies)
            print(
                f"| grpc-{mode} floor | {concurrency} | {count / seconds:,.0f} | "
                f"{latencies[count // 2] * 1e3:.3f} | {latencies[int(count * 0.99)] * 1e3:.3f} | "
                f"{used / count * 1e6:.0f} |"
            )
    finally:
        proc.kill()
        proc.wait()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args(argv)
    print("| server | conc | infer/s | p50 ms | p99 ms | server CPU µs/call |")
    print("|---|--:|--:|--:|--:|--:|")
    for mode in ("aio", "sync"):
        measure(mode, args.seconds)
