"""``--max-inflight-per-client`` with ``--workers``: client addresses crafted to share one
window of the shared in-flight table (workers/shared.py) do not lock another client out.

The attack as it was found: the table keyed a client by an unkeyed hash of its address
(blake2b, 8 bytes, modulo its 8192 rows) and refused a client whose 32-row window was full.
34 addresses of 127/8 with the victim's home row, found offline, each hold one request in the
gate model; the victim (127.0.0.1, nothing in flight) then asks 40 times. Linux routes all of
127/8 to loopback, so a client socket bound to 127.a.b.c before it connects is that client.
"""

from __future__ import annotations

import hashlib
import json
import select
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

from tests.integration.test_access_control import _gate_model, _running
from tests.support.clients import client, make_input
from tests.support.models import build_test_repository
from testkit.server_process import ServerProcess

VICTIM = "127.0.0.1"
ATTACKERS = 34
OLD_ROWS = 8192  # the table's rows when the attack was found
TIMEOUT_S = 60.0


def _old_home(host: str) -> int:
    """The row the unkeyed table gave ``host`` first (workers/shared.py before the fix)."""
    digest = hashlib.blake2b(host.encode(), digest_size=8).digest()
    return (int.from_bytes(digest, "big", signed=True) or 1) % OLD_ROWS


def _crafted(count: int) -> list[str]:
    """``count`` addresses of 127/8 whose home row is the victim's (found offline)."""
    home, found = _old_home(VICTIM), []
    for n in range(2, 1 << 24):
        host = f"127.{n >> 16 & 255}.{n >> 8 & 255}.{n & 255}"
        if _old_home(host) == home:
            found.append(host)
            if len(found) == count:
                return found
    raise AssertionError("not enough addresses")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, Path]]:
    base = tmp_path_factory.mktemp("client_table")
    repo = build_test_repository(base / "repo", ["identity_fp32"])
    gate = base / "gate-open"
    _gate_model(repo, gate)
    proc = ServerProcess([repo], "--workers", "2", "--max-inflight-per-client=1", start_timeout=120)
    yield proc, gate
    gate.touch()  # never leave a stub waiting
    proc.stop()


def _hold(host: str, port: int) -> socket.socket:
    """One request in the gate model from ``host``, left in flight."""
    body = json.dumps(
        {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1], "data": [1.0]}]}
    ).encode()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((host, 0))
    sock.connect(("127.0.0.1", port))
    head = (
        f"POST /v2/models/gate/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    sock.sendall(head + body)
    return sock


def _pending(proc: ServerProcess) -> int:
    import urllib.request

    url = f"http://127.0.0.1:{proc.ports['metrics']}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    prefix = 'nv_inference_pending_request_count{model="gate",version="1"} '
    return sum(
        int(float(line.split()[-1])) for line in text.splitlines() if line.startswith(prefix)
    )


def _settled(proc: ServerProcess, gate: Path, held: list[socket.socket]) -> bool:
    """Every crafted request is in the server (pending or executing) or was answered."""
    answered = len(select.select(held, [], [], 0)[0])
    return _pending(proc) + _running(gate) + answered >= len(held)


def _victim_asks(url: str, times: int) -> tuple[int, int]:
    """(answered, refused with 429) of ``times`` requests, each on a connection of its own."""
    data = np.arange(4, dtype=np.float32)
    answered = refused = 0
    for _ in range(times):
        try:
            with client("http", url) as c:
                result = c.infer("identity_fp32", [make_input("http", "INPUT0", data, "FP32")])
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)
            answered += 1
        except InferenceServerException as exc:
            assert exc.status() == "429", exc.message()
            refused += 1
    return answered, refused


def test_crafted_addresses_do_not_lock_a_victim_out(server: tuple[ServerProcess, Path]) -> None:
    proc, gate = server
    started = time.monotonic()
    hosts = _crafted(ATTACKERS)
    print(f"{ATTACKERS} crafted addresses found in {time.monotonic() - started:.2f} s")
    gate.unlink(missing_ok=True)
    held = [_hold(host, proc.ports["http"]) for host in hosts]
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while not _settled(proc, gate, held):
            assert time.monotonic() < deadline, "the crafted requests never reached the server"
            time.sleep(0.05)
        answered, refused = _victim_asks(proc.url("http"), 40)
        print(f"victim: {answered} answered, {refused} refused of 40")
        assert (answered, refused) == (40, 0)
    finally:
        gate.touch()
        for sock in held:
            sock.close()
