"""Issue 44's attacks on what a server's workers share, as hostile kinds of the soak suite
(listed in bench/soak_resource_attacks.py ``resource_attack_kinds``, which says what an outcome
holds): the per-client in-flight table, the response cache, the supervisor's replay of model
control to a worker started again.

- ``crafted_hosts`` (HTTP): ``CRAFTED`` sockets bound to 127/8 addresses whose
  --max-inflight-per-client row falls where the victim's does (tritium/workers/shared.py's
  public hash), each with one ``soak_slow`` request in flight; meanwhile the victim address,
  with nothing in flight, sends ``VICTIM_CALLS`` requests: ``victim 429!`` counts refusals;
- ``cache_poisoning`` (HTTP): ``PAIRS`` pairs on ``soak_cached`` (response cache on): A sends
  {"scale": 100}, then B the same input with {"scale": 1}; B must get B's answer;
- ``upload_kill_worker`` (HTTP, at most once per ``UPLOAD_GAP_S``): ``soak_upload`` loaded
  with ``file:`` overrides of ``UPLOAD_MIB`` MiB in turn, then one worker SIGKILLed (with
  --workers N): the supervisor's ``tritium_workers{state="serving"}`` must be N again within
  ``RESTART_WAIT_S``; the model is unloaded at the end.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import os
import signal
import socket
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bench.probes import process_tree
from bench.raw_http import HOST, MIB, ResponseReader, http_call, request_head
from bench.soak_models import CACHED, SLOW, UPLOAD, UPLOAD_CONFIG, UPLOAD_PY

Outcome = dict[str, float]

CRAFTED, VICTIM, VICTIM_CALLS = 34, "127.0.99.1", 8
CLIENT_ROWS = 8192  # tritium/workers/client_limit.py ROWS: the table an attacker can read
PAIRS = 4
UPLOAD_MIB, UPLOAD_GAP_S, RESTART_WAIT_S = (10, 24, 40), 300.0, 60.0
ANSWER_S = 30.0
# the longest a kind takes: the uploads (3 × up to 60 s), the restart wait and the unload
SHARED_STATE_ATTACK_MAX_S = 3 * 60.0 + RESTART_WAIT_S + 30.0


@dataclass
class Target:
    """What the kinds need beyond their port, set once the server is up."""

    pid: int = 0
    ports: dict[str, int] = field(default_factory=dict)
    calibration: dict[str, int] = field(default_factory=dict)


def _url(port: int) -> str:
    return f"{HOST}:{port}"


# ---------------------------------------------------------------------------------------------
# S4: crafted hosts
# ---------------------------------------------------------------------------------------------
def _home(host: str) -> int:
    """The first row of ``host``'s window in the per-client table (shared.py ``key_of``)."""
    digest = hashlib.blake2b(host.encode(), digest_size=8).digest()
    return (int.from_bytes(digest, "big", signed=True) or 1) % CLIENT_ROWS


@functools.cache
def crafted_hosts() -> tuple[str, ...]:
    """``CRAFTED`` addresses of 127/8 whose window starts where ``VICTIM``'s does."""
    home, found = _home(VICTIM), []
    for i in range(1 << 16, 1 << 24):
        host = f"127.{i >> 16}.{(i >> 8) & 255}.{i & 255}"
        if host != VICTIM and _home(host) == home:
            found.append(host)
            if len(found) == CRAFTED:
                break
    return tuple(found)


def _bound(source: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.settimeout(5)
    try:
        sock.bind((source, 0))
        sock.connect((HOST, port))
    except OSError:
        sock.close()
        raise
    return sock


def _infer_payload(model: str, body: dict[str, Any]) -> bytes:
    data = json.dumps(body).encode()
    head = {"Content-Type": "application/json", "Content-Length": len(data)}
    return request_head("POST", f"/v2/models/{model}/infer", head) + data


SLOW_BODY = {"inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "FP32",
                         "data": [1, 2, 3, 4]}]}  # fmt: skip
SIMPLE_BODY = {
    "inputs": [
        {"name": name, "shape": [1, 16], "datatype": "INT32", "data": list(range(16))}
        for name in ("INPUT0", "INPUT1")
    ]
}


def _victim_call(port: int) -> str:
    try:
        with _bound(VICTIM, port) as sock:
            sock.sendall(_infer_payload("simple", SIMPLE_BODY))
            answer = ResponseReader(sock).read(time.monotonic() + ANSWER_S)
    except OSError as exc:
        return f"victim {type(exc).__name__}"
    if answer is None:
        return "victim no answer"
    return f"victim {answer[0]}{'!' if answer[0] == 429 else ''}"


def crafted(port: int, _: int) -> Outcome:
    seen: Outcome = {}

    def note(what: str) -> None:
        seen[what] = seen.get(what, 0) + 1

    socks = []
    try:
        for host in crafted_hosts():
            try:
                sock = _bound(host, port)
            except OSError as exc:
                note(f"attacker {type(exc).__name__}")
                continue
            sock.sendall(_infer_payload(SLOW, SLOW_BODY))
            socks.append(sock)
        time.sleep(0.5)  # admitted, queued for the slow model
        for _ in range(VICTIM_CALLS):
            note(_victim_call(port))
        deadline = time.monotonic() + ANSWER_S
        for sock in socks:
            answer = ResponseReader(sock).read(deadline)
            note(f"attacker {answer[0]}" if answer else "attacker no answer")
    finally:
        for sock in socks:
            sock.close()
    return seen


