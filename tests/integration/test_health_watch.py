"""gRPC ``grpc.health.v1.Health/Watch``: event-driven and bounded (issue 22).

- A watcher gets the status at once, then one message per change of the server's readiness
  (a failed load makes a strict server NOT_SERVING, loading it right makes it SERVING again).
- A waiting watcher costs nothing: no timer is armed while nothing changes (the server wakes
  watchers when readiness flips, instead of each stream polling it).
- At most ``MAX_WATCHES_PER_CONNECTION`` Watch streams per connection and ``MAX_WATCHES`` on
  the server: one more is RESOURCE_EXHAUSTED with the reason; a stream that ends gives its
  place back.
"""

from __future__ import annotations

import asyncio
import json
import queue
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.support.identity_model import IDENTITY_FP32_CONFIG, IDENTITY_FP32_PY
from tests.support.clients import client
from tests.support.models import build_test_repository
from testkit.server_process import ServerProcess
from tritium.frontends.grpc.service import (
    MAX_WATCHES,
    MAX_WATCHES_PER_CONNECTION,
    HealthService,
)
from tritium.transport.grpc.status import RpcError, StatusCode
from tritium.options import RepositoryOptions, ServerOptions
from tritium.server import InferenceServer

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
WAIT_S = 30.0
GOOD_PY, GOOD_CONFIG = IDENTITY_FP32_PY, IDENTITY_FP32_CONFIG


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = build_test_repository(
        tmp_path_factory.mktemp("watch") / "repo", ["identity_fp32", "bad_init"]
    )
    proc = ServerProcess([repo], "--model-control-mode=explicit", "--load-model=identity_fp32")
    yield proc
    proc.stop()


def _watch(stub: Any) -> tuple[Any, queue.Queue[Any]]:
    """A Watch call and the queue its messages (or its error) arrive in."""
    call = stub.Watch(health_pb2.HealthCheckRequest(service=""), timeout=60)
    arrived: queue.Queue[Any] = queue.Queue()

    def read() -> None:
        try:
            for message in call:
                arrived.put(message.status)
        except grpc.RpcError as exc:
            arrived.put(exc)

    threading.Thread(target=read, daemon=True).start()
    return call, arrived


def test_watch_follows_readiness_changes(server: ServerProcess) -> None:
    with grpc.insecure_channel(server.grpc_url) as channel:
        call, arrived = _watch(health_pb2_grpc.HealthStub(channel))
        assert arrived.get(timeout=WAIT_S) == SERVING
        with client("grpc", server.grpc_url) as c:
            with pytest.raises(Exception, match="init failed on purpose"):
                c.load_model("bad_init")  # a failed load: a strict server is not ready
            assert arrived.get(timeout=WAIT_S) == NOT_SERVING
            c.load_model(
                "bad_init",
                config=json.dumps(GOOD_CONFIG),
                files={"file:1/model.py": GOOD_PY},
            )
            assert arrived.get(timeout=WAIT_S) == SERVING
            assert c.is_server_ready()
        call.cancel()


def test_watch_streams_are_bounded_per_connection(server: ServerProcess) -> None:
    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = health_pb2_grpc.HealthStub(channel)  # one channel: one HTTP/2 connection
        watches = [_watch(stub) for _ in range(MAX_WATCHES_PER_CONNECTION)]
        for _, arrived in watches:
            assert arrived.get(timeout=WAIT_S) == SERVING
        _, refused = _watch(stub)
        error = refused.get(timeout=WAIT_S)
        assert isinstance(error, grpc.RpcError), error
        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "too many Health.Watch streams on this connection" in (error.details() or "")
        reply = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
        assert reply.status == SERVING  # the connection goes on
        watches[0][0].cancel()  # a stream that ends gives its place back
        assert _eventually_watches(stub)
        for call, _ in watches[1:]:
            call.cancel()
    with grpc.insecure_channel(server.grpc_url) as other:  # another connection has its own
        stub = health_pb2_grpc.HealthStub(other)
        fresh = [_watch(stub) for _ in range(MAX_WATCHES_PER_CONNECTION)]
        for call, arrived in fresh:
            assert arrived.get(timeout=WAIT_S) == SERVING
            call.cancel()


def _eventually_watches(stub: Any) -> bool:
    """A new Watch is admitted once the cancelled one has left (the server sees the reset
    a moment after the client sends it)."""
    for _ in range(int(WAIT_S * 10)):
        call, arrived = _watch(stub)
        answer = arrived.get(timeout=WAIT_S)
        if answer == SERVING:
            call.cancel()
            return True
        threading.Event().wait(0.1)
    return False


# --- in process: the real server and service, a call that only names its connection -------


class _Call:
    def __init__(self, connection: object) -> None:
        self.connection = connection


class _TimerLoop(asyncio.SelectorEventLoop):
    """An event loop that records every timer armed on it (asyncio.sleep, call_later)."""

    def __init__(self) -> None:
        super().__init__()
        self.timers: list[Any] = []

    def call_at(self, when: float, callback: Any, *args: Any, context: Any = None) -> Any:
        self.timers.append(callback)
        return super().call_at(when, callback, *args, context=context)


def _run(tmp_path: Path, body: Any) -> Any:
    loop = _TimerLoop()

    async def main() -> Any:
        (tmp_path / "repo").mkdir(exist_ok=True)
        repository = RepositoryOptions(paths=(tmp_path / "repo",), control_mode="explicit")
        options = ServerOptions(repository=repository)
        server = InferenceServer(options)
        await server.start()
        try:
            return await body(server, HealthService(server), loop)
        finally:
            if server.is_live():
                await server.stop()

    try:
        return loop.run_until_complete(main())
    finally:
        loop.close()


def test_a_waiting_watch_arms_no_timer(tmp_path: Path) -> None:
    async def body(server: InferenceServer, health: HealthService, loop: _TimerLoop) -> None:
        watch = health.Watch(health_pb2.HealthCheckRequest(), _Call(object()))
        assert (await anext(watch)).status == SERVING
        loop.timers.clear()
        pending = asyncio.ensure_future(anext(watch))
        for _ in range(50):  # many loop iterations, no time passing
            await asyncio.sleep(0)
        assert not pending.done()
        assert loop.timers == [], "a waiting Watch must not poll"
        await server.stop()  # no longer accepting: not ready
        assert (await pending).status == NOT_SERVING
        await watch.aclose()

    _run(tmp_path, body)


def test_watch_streams_are_bounded_on_the_server(tmp_path: Path) -> None:
    async def body(server: InferenceServer, health: HealthService, loop: _TimerLoop) -> None:
        request = health_pb2.HealthCheckRequest()
        watches = [health.Watch(request, _Call(object())) for _ in range(MAX_WATCHES)]
        for watch in watches:  # each on a connection of its own
            assert (await anext(watch)).status == SERVING
        one_more = health.Watch(request, _Call(object()))
        with pytest.raises(RpcError) as info:
            await anext(one_more)
        assert info.value.code is StatusCode.RESOURCE_EXHAUSTED
        assert f"on this server (at most {MAX_WATCHES})" in info.value.message
        await watches[0].aclose()  # an ended stream gives its place back
        again = health.Watch(request, _Call(object()))
        assert (await anext(again)).status == SERVING
        for watch in [*watches[1:], again]:
            await watch.aclose()

    _run(tmp_path, body)
