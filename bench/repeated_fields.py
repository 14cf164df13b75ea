"""One gRPC message of many empty repeated entries must not stall every client (issue 44 C1):
figures.

    python -m bench repeated-fields [--cases ...] [--kib 976 6144]

A message of N empty ``inputs`` (2 bytes each on the wire), ``outputs``, request
``parameters`` or shape dimensions of one input is sent to ``identity_fp32`` over ModelInfer
or on a ModelStreamInfer stream, while one thread polls ``/v2/health/ready`` every ~10 ms on its
own keep-alive connection (``large_decode.HealthPoller``); the longest health latency seen is
reported with the message's answer and how long it took.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

from bench.large_decode import HealthPoller, _field  # noqa: E402
from bench.kit.models import build_test_repository  # noqa: E402
from bench.process import ServerProcess  # noqa: E402

MODEL = "identity_fp32"
# The entry each case repeats: a key byte and an empty length (or a zero varint).
ENTRIES = {
    "inputs": b"\x2a\x00",  # ModelInferRequest.inputs (5), empty
    "outputs": b"\x32\x00",  # ModelInferRequest.outputs (6), empty
    "parameters": b"\x22\x00",  # ModelInferRequest.parameters (4), an empty map entry
    "rank": b"\x18\x00",  # InferInputTensor.shape (3), one unpacked dimension 0
}


def message(kind: str, size: int) -> bytes:
    head = _field(1, MODEL.encode())
    entries = ENTRIES[kind] * (size // 2)
    if kind == "rank":
        return head + _field(5, _field(1, b"INPUT0") + _field(2, b"FP32") + entries)
    return head + entries


def send(server: ServerProcess, raw: bytes, stream: bool) -> tuple[str, str]:
    import grpc
    from tritonclient.grpc import service_pb2 as pb

    options = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
    with grpc.insecure_channel(server.grpc_url, options=options) as channel:
        if stream:
            call = channel.stream_stream(
                "/inference.GRPCInferenceService/ModelStreamInfer",
                request_serializer=None,
                response_deserializer=pb.ModelStreamInferResponse.FromString,
            )
            answer = next(call(iter([raw]), timeout=300))
            return "STREAM", answer.error_message[:200]
        unary = channel.unary_unary(
            "/inference.GRPCInferenceService/ModelInfer",
            request_serializer=None,
            response_deserializer=pb.ModelInferResponse.FromString,
        )
        try:
            unary(raw, timeout=300)
        except grpc.RpcError as exc:
            return str(exc.code()), (exc.details() or "")[:200]
    return "OK", ""


def run_case(server: ServerProcess, kind: str, kib: int, stream: bool) -> dict[str, object]:
    raw = message(kind, kib * 1024)
    poller = HealthPoller(server)
    poller.start()
    time.sleep(0.3)
    start = time.perf_counter()
    status, text = send(server, raw, stream)
    took = time.perf_counter() - start
    time.sleep(0.1)
    poller.stop.set()
    poller.join()
    return {
        "case": f"{'stream' if stream else 'unary'}-{kind}",
        "kib": kib,
        "entries": kib * 1024 // 2,
        "answer": f"{status} {text[:100]}",
        "request_s": round(took, 3),
        "health_max_ms": round(poller.longest * 1000, 1),
        "health_polls": poller.count,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", nargs="+", choices=list(ENTRIES), default=list(ENTRIES))
    parser.add_argument("--kib", nargs="+", type=int, default=[976, 6144])
    parser.add_argument("--stream", action="store_true", help="ModelStreamInfer as well")
    parser.add_argument("--log", action="store_true", help="print the server log's tail")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        repo = build_test_repository(Path(tmp) / "repo", [MODEL])
        server = ServerProcess([repo], "--http-max-input-size", str(64 << 20), workdir=Path(tmp))
        try:
            for kind in args.cases:
                for kib in args.kib:
                    for stream in (False, True) if args.stream else (False,):
                        print(json.dumps(run_case(server, kind, kib, stream)), flush=True)
        finally:
            server.stop()
            if args.log:
                print((Path(tmp) / "server.log").read_text()[-4000:])
