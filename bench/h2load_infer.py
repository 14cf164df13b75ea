"""A cheap closed-loop inference client for the benches: ``h2load`` (Debian's nghttp2-client, a
C client) sending one prebuilt request over and over, gRPC (a length-prefixed
ModelInferRequest, inputs in ``raw_input_contents``) or HTTP/1.1 (the binary tensor
extension: a JSON header then the raw bytes). The client then costs almost nothing next to the
server, and it encodes nothing per request, as an in-process loop calling the framework does
not. The server's inference statistics give the count of successful inferences (h2load counts
a gRPC error as a success: its HTTP status is 200).

Also: the split of per-thread CPU (bench/proctree.py thread_cpu) into the loop and the rest.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass

import numpy as np

GRPC_PATH = "/inference.GRPCInferenceService/ModelInfer"


def grpc_body(model: str, inputs: dict[str, np.ndarray], outputs: tuple[str, ...] = ()) -> bytes:
    """One gRPC message (5-byte prefix) of a ModelInferRequest with raw contents."""
    from tritonclient.grpc import service_pb2 as pb

    message = pb.ModelInferRequest(model_name=model)
    for name, array in inputs.items():
        message.inputs.add(name=name, datatype=_wire(array), shape=list(array.shape))
        message.raw_input_contents.append(np.ascontiguousarray(array).tobytes())
    for name in outputs:
        message.outputs.add(name=name)
    data = message.SerializeToString()
    return b"\0" + len(data).to_bytes(4, "big") + data


def http_body(inputs: dict[str, np.ndarray], outputs: tuple[str, ...] = ()) -> tuple[bytes, int]:
    """The binary-extension body (JSON header, then each input's bytes) and the header's
    length (the Inference-Header-Content-Length)."""
    header = {
        "inputs": [
            {
                "name": name,
                "datatype": _wire(array),
                "shape": list(array.shape),
                "parameters": {"binary_data_size": array.nbytes},
            }
            for name, array in inputs.items()
        ],
        "outputs": [{"name": n, "parameters": {"binary_data": True}} for n in outputs],
    }
    head = json.dumps(header).encode()
    return head + b"".join(np.ascontiguousarray(a).tobytes() for a in inputs.values()), len(head)


_WIRE = {"float32": "FP32", "int32": "INT32", "int64": "INT64", "float64": "FP64"}


def _wire(array: np.ndarray) -> str:
    return _WIRE[str(array.dtype)]


@dataclass
class Load:
    """One h2load window's client figures."""

    requests: int  # what h2load counted done
    seconds: float
    mean_latency_us: float


def h2load(  # noqa: PLR0913 - one run's settings
    url: str,
    body: bytes,
    headers: list[str],
    seconds: float,
    connections: int = 1,
    streams: int = 1,
    h1: bool = False,
) -> Load:
    """``h2load`` for ``seconds`` (after a short warm-up) with ``connections`` x ``streams``
    requests in flight (HTTP/1.1: one per connection)."""
    binary = shutil.which("h2load")
    if binary is None:
        raise SystemExit("h2load not found: `make h2load-deps` installs nghttp2-client")
    with tempfile.NamedTemporaryFile(suffix=".bin") as handle:
        handle.write(body)
        handle.flush()
        command = [
            binary, "-D", f"{round(seconds * 1000)}ms", "--warm-up-time", "300ms",
            "-c", str(connections),
            "-m", "1" if h1 else str(streams), "-d", handle.name, url,
        ]  # fmt: skip
        for header in headers:
            command += ["-H", header]
        if h1:
            command.insert(1, "--h1")
        out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    done = re.search(r"requests: \d+ total, \d+ started, (\d+) done", out)
    mean = re.search(r"time for request:\s+\S+\s+\S+\s+(\S+)", out)
    if done is None:
        raise RuntimeError(f"h2load printed no counts:\n{out}")
    return Load(int(done.group(1)), seconds, _micros(mean.group(1)) if mean else 0.0)


def _micros(text: str) -> float:
    for unit, scale in (("us", 1.0), ("ms", 1e3), ("s", 1e6)):
        if text.endswith(unit):
            return float(text[: -len(unit)]) * scale
    return float(text)


def grpc_headers() -> list[str]:
    return ["content-type: application/grpc", "te: trailers"]


def http_headers(header_length: int) -> list[str]:
    return [
        "content-type: application/octet-stream",
        f"inference-header-content-length: {header_length}",
    ]


def thread_delta(
    before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]], pid: int
) -> dict[str, float]:
    """CPU seconds between two snapshots: the main thread (the event loop) and the rest."""
    loop = after.get(pid, ("", 0.0))[1] - before.get(pid, ("", 0.0))[1]
    total = sum(v for _, v in after.values()) - sum(v for _, v in before.values())
    return {"loop": loop, "other_threads": total - loop, "total": total}
