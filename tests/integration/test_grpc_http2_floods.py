"""Issue 22, findings 1 and 2: one hostile HTTP/2 client on the gRPC port must not stall the
others. Each test floods (testkit/h2_floods.py, raw sockets) for at least 10 s, on a new
connection whenever the server ends one (an attacker that reconnects), while tritonclient
clients on connections of their own keep asking: HTTP readiness and a ``simple`` inference,
gRPC ServerLive and a ``simple`` inference, with 30 s client timeouts. The flood goes on until
they have made ``VICTIM_ROUNDS`` rounds (at most ``CAP_S`` more seconds), or stops at the first
victim request that fails.

Asserted: what every flooding connection got (GOAWAY ENHANCE_YOUR_CALM, or its end), that
every victim request completed with the right answer, that the server's RSS grew by less than
``RSS_BOUND_MIB``, and that it serves afterwards. Nothing is timed: a request that does not
complete within the client's timeout is a failure."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.support.clients import add_sub_inputs
from testkit.grpc_raw import ENHANCE_YOUR_CALM, start_server
from testkit.h2_floods import repeat

from testkit.server_process import ServerProcess

FLOOD_S = 10.0
VICTIM_ROUNDS = 5
CAP_S = 120.0
CLIENT_TIMEOUT_S = 30.0
RSS_BOUND_MIB = 128
pytestmark = pytest.mark.timeout(300)  # a flood, then up to one victim timeout


@pytest.fixture(scope="module")
def server(example_repo: Path) -> Iterator[ServerProcess]:
    proc = start_server([example_repo], ["simple"])
    yield proc
    proc.stop()


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


class Victims:
    """The well-behaved clients, one connection per protocol; each request's failure is
    kept (an exception: an error answer, a wrong one, or no answer within the timeout)."""

    def __init__(self, server: ServerProcess) -> None:
        self.http = httpclient.InferenceServerClient(
            server.http_url, connection_timeout=CLIENT_TIMEOUT_S, network_timeout=CLIENT_TIMEOUT_S
        )
        self.grpc = grpcclient.InferenceServerClient(server.grpc_url)
        self.rounds = 0
        self.requests = 0
        self.failures: list[str] = []

    def round(self, going_on: Callable[[], bool] = lambda: True) -> None:
        """One request of each kind (until ``going_on()`` says the flood is over)."""
        for name, ask in (
            ("HTTP ready", lambda: self.http.is_server_ready()),
            ("HTTP infer", lambda: _simple(self.http, "http")),
            ("gRPC live", lambda: self.grpc.is_server_live(client_timeout=CLIENT_TIMEOUT_S)),
            ("gRPC infer", lambda: _simple(self.grpc, "grpc", client_timeout=CLIENT_TIMEOUT_S)),
        ):
            if not going_on():
                return
            self.requests += 1
            try:
                assert ask(), f"{name} answered false"
            except Exception as exc:  # noqa: BLE001 - every failure is kept and asserted on
                self.failures.append(f"{name}: {type(exc).__name__}: {exc}"[:300])
        self.rounds += 1

    def close(self) -> None:
        self.http.close()
        self.grpc.close()


def _simple(client: Any, protocol: str, **timeout: float) -> bool:
    """A ``simple`` inference, checked: OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = the difference."""
    inputs, a, b = add_sub_inputs(protocol)
    result = client.infer("simple", inputs, **timeout)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    return True


def flood(server: ServerProcess, name: str) -> tuple[list[dict[str, Any]], Victims, float]:
    """``name`` for FLOOD_S seconds (longer while the victims have not made VICTIM_ROUNDS
    rounds, up to CAP_S): what each flooding connection saw, the victims, and the RSS growth
    (MiB) from before the flood to its peak."""
    pid = server.proc.pid
    victims = Victims(server)
    victims.round()  # connections and channels up before the flood
    victims.rounds, victims.requests = 0, 0
    base = peak = rss_kib(pid)
    outcomes: list[dict[str, Any]] = []
    deadline = time.monotonic() + FLOOD_S
    cap = deadline + CAP_S

    def more() -> bool:
        return victims.rounds < VICTIM_ROUNDS and time.monotonic() < cap and not victims.failures

    flooder = threading.Thread(
        target=lambda: outcomes.extend(repeat(name, server.ports["grpc"], deadline, more)),
        daemon=True,
    )
    flooder.start()
    try:
        while flooder.is_alive():
            victims.round(flooder.is_alive)
            peak = max(peak, rss_kib(pid))
        flooder.join()
    finally:
        victims.close()
    return outcomes, victims, (peak - base) / 1024


def check_victims_and_memory(victims: Victims, growth_mib: float) -> None:
    assert not victims.failures, victims.failures[:5]
    assert victims.rounds >= VICTIM_ROUNDS, (victims.rounds, victims.requests)
    assert growth_mib < RSS_BOUND_MIB, f"RSS grew {growth_mib:.0f} MiB during the flood"


def assert_serves(server: ServerProcess) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        assert client.is_server_ready(client_timeout=CLIENT_TIMEOUT_S)
    finally:
        client.close()


@pytest.mark.parametrize("name", ["settings_read", "ping_empty_data", "window_priority"])
def test_control_frame_flood_gets_goaway_enhance_your_calm(
    server: ServerProcess, name: str
) -> None:
    """SETTINGS frames; PING + empty DATA pairs on an open stream; bursts of WINDOW_UPDATE and
    PRIORITY frames, from clients that read: every flooding connection is told GOAWAY
    ENHANCE_YOUR_CALM and ended, and the others are served throughout."""
    outcomes, victims, growth = flood(server, name)
    assert outcomes
    for seen in outcomes:
        assert seen["goaway"] is not None, seen
        assert seen["goaway"]["code"] == ENHANCE_YOUR_CALM, seen
        assert seen["closed_by_server"], seen
    check_victims_and_memory(victims, growth)
    assert_serves(server)


def test_flood_that_never_reads_is_cut_off(server: ServerProcess) -> None:
    """SETTINGS frames from a client that never reads its ACKs: the server ends every such
    connection (it cannot tell it GOAWAY: it reads nothing), memory stays bounded, and the
    others are served throughout."""
    outcomes, victims, growth = flood(server, "settings_unread")
    assert outcomes
    for seen in outcomes:
        assert seen["closed_by_server"], seen
    check_victims_and_memory(victims, growth)
    assert_serves(server)


def test_data_frames_of_empty_messages_share_the_loop(server: ServerProcess) -> None:
    """ModelStreamInfer on 16 streams, each fed 1 MiB DATA frames of ~209,000 empty messages
    as fast as the windows allow: every message that is answered gets its in-stream error
    (none is lost or garbled), and the other clients are served throughout."""
    outcomes, victims, growth = flood(server, "empty_messages")
    assert outcomes
    assert sum(seen["answers"] for seen in outcomes) > 0
    for seen in outcomes:
        assert seen["bad_answers"] == 0, seen
        assert seen["answers"] <= seen["messages"], seen
        assert seen["goaway"] is None, seen
    check_victims_and_memory(victims, growth)
    assert_serves(server)
