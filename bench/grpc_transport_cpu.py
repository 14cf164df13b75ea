"""CPU of the gRPC transport alone per unary call, in memory (issue 24): no socket, no model.

One ``GrpcConnection`` on an in-memory transport (an in-memory transport) answers a
unary method whose fast path echoes the request; the requests (HEADERS + one DATA message
each, as an h2 client encodes them, 16 per read like ``h2load -m 16``) are made beforehand,
so only the server's side runs while the thread's CPU time is measured: HTTP/2 reading,
the call, the answer's frames. Several source trees can be compared (``--compare``): each
runs this file with its own ``.venv`` and its own tritium, alternating, ``--rounds`` times.

    python -m bench grpc-transport [--calls 20000] [--rounds 3] \\
        [--compare ../other-tree]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import struct
import subprocess
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PATH = "/bench.Service/Echo"
BATCH = 16  # requests per read


def _wire(calls: int) -> tuple[bytes, list[bytes]]:
    import h2.config
    import h2.connection

    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    client.initiate_connection()
    client.update_settings({0x4: 1 << 24})  # a large window: no WINDOW_UPDATE needed back
    client.increment_flow_control_window((1 << 31) - 1 - 65535)
    # what the server says first (its stream window, 16 MiB for the connection), so that the
    # client may send every request without reading the server's answers
    settings = struct.pack(">HIHI", 0x3, 1 << 20, 0x4, 1 << 20)
    server = _frame(0x4, 0, settings) + _frame(0x8, 0, struct.pack(">I", (16 << 20) - 65535))
    client.receive_data(server)
    preface = client.data_to_send()
    headers = [(":method", "POST"), (":scheme", "http"), (":path", PATH),
               (":authority", "localhost"), ("content-type", "application/grpc"),
               ("te", "trailers")]  # fmt: skip
    message = b"\0\0\0\0\x10" + bytes(16)
    reads = []
    for start in range(0, calls, BATCH):
        for _ in range(min(BATCH, calls - start)):
            sid = client.get_next_available_stream_id()
            client.send_headers(sid, headers)
            client.send_data(sid, message, end_stream=True)
            # the server's answers are never read back: forget the stream on the client side
            client.reset_stream(sid)
        data = client.data_to_send()
        reads.append(_without_resets(data))
    return preface, reads


def _frame(kind: int, flags: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + bytes(4) + payload


def _without_resets(data: bytes) -> bytes:
    """The client's RST_STREAM frames (only there to keep h2's stream count down) cut out."""
    out, pos = bytearray(), 0
    while pos < len(data):
        length = int.from_bytes(data[pos : pos + 3], "big")
        if data[pos + 3] != 0x3:
            out += data[pos : pos + 9 + length]
        pos += 9 + length
    return bytes(out)


class MemoryTransport:
    """An in-memory socket: what the connection writes, in ``out``."""

    def __init__(self) -> None:
        self.out: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.out.append(bytes(data))

    def get_extra_info(self, key: str) -> Any:
        return ("127.0.0.1", 1) if key == "peername" else None

    def get_write_buffer_size(self) -> int:
        return 0

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def can_write_eof(self) -> bool:
        return False

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True


def worker(calls: int) -> float:
    """This interpreter's tritium: CPU µs per call of the transport."""
    from tritium.frontends.accept import Connections
    from tritium.options import ServerOptions

    def echo(raw: bytes, call: Any) -> bool:
        call.answer(raw)
        return True

    async def unused(request: Any, call: Any) -> Any:
        raise AssertionError("the fast path answers")

    options = ServerOptions()
    try:  # the transport in transport/grpc, given settings records (issue 38)
        from dataclasses import replace

        from tritium.frontends.grpc.errors import status_of
        from tritium.frontends.grpc.listener import GrpcNotices, grpc_settings
        from tritium.loop_spin import ClientPace
        from tritium.transport.grpc.connection import GrpcConnection
        from tritium.transport.grpc.dispatch import Dispatcher, Kind, Method
        from tritium.transport.grpc.endpoint import GrpcEndpoint

        method = Method(Kind.UNARY, unused, bytes, fast=echo)
        big = 1 << 24
        chosen = replace(grpc_settings(options), max_receive=big, max_send=big, max_streams=1 << 20)
        dispatch = Dispatcher({PATH: method}, chosen.compression, None, status_of)
        pool = Connections()
        listener: Any = GrpcEndpoint(chosen, dispatch, pool, pool.memory, GrpcNotices(), ClientPace)
    except ImportError:  # a tree from before (--compare): frontends/grpc, read ServerOptions
        from tritium.frontends.grpc.bounds import ConnectionLimits  # type: ignore
        from tritium.frontends.grpc.connection import GrpcConnection  # type: ignore
        from tritium.frontends.grpc.dispatch import Dispatcher, Kind, Method  # type: ignore

        class Listener:
            max_receive = max_send = 1 << 24
            max_streams = 1 << 20
            method = Method(Kind.UNARY, unused, bytes, fast=echo)
            dispatch = Dispatcher({PATH: method}, options, None)
            connections: set[Any] = set()
            limits = ConnectionLimits.from_options(options)
            pool = Connections()

            def connection_closed(self) -> None:
                pass

        Listener.options = options  # type: ignore[attr-defined]
        listener = Listener()

    preface, reads = _wire(calls)

    async def run() -> float:
        transport = MemoryTransport()
        server = GrpcConnection(listener)
        server.connection_made(transport)
        server.data_received(preface)
        await asyncio.sleep(0)
        transport.out.clear()
        start = time.thread_time()
        for data in reads:
            server.data_received(data)
            await asyncio.sleep(0)  # the turn's writes
            transport.out.clear()
        used = time.thread_time() - start
        assert not server.calls, "every call answered"
        return used / calls * 1e6

    return asyncio.run(run())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--compare", type=Path, action="append", default=[])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(f"{worker(args.calls):.2f}")
        return
    from bench.process import tree_python  # not in the --worker run of another tree

    trees = [ROOT, *(tree.resolve() for tree in args.compare)]
    results: dict[Path, list[float]] = {tree: [] for tree in trees}
    for index in range(args.rounds):
        for tree in trees if index % 2 == 0 else list(reversed(trees)):
            python, env = tree_python(tree)
            script = str(Path(__file__).resolve())
            command = [python, script, "--worker", "--calls", str(args.calls)]
            out = subprocess.run(
                command, cwd=tree, env=env, capture_output=True, text=True, check=True
            )
            value = float(out.stdout.split()[-1])
            results[tree].append(value)
            print(f"round {index + 1} {tree}: {value:.1f} µs CPU per call", flush=True)
    first = statistics.median(results[trees[0]])
    print("\n| tree | µs CPU per unary call, per round | median | vs the first tree |")
    print("|---|---|---|---|")
    for tree, values in results.items():
        median = statistics.median(values)
        rounds = ", ".join(f"{v:.1f}" for v in values)
        print(f"| {tree} | {rounds} | {median:.1f} | {median / first:.2f}× |")


if __name__ == "__main__":  # the --worker subprocess, run with another tree's interpreter
    main()
