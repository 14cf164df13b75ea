"""Drive a gRPC server with @grpc/grpc-js on Node.js (tests/interop/node/client.js).

grpc-js is an HTTP/2 + gRPC implementation independent of grpcio (and of tritium's own
transport), so a test passing through it shows interoperability, not one stack agreeing with
itself. Protobuf stays here: requests are serialised with tritonclient's generated classes and
the script moves bytes; responses come back as bytes for the test to decode.

    from tests.support.node_grpc import NodeCall, run_node
    run = run_node(server.grpc_url, [NodeCall.unary(INFER, request)])
    run.calls[0].status  # 0: OK
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.message import Message

NODE_DIR = Path(__file__).resolve().parents[1] / "interop" / "node"
CLIENT = NODE_DIR / "client.js"
SERVICE = "/inference.GRPCInferenceService/"
GZIP, DEFLATE = 2, 1  # grpc-js's grpc.default_compression_algorithm values
# gRPC status codes (as grpc-js reports them)
OK, CANCELLED, DEADLINE_EXCEEDED, UNIMPLEMENTED, UNAVAILABLE = 0, 1, 4, 12, 14
RUN_TIMEOUT = 60.0  # seconds a whole run may take (the script gives up ~10 s earlier)


def node_missing() -> str | None:
    """Why the Node interop tests cannot run here (a skip reason), or None when they can.

    Node absent is a reason to skip; Node present without grpc-js installed is a setup error
    the test must report, not hide."""
    if shutil.which("node") is None:
        return "node is not installed: the @grpc/grpc-js interop tests need Node.js (>= 18)"
    return None


def check_installed() -> None:
    if not (NODE_DIR / "node_modules" / "@grpc" / "grpc-js").is_dir():
        raise RuntimeError(f"@grpc/grpc-js is not installed in {NODE_DIR}: run `make interop-deps`")


@dataclass
class NodeCall:
    """One call in a run; see client.js for each field's meaning."""

    method: str
    kind: str
    requests: list[bytes]
    gates: list[int] | None = None
    half_close: bool = True
    deadline_ms: int | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    cancel_after_responses: int | None = None
    cancel_after_ms: int | None = None

    @classmethod
    def unary(cls, method: str, request: Message | bytes, **kw: Any) -> NodeCall:
        return cls(_path(method), "unary", [_bytes(request)], **kw)

    @classmethod
    def bidi(cls, method: str, requests: list[Message], **kw: Any) -> NodeCall:
        return cls(_path(method), "bidi", [_bytes(r) for r in requests], **kw)

    def job(self) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "method": self.method,
            "kind": self.kind,
            "requests": [base64.b64encode(r).decode() for r in self.requests],
            "half_close": self.half_close,
            "metadata": self.metadata,
        }
        optional = ("gates", "deadline_ms", "cancel_after_responses", "cancel_after_ms")
        spec.update({k: getattr(self, k) for k in optional if getattr(self, k) is not None})
        return spec


@dataclass
class CallResult:
    status: int | None = None
    details: str = ""
    trailers: dict[str, str] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    responses: list[bytes] = field(default_factory=list)
    written_at: list[int] = field(default_factory=list)  # requests written when each arrived


@dataclass
class NodeRun:
    calls: list[CallResult]
    wire: list[dict[str, Any]]  # per HTTP/2 stream: path, grpc_encoding, message flags
    stderr: str


def run_node(
    target: str,
    calls: list[NodeCall],
    *,
    channel_options: dict[str, Any] | None = None,
    tls: dict[str, str] | None = None,
    serial: bool = False,
) -> NodeRun:
    """Run ``calls`` on one grpc-js channel to ``target`` (concurrently unless ``serial``)."""
    check_installed()
    job = {
        "target": target,
        "channel_options": channel_options or {},
        "tls": tls,
        "serial": serial,
        "timeout_ms": int((RUN_TIMEOUT - 10) * 1000),
        "calls": [call.job() for call in calls],
    }
    done = subprocess.run(
        ["node", str(CLIENT)],
        input=json.dumps(job),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"client.js exited with {done.returncode}:\n{done.stderr}")
    return _parse(done.stdout, len(calls), done.stderr)


def assert_ok(run: NodeRun, index: int = 0) -> None:
    call = run.calls[index]
    assert call.status == OK, f"call {index}: {call.status} {call.details!r}\n{run.stderr}"


def window_gates(count: int, window: int) -> list[int]:
    """Gates for a stream that keeps ``window`` requests in flight: request i is written once
    i - window + 1 responses arrived."""
    return [max(0, i - window + 1) for i in range(count)]


def _parse(stdout: str, count: int, stderr: str) -> NodeRun:
    results = [CallResult() for _ in range(count)]
    wire: list[dict[str, Any]] = []
    finished = False
    for line in stdout.splitlines():
        event = json.loads(line)
        if "wire" in event:
            wire.append(event["wire"])
        elif "done" in event:
            finished = True
        else:
            _apply(results[event["call"]], event)
    if not finished or any(r.status is None for r in results):
        raise RuntimeError(f"client.js ended without every status:\n{stdout}\n{stderr}")
    return NodeRun(results, wire, stderr)


def _apply(result: CallResult, event: dict[str, Any]) -> None:
    if "response" in event:
        result.responses.append(base64.b64decode(event["response"]))
        result.written_at.append(event["written"])
    elif "headers" in event:
        result.headers = event["headers"]
    else:
        result.status = event["status"]
        result.details = event["details"]
        result.trailers = event["trailers"]


def _path(method: str) -> str:
    return method if method.startswith("/") else SERVICE + method


def _bytes(message: Message | bytes) -> bytes:
    return message if isinstance(message, bytes) else message.SerializeToString()


# What a test module of the Node interop suite starts with:
#     pytestmark = NEEDS_NODE
#     from node_grpc import grpc_js_installed  # noqa: F401 (an autouse fixture)
NEEDS_NODE = pytest.mark.skipif(node_missing() is not None, reason=str(node_missing()))


@pytest.fixture(scope="module", autouse=True)
def grpc_js_installed() -> None:
    """Node is here (else the module is skipped): grpc-js must be too."""
    try:
        check_installed()
    except RuntimeError as exc:
        pytest.fail(str(exc))
