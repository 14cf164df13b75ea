"""One large request must not stall every client (issue 10 item 6): figures.

    python -m bench large-request [--cases ...] [--mib 48]

For each hostile case a fresh server is started (so its peak RSS, ``VmHWM`` from
/proc/<pid>/status, belongs to that case alone); one thread polls ``/v2/health/ready`` every
~10 ms on its own keep-alive connection while the big request is in flight, and the longest
health latency seen is reported with the big request's answer and duration. Cases:

- ``http-binary-bytes``: a BYTES tensor of empty strings, 48 MiB in Triton's binary extension;
- ``grpc-raw-bytes``: the same tensor in ``raw_input_contents``;
- ``grpc-bytes-contents``: 48 MiB of empty strings in the typed ``bytes_contents``;
- ``http-json``: a 60 MiB JSON ``data`` array of INT32 zeros.

The tensors go to ``simple_string`` / ``simple`` with a shape those models refuse, so what is
measured is decoding (the request is refused with a clear error once decoded).
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))  # build_models, a script importing its siblings

from build_models import build_examples  # noqa: E402
from bench import proctree  # noqa: E402
from bench.process import ServerProcess  # noqa: E402

MIB = 1 << 20


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field, built by hand (fast for huge payloads)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _grpc_request(mib: int, typed: bool) -> bytes:
    from tritonclient.grpc import service_pb2 as pb

    count = mib * MIB // (2 if typed else 4)
    tensor = pb.ModelInferRequest.InferInputTensor(name="INPUT0", datatype="BYTES", shape=[count])
    head = pb.ModelInferRequest(model_name="simple_string").SerializeToString()
    if typed:  # bytes_contents (field 8): tag 0x42, length 0, per empty string
        contents = b"\x42\x00" * count
        return head + _field(5, tensor.SerializeToString() + _field(5, contents))
    return head + _field(5, tensor.SerializeToString()) + _field(7, bytes(4 * count))


def _http_binary(server: ServerProcess, mib: int) -> Callable[[], tuple]:
    count = mib * MIB // 4
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "datatype": "BYTES",
                    "shape": [count],
                    "parameters": {"binary_data_size": 4 * count},
                }
            ]
        }
    ).encode()
    body = header + bytes(4 * count)
    headers = {"Inference-Header-Content-Length": str(len(header))}
    return lambda: _post(server, "/v2/models/simple_string/infer", body, headers)


def _http_json(server: ServerProcess, mib: int) -> Callable[[], tuple]:
    count = mib * MIB // 2
    head = b'{"inputs":[{"name":"INPUT0","datatype":"INT32","shape":[%d],"data":[' % count
    body = head + b"0," * (count - 1) + b"0]}]}"
    return lambda: _post(server, "/v2/models/simple/infer", body, {})


def _post(server: ServerProcess, path: str, body: bytes, headers: dict[str, str]) -> tuple:
    conn = http.client.HTTPConnection(server.http_url, timeout=300)
    conn.request("POST", path, body, {"Content-Type": "application/octet-stream", **headers})
    response = conn.getresponse()
    text = response.read()[:200].decode(errors="replace")
    conn.close()
    return response.status, text


def _grpc(server: ServerProcess, mib: int, typed: bool) -> Callable[[], tuple]:
    message = _grpc_request(mib, typed)
    return lambda: _grpc_send(server, message)


def _grpc_send(server: ServerProcess, message: bytes) -> tuple[str, str]:
    import grpc
    from tritonclient.grpc import service_pb2 as pb

    options = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
    with grpc.insecure_channel(server.grpc_url, options=options) as channel:
        call = channel.unary_unary(
            "/inference.GRPCInferenceService/ModelInfer",
            request_serializer=None,
            response_deserializer=pb.ModelInferResponse.FromString,
        )
        try:
            call(message, timeout=300)
        except grpc.RpcError as exc:
            return str(exc.code()), (exc.details() or "")[:200]
    return "OK", ""


# Each case builds its request (before the health poller starts: building 48 MiB in this
# process would hold its GIL and delay the poller) and returns what sends it.
CASES: dict[str, Callable[[ServerProcess, int], Callable[[], tuple]]] = {
    "http-binary-bytes": _http_binary,
    "grpc-raw-bytes": lambda s, m: _grpc(s, m, typed=False),
    "grpc-bytes-contents": lambda s, m: _grpc(s, m, typed=True),
    "http-json": lambda s, m: _http_json(s, m + m // 4),  # 48 → 60 MiB
}


class HealthPoller(threading.Thread):
    """GET /v2/health/ready every ~10 ms on one connection; keeps the longest latency."""

    def __init__(self, server: ServerProcess) -> None:
        super().__init__(daemon=True)
        self._conn = http.client.HTTPConnection(server.http_url, timeout=60)
        self.stop = threading.Event()
        self.longest = 0.0
        self.count = 0

    def run(self) -> None:
        while not self.stop.is_set():
            start = time.perf_counter()
            self._conn.request("GET", "/v2/health/ready")
            self._conn.getresponse().read()
            self.longest = max(self.longest, time.perf_counter() - start)
            self.count += 1
            time.sleep(0.01)
        self._conn.close()


def _vm_hwm_mib(pid: int) -> float:
    hwm = proctree.status(pid).get("VmHWM")
    return float("nan") if hwm is None else hwm / 1024


def run_case(repo: Path, name: str, mib: int) -> dict[str, object]:
    server = ServerProcess([repo], "--http-max-input-size", str(256 * MIB))
    try:
        idle_rss = _vm_hwm_mib(server.proc.pid)
        send = CASES[name](server, mib)
        poller = HealthPoller(server)
        poller.start()
        time.sleep(0.2)
        start = time.perf_counter()
        status, text = send()
        took = time.perf_counter() - start
        time.sleep(0.1)
        poller.stop.set()
        poller.join()
        return {
            "case": name,
            "answer": f"{status} {text[:90]}",
            "request_s": round(took, 2),
            "health_max_ms": round(poller.longest * 1000, 1),
            "health_polls": poller.count,
            "rss_idle_mib": round(idle_rss),
            "rss_peak_mib": round(_vm_hwm_mib(server.proc.pid)),
        }
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    parser.add_argument("--mib", type=int, default=48, help="BYTES tensor size (JSON: 1.25x)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "repo"
        build_examples(repo)
        for name in args.cases:
            print(json.dumps(run_case(repo, name, args.mib)), flush=True)