# ---------------------------------------------------------------------------------------------
# S5: cache poisoning
# ---------------------------------------------------------------------------------------------
def _cached_call(client: object, data: np.ndarray, scale: int) -> np.ndarray | str:
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException

    tensor = httpclient.InferInput("INPUT0", list(data.shape), "FP32")
    tensor.set_data_from_numpy(data)
    try:
        result = client.infer(CACHED, [tensor], parameters={"scale": scale})  # type: ignore[attr-defined]
    except InferenceServerException as exc:
        return str(exc.status())
    except Exception as exc:  # noqa: BLE001 - no answer is an outcome
        return f"client {type(exc).__name__}"
    out: np.ndarray = result.as_numpy("OUTPUT0")
    return out


def _judge(who: str, got: np.ndarray | str, want: np.ndarray, other: np.ndarray) -> str:
    if isinstance(got, str):
        return f"{who} {got}"
    if np.array_equal(got, want):
        return f"{who} right"
    return f"{who} got the other's answer WRONG" if np.array_equal(got, other) else f"{who} WRONG"


def cache_poisoning(port: int, count: int) -> Outcome:
    import tritonclient.http as httpclient

    rng = np.random.default_rng([count, os.getpid(), time.monotonic_ns()])
    seen: Outcome = {}
    for _ in range(PAIRS):
        data = rng.integers(1, 1000, 8).astype(np.float32)  # a fresh key
        a_client = httpclient.InferenceServerClient(_url(port), network_timeout=ANSWER_S)
        b_client = httpclient.InferenceServerClient(_url(port), network_timeout=ANSWER_S)
        try:
            got_a = _cached_call(a_client, data, 100)
            got_b = _cached_call(b_client, data, 1)
        finally:
            a_client.close()
            b_client.close()
        for what in (_judge("A", got_a, data * 100, data), _judge("B", got_b, data, data * 100)):
            seen[what] = seen.get(what, 0) + 1
    return seen


# ---------------------------------------------------------------------------------------------
# S6: large uploads, then kill -9 of a worker
# ---------------------------------------------------------------------------------------------
def metric(metrics_port: int, line_start: str) -> int | None:
    """The value of the /metrics line that starts with ``line_start`` (None: no such line,
    or no answer)."""
    answer = http_call(metrics_port, request_head("GET", "/metrics"), 10)
    if answer is None or answer[0] != 200:
        return None
    for line in answer[1].decode(errors="replace").splitlines():
        if line.startswith(line_start):
            return int(float(line.split()[-1]))
    return None


def serving_workers(metrics_port: int) -> int | None:
    return metric(metrics_port, 'tritium_workers{state="serving"} ')


def _repository_call(port: int, action: str, body: bytes) -> str:
    head = {"Content-Type": "application/json", "Content-Length": len(body)}
    path = f"/v2/repository/models/{UPLOAD}/{action}"
    answer = http_call(port, request_head("POST", path, head) + body, 60)
    return "no answer" if answer is None else str(answer[0])


def upload(port: int, mib: int, count: int) -> str:
    blob = np.random.default_rng(count).bytes(mib * MIB)  # incompressible
    parameters = {
        "config": json.dumps(UPLOAD_CONFIG),
        "file:1/model.py": base64.b64encode(UPLOAD_PY.encode()).decode(),
        "file:1/weights.bin": base64.b64encode(blob).decode(),
    }
    return _repository_call(port, "load", json.dumps({"parameters": parameters}).encode())


def _wait_serving(target: Target, workers: int, killed: int) -> float | None:
    """Seconds until the killed worker is gone and ``workers`` serve again; None: not within
    ``RESTART_WAIT_S``."""
    start = time.monotonic()
    while time.monotonic() - start < RESTART_WAIT_S:
        pids = {p for p, role, _ in process_tree(target.pid) if role == "worker"}
        if killed not in pids and serving_workers(target.ports["metrics"]) == workers:
            return time.monotonic() - start
        time.sleep(0.5)
    return None


def upload_kill_worker(target: Target, port: int, count: int) -> Outcome:
    seen: Outcome = {}
    for mib in UPLOAD_MIB:
        status = upload(port, mib, count)
        seen[f"upload {status}"] = seen.get(f"upload {status}", 0) + 1
    workers = sorted(p for p, role, _ in process_tree(target.pid) if role == "worker")
    if not workers:
        seen["no workers (--workers 1): none killed"] = 1
    elif serving_workers(target.ports["metrics"]) != len(workers):
        seen["not every worker serving before the kill: none killed"] = 1
    else:
        os.kill(workers[count % len(workers)], signal.SIGKILL)
        back = _wait_serving(target, len(workers), workers[count % len(workers)])
        if back is None:
            seen[f"worker not back serving in {RESTART_WAIT_S:.0f} s!"] = 1
        else:
            seen["worker killed, back serving"] = 1
            seen["max s to serving again"] = round(back, 1)
    status = _repository_call(port, "unload", b"{}")
    seen[f"unload {status}"] = 1
    return seen
