"""The hostile gRPC clients of the hostile-grpc suite (issue 22, findings 3 and 4), on raw
sockets (testkit/h2client.py), and the latency poller of the other clients.

Each case is ``run(ports, deadline) -> what it saw``: ``ports`` holds the server's ``http`` and
``grpc`` ports; the hostile sockets are held until ``deadline``.

- ``grpc_idle_sockets``: many TCP connections to the gRPC port that never send a byte, against
  a server with a low RLIMIT_NOFILE (finding 3).
- ``grpc_unfinished_messages``: unary ``ModelInfer`` calls on one connection whose messages
  declare 48 MiB and never finish (finding 4).
- ``grpc_zero_window``: a client advertising a zero stream window, sending many small
  requests to a model with a 1 MiB output (``big_output``, testkit/grpc_raw.py), and never
  reading (finding 4).
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from h2.settings import SettingCodes
from tritonclient.grpc import service_pb2 as pb

from bench.hostile_clients import hold_idle
from bench.raw_http import HOST, ResponseReader, request_head
from testkit.grpc_raw import BIG_OUTPUT as BIG_OUTPUT  # re-exported
from testkit.grpc_raw import big_output_request
from testkit.grpc_raw import write_big_output as write_big_output
from testkit.h2client import H2Client, StreamResult

MIB = 1 << 20
INFER = "/inference.GRPCInferenceService/ModelInfer"
IDLE_SOCKETS, IDLE_NOFILE = 600, 512
UNFINISHED, UNFINISHED_MIB = 16, 48
ZERO_WINDOW_CALLS, OUTPUT_BYTES = 400, MIB
POLL_INTERVAL_S = 0.02
POLL_TIMEOUT_S = 5.0


def simple_request(seed: int = 0) -> bytes:
    message = pb.ModelInferRequest(model_name="simple")
    for name in ("INPUT0", "INPUT1"):
        message.inputs.add(name=name, datatype="INT32", shape=[1, 16])
    message.raw_input_contents.extend(
        [(np.arange(16, dtype=np.int32) + seed).tobytes(), np.ones(16, np.int32).tobytes()]
    )
    return message.SerializeToString()


def _grpc_url(ports: dict[str, int]) -> str:
    return f"{HOST}:{ports['grpc']}"


# ---------------------------------------------------------------------------------------------
# The hostile clients
# ---------------------------------------------------------------------------------------------
def idle_sockets_case(ports: dict[str, int], deadline: float) -> dict[str, Any]:
    """``IDLE_SOCKETS`` connections to the gRPC port that send nothing, held to the end."""
    socks, refused = [], 0
    for _ in range(IDLE_SOCKETS):
        try:
            socks.append(socket.create_connection((HOST, ports["grpc"]), timeout=0.5))
        except OSError:
            refused += 1
    try:
        closed = hold_idle(socks, deadline)
    finally:
        for sock in socks:
            sock.close()
    return {"connected": len(socks), "connect_failed": refused, "closed_by_server": closed}


def stream_outcomes(results: list[StreamResult]) -> dict[str, int]:
    seen: dict[str, int] = {}
    for result in results:
        if result.status is not None:
            key = f"status {result.status}"
        elif result.reset is not None:
            key = f"reset {result.reset}"
        else:
            key = "open"
        seen[key] = seen.get(key, 0) + 1
    return seen


def unfinished_case(ports: dict[str, int], deadline: float) -> dict[str, Any]:
    """``UNFINISHED`` unary calls whose messages declare ``UNFINISHED_MIB`` MiB, each sent
    but for its last MiB, then silence."""
    declared = UNFINISHED_MIB * MIB
    body = bytes((UNFINISHED_MIB - 1) * MIB)
    sent = 0
    with H2Client(_grpc_url(ports)) as client:
        client.sock.settimeout(30)
        sids = []
        for _ in range(UNFINISHED):
            if time.monotonic() >= deadline:
                break
            sid = client.start_call(INFER)
            sids.append(sid)
            client.send_data(sid, b"\0" + struct.pack(">I", declared))
            if client.send_data(sid, body):
                sent += len(body)
        client.wait_for(lambda: False, max(0.0, deadline - time.monotonic()))
        outcome = stream_outcomes([client.streams[s] for s in sids])
    return {"calls": len(sids), "sent_mib": round(sent / MIB), "outcome": outcome}


def zero_window_case(ports: dict[str, int], deadline: float) -> dict[str, Any]:
    """A client whose stream window is 0: ``ZERO_WINDOW_CALLS`` requests for 1 MiB answers,
    none of which can be sent; nothing is ever granted."""
    settings = {SettingCodes.INITIAL_WINDOW_SIZE: 0}
    request = big_output_request(OUTPUT_BYTES)
    with H2Client(_grpc_url(ports), settings=settings, auto_ack=False) as client:
        sids = [client.call_async(INFER, request) for _ in range(ZERO_WINDOW_CALLS)]
        client.wait_for(lambda: False, max(0.0, deadline - time.monotonic()))
        outcome = stream_outcomes([client.streams[s] for s in sids])
    return {"calls": len(sids), "outcome": outcome}


@dataclass(frozen=True)
class Case:
    name: str
    finding: int  # issue 22's
    what: str
    run: Callable[[dict[str, int], float], dict[str, Any]]
    nofile: int | None = None


CASES = [
    Case(
        "grpc_idle_sockets",
        3,
        f"{IDLE_SOCKETS} silent TCP connections to the gRPC port, server nofile {IDLE_NOFILE}",
        idle_sockets_case,
        IDLE_NOFILE,
    ),
    Case(
        "grpc_unfinished_messages",
        4,
        f"{UNFINISHED} ModelInfer messages declared at {UNFINISHED_MIB} MiB, never finished",
        unfinished_case,
    ),
    Case(
        "grpc_zero_window",
        4,
        f"zero stream window, {ZERO_WINDOW_CALLS} requests for 1 MiB answers",
        zero_window_case,
    ),
]


# ---------------------------------------------------------------------------------------------
# The other clients: latency of fresh HTTP and gRPC connections
# ---------------------------------------------------------------------------------------------
def http_poll(ports: dict[str, int]) -> bool:
    payload = request_head("GET", "/v2/health/ready", {"Connection": "close"})
    with socket.create_connection((HOST, ports["http"]), timeout=POLL_TIMEOUT_S) as sock:
        sock.sendall(payload)
        answer = ResponseReader(sock).read(time.monotonic() + POLL_TIMEOUT_S)
    return answer is not None and answer[0] == 200


def grpc_poll(ports: dict[str, int]) -> bool:
    with H2Client(_grpc_url(ports)) as client:
        client.sock.settimeout(POLL_TIMEOUT_S)
        sid = client.call_async(INFER, simple_request())
        result = client.streams[sid]
        client.wait_for(lambda: result.done, POLL_TIMEOUT_S)
    return result.status == 0


class LatencyPoller(threading.Thread):
    """A fresh HTTP health poll and a fresh gRPC ``simple`` inference, one after the other,
    every ~20 ms until stopped: every latency kept (a failure counts with the time it took)."""

    def __init__(self, ports: dict[str, int]) -> None:
        super().__init__(daemon=True)
        self.ports = ports
        self.stop_event = threading.Event()
        self.latencies: dict[str, list[float]] = {"http": [], "grpc": []}
        self.failed: dict[str, int] = {"http": 0, "grpc": 0}

    def run(self) -> None:
        polls = (("http", http_poll), ("grpc", grpc_poll))
        while not self.stop_event.is_set():
            for name, poll in polls:
                start = time.monotonic()
                try:
                    ok = poll(self.ports)
                except (OSError, AssertionError, ValueError):
                    ok = False
                self.latencies[name].append(time.monotonic() - start)
                self.failed[name] += not ok
            self.stop_event.wait(POLL_INTERVAL_S)

    def finish(self) -> dict[str, Any]:
        self.stop_event.set()
        self.join(2 * POLL_TIMEOUT_S + 10)
        return {name: self._summary(name) for name in self.latencies}

    def _summary(self, name: str) -> dict[str, Any]:
        values = np.array(self.latencies[name] or [0.0]) * 1000
        return {
            "polls": len(self.latencies[name]),
            "failed": self.failed[name],
            "p50_ms": round(float(np.percentile(values, 50)), 1),
            "p99_ms": round(float(np.percentile(values, 99)), 1),
            "max_ms": round(float(values.max()), 1),
        }
