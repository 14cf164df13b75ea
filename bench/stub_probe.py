"""The real stub in bench/channel_floor.py's closed loops (issue 14 item 10): the server's
``StubProcess`` on uvloop driving a stub of ``examples/model_repository/add_sub_python`` frame
by frame (no HTTP), the same round trip's Python work in one process, and the model's own
``execute()`` in this process; with the loops and the /proc CPU reading the floor's variants
share."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.proctree import cpu_seconds


def closed_loop(round_trip: Callable[[], None], seconds: float) -> tuple[int, float]:
    for _ in range(200):
        round_trip()
    n, t0 = 0, time.perf_counter()
    deadline = t0 + seconds
    while time.perf_counter() < deadline:
        for _ in range(50):
            round_trip()
        n += 50
    return n, time.perf_counter() - t0


async def async_closed_loop(round_trip: Callable[[], Any], seconds: float) -> tuple[int, float]:
    for _ in range(200):
        await round_trip()
    n, t0 = 0, time.perf_counter()
    deadline = t0 + seconds
    while time.perf_counter() < deadline:
        for _ in range(50):
            await round_trip()
        n += 50
    return n, time.perf_counter() - t0


ADD_SUB = Path(__file__).resolve().parent.parent / "examples/model_repository/add_sub_python"


def add_sub_init() -> dict[str, Any]:
    from bench.baselines import load_config  # noqa: PLC0415 - bench imports only when used
    from google.protobuf import json_format

    config = json_format.MessageToJson(load_config(ADD_SUB), preserving_proto_field_name=True)
    args = {
        "model_config": config,
        "model_instance_kind": "CPU",
        "model_instance_name": "add_sub_python_0_0",
        "model_instance_device_id": "0",
        "model_repository": str(ADD_SUB),
        "model_version": "1",
        "model_name": "add_sub_python",
    }
    return {"path": str(ADD_SUB / "1" / "model.py"), "args": args}


async def _stub_loop(seconds: float) -> tuple[int, float, float]:
    import numpy as np
    from tritium.backends.python import ipc
    from tritium.backends.python.process import StubProcess

    loop = asyncio.get_running_loop()
    stub = StubProcess("add_sub_python_0_0")
    await stub.start()
    await stub.call(ipc.INIT, add_sub_init(), timeout=60)
    waiter: list[asyncio.Future[Any] | None] = [None]

    def done(entry: Any, buffers: Any) -> None:
        _, error, wired, *_ = entry
        assert error is None, error
        for _name, packed in wired[0][0]:
            ipc.unpack_array(packed, buffers)
        assert waiter[0] is not None
        waiter[0].set_result(None)

    stub.on_batch_done = done
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    ids = iter(range(1 << 62))

    async def round_trip() -> None:
        buffers: list[Any] = []
        inputs = [(n, ipc.pack_array(a, buffers)) for n in ("INPUT0", "INPUT1")]
        wire = ("", 0, 0, 0, inputs, ["OUTPUT0", "OUTPUT1"], "{}")
        waiter[0] = loop.create_future()
        stub.send(ipc.EXECUTE, [(next(ids), [wire])], buffers)
        await waiter[0]

    try:
        assert stub.pid is not None
        cpu0 = cpu_seconds(stub.pid)
        n, wall = await async_closed_loop(round_trip, seconds)
        return n, wall, cpu_seconds(stub.pid) - cpu0
    finally:
        await stub.stop()


def run_stub(seconds: float) -> dict[str, float]:
    import uvloop

    cpu0 = cpu_seconds(os.getpid())
    n, wall, stub_cpu = uvloop.run(_stub_loop(seconds))
    server_cpu = cpu_seconds(os.getpid()) - cpu0
    return {
        "us": wall * 1e6 / n,
        "cpu_us": (server_cpu + stub_cpu) * 1e6 / n,
        "stub_cpu_us": stub_cpu * 1e6 / n,
    }


def run_stub_inproc(seconds: float) -> dict[str, float]:
    import numpy as np
    from tritium.backends.python import ipc, pb_utils, stub

    sys.modules["triton_python_backend_utils"] = pb_utils
    answers: list[list[Any]] = []
    frame = getattr(ipc, "frame", lambda *a: ipc.join(ipc.encode(*a)))  # older trees: A/B runs

    class Captured:
        """A BlockingChannel whose sends are kept (a wrapper: the compiled build's
        BlockingChannel cannot be subclassed by interpreted code)."""

        def __init__(self, channel: ipc.BlockingChannel) -> None:
            self._channel = channel

        def __getattr__(self, name: str) -> Any:
            return getattr(self._channel, name)

        def send(self, kind: int, body: Any, buffers: ipc.Buffers | None = None) -> None:
            answers.append(frame(kind, body, buffers))

    left, right = socket.socketpair()
    model = stub.Stub(Captured(ipc.BlockingChannel(left)), 0, "add_sub_python_0_0")  # type: ignore[arg-type]
    model.init(add_sub_init())
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    to_stub, to_server = ipc.FrameReader(), ipc.FrameReader()

    def round_trip() -> None:
        buffers: list[Any] = []
        inputs = [(n, ipc.pack_array(a, buffers)) for n in ("INPUT0", "INPUT1")]
        wire = ("", 0, 0, 0, inputs, ["OUTPUT0", "OUTPUT1"], "{}")
        ((_, body, bufs),) = to_stub.feed(b"".join(frame(ipc.EXECUTE, [(1, [wire])], buffers)))
        model.execute_all(body, bufs)
        ((_, done, out),) = to_server.feed(b"".join(answers.pop()))
        for _name, packed in done[0][2][0][0]:
            ipc.unpack_array(packed, out)

    try:
        cpu0 = time.process_time()
        n, wall = closed_loop(round_trip, seconds)
        return {"us": wall * 1e6 / n, "cpu_us": (time.process_time() - cpu0) * 1e6 / n}
    finally:
        left.close()
        right.close()


def run_stub_model(seconds: float) -> dict[str, float]:
    """The same ``execute`` of add_sub_python in this process (pb_utils request per call)."""
    from bench.baselines import baseline_python  # noqa: PLC0415

    result = baseline_python(ADD_SUB, seconds)
    return {"us": result["us_per_call"], "cpu_us": result["cpu_us_per_call"]}
