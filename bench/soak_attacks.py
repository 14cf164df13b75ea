"""Issue 22's attacks as hostile kinds of the soak suite (``attack_kinds``, appended to
bench/hostile_clients.py ``hostile_kinds``), on the flood and hostile clients the tests and the
other benches use (testkit/h2_floods.py, testkit/h2client.py,
bench/hostile_grpc_clients.py) and the hostile models of testkit/hostile_models.py.

Each is ``run(port, count) -> outcome``: a short text, or {what: how many} for the kinds made
of many streams or sockets (the mixer tallies the keys seen and sums the numbers). Each is
bounded in time (its own deadline, at most ``ATTACK_MAX_S``) and in what it sends or holds
(the sizes below), and closes everything it opened before it returns.

- control-frame floods on the gRPC port for ``FLOOD_S``: SETTINGS, PING and WINDOW_UPDATE +
  PRIORITY from clients that never read; PING + empty DATA from one that reads; 1 MiB DATA
  frames packed with empty ModelStreamInfer messages;
- silent sockets (connect, send nothing) and partial prefaces, held until the server closes
  them (its preface timeout) or ``HOLD_S``;
- stalled streams: unary messages declared at ``UNFINISHED_MIB`` MiB and never finished, a
  client advertising a zero window asking for 1 MiB answers; held until the server resets
  them (the soak server's ``--grpc-stall-timeout-secs``) or ``STALL_HOLD_S``;
- a burst of ``BURST_EXTRA`` new streams beyond the server's SETTINGS_MAX_CONCURRENT_STREAMS
  in one write (each one beyond: REFUSED_STREAM, the connection lives);
- ``WATCHES`` Health.Watch streams on one connection (beyond the bound: RESOURCE_EXHAUSTED);
- ``SEQUENCES`` sequences started on ``simple_sequence`` and never ended (beyond the soak
  server's ``--sequence-backlog-limit``: UNAVAILABLE at once; the rest idle out);
- hostile Python models: one truncating its BLS input's /dev/shm segments, one writing a
  malformed frame (or a frame head declaring 2 GiB) on its stub socket, one calling itself
  (the client gives up after 1 s), one whose forked children hold its socket when its stub is
  killed (by this client, SIGKILL: the stub's crash).
"""

from __future__ import annotations

import functools
import os
import selectors
import signal
import socket
import struct
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from h2.settings import SettingCodes
from tritonclient.grpc import service_pb2 as pb

from bench import proctree
from bench.hostile_clients import HostileKind
from bench.hostile_grpc_clients import INFER, stream_outcomes
from bench.raw_http import HOST, MIB
from testkit.grpc_raw import big_output_request
from testkit.h2_floods import (
    FLOODS,
    PING,
    PREFACE,
    PRIORITY,
    SETTINGS,
    WINDOW_UPDATE,
    frame,
    repeated,
    stream_headers,
    unread,
)
from testkit.h2client import H2Client

Outcome = str | dict[str, int]

FLOOD_S = 4.0
HOLD_S = 14.0  # longer than the server's --grpc-preface-timeout-secs (default 10 s)
SILENT_SOCKETS, PARTIAL_PREFACES = 64, 16
UNFINISHED, UNFINISHED_MIB = 4, 16
ZERO_WINDOW_CALLS, ZERO_WINDOW_BYTES = 32, MIB
# the server checks stalls every --grpc-stall-timeout-secs (the soak's: 5 s): a stalled
# stream is reset 1-2 timeouts after its last progress
STALL_HOLD_S = 20.0
BURST_EXTRA = 8
WATCHES, WATCH_HOLD_S = 16, 3.0
SEQUENCES, SEQUENCE_WAIT_S = 48, 5.0
SEQUENCE_MODEL = "simple_sequence"
MODEL_TIMEOUT_S = 30.0
SHM_VALUES = 1 << 20  # float32 values: 4 MiB, so BLS tensors go through /dev/shm segments
ATTACK_MAX_S = 40.0  # the longest any of them takes (a hostile model's 30 s timeout + waits)
RST_STREAM, REFUSED_STREAM = 3, 7
WATCH = "/grpc.health.v1.Health/Watch"
STUB_MODULE = "tritium.backends.python.stub"


def _url(port: int) -> str:
    return f"{HOST}:{port}"


# ---------------------------------------------------------------------------------------------
# Control-frame floods (testkit/h2_floods.py)
# ---------------------------------------------------------------------------------------------
def flood_text(seen: dict[str, Any]) -> str:
    if seen.get("goaway"):
        return f"GOAWAY {seen['goaway']['code']}"
    if seen.get("closed_by_server"):
        return "ended by server"
    if seen.get("stalled_s"):
        return f"not read, held {FLOOD_S:.0f} s"
    return f"held {FLOOD_S:.0f} s"


def flood(name: str, port: int, _: int) -> str:
    return flood_text(FLOODS[name](port, time.monotonic() + FLOOD_S))


def unread_flood(block: bytes, opening: bytes, port: int, _: int) -> str:
    return flood_text(unread(port, time.monotonic() + FLOOD_S, opening, block))


PING_BLOCK = repeated(frame(PING, 0, 0, b"tritium!"))
WINDOW_PRIORITY_BLOCK = repeated(
    frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", 1))
    + frame(PRIORITY, 0, 1, struct.pack(">IB", 0, 15))
)


# ---------------------------------------------------------------------------------------------
# Silent sockets, partial prefaces
# ---------------------------------------------------------------------------------------------
def hold_until_closed(socks: list[socket.socket], seconds: float) -> int:
    """Read until the server closed every socket or ``seconds`` passed; how many it closed."""
    selector, closed = selectors.DefaultSelector(), 0
    for sock in socks:
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ)
    deadline = time.monotonic() + seconds
    while closed < len(socks) and (remaining := deadline - time.monotonic()) > 0:
        for key, _ in selector.select(min(remaining, 0.5)):
            try:
                data = key.fileobj.recv(4096)  # type: ignore[union-attr]
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:
                closed += 1
                selector.unregister(key.fileobj)
    selector.close()
    return closed


def quiet_sockets(count: int, opening: bytes, port: int, _: int) -> dict[str, int]:
    socks, failed = [], 0
    try:
        for _ in range(count):
            try:
                sock = socket.create_connection((HOST, port), timeout=2)
            except OSError:
                failed += 1
                continue
            socks.append(sock)
            if opening:
                sock.sendall(opening)
        closed = hold_until_closed(socks, HOLD_S)
    finally:
        for sock in socks:
            sock.close()
    seen = {"closed by server": closed, f"held {HOLD_S:.0f} s": len(socks) - closed}
    if failed:
        seen["connect failed"] = failed
    return {k: n for k, n in seen.items() if n}


# ---------------------------------------------------------------------------------------------
# Stalled streams (as bench/hostile_grpc_clients.py's cases, smaller and bounded in time)
# ---------------------------------------------------------------------------------------------
def _all_done(client: H2Client, sids: list[int]) -> Callable[[], bool]:
    return lambda: all(client.streams[s].done for s in sids)


def unfinished_messages(port: int, _: int) -> dict[str, int]:
    """``UNFINISHED`` unary calls declaring ``UNFINISHED_MIB`` MiB, all but 1 MiB sent."""
    declared = UNFINISHED_MIB * MIB
    body = bytes(declared - MIB)
    with H2Client(_url(port)) as client:
        client.sock.settimeout(30)
        sids = []
        for _ in range(UNFINISHED):
            sid = client.start_call(INFER)
            sids.append(sid)
            client.send_data(sid, b"\0" + struct.pack(">I", declared))
            client.send_data(sid, body)
        client.wait_for(_all_done(client, sids), STALL_HOLD_S)
        return stream_outcomes([client.streams[s] for s in sids])


def zero_window(port: int, _: int) -> dict[str, int]:
    """A zero stream window, ``ZERO_WINDOW_CALLS`` requests for 1 MiB answers, no grant."""
    settings = {SettingCodes.INITIAL_WINDOW_SIZE: 0}
    request = big_output_request(ZERO_WINDOW_BYTES)
    with H2Client(_url(port), settings=settings, auto_ack=False) as client:
        sids = [client.call_async(INFER, request) for _ in range(ZERO_WINDOW_CALLS)]
        client.wait_for(_all_done(client, sids), STALL_HOLD_S)
        return stream_outcomes([client.streams[s] for s in sids])


# ---------------------------------------------------------------------------------------------
# New streams beyond the bound, Health.Watch, unended sequences
# ---------------------------------------------------------------------------------------------
def _frames(buffer: bytearray) -> list[tuple[int, int, bytes]]:
    """The whole frames at the head of ``buffer`` (removed): (type, stream, payload)."""
    out = []
    while len(buffer) >= 9 and len(buffer) >= 9 + int.from_bytes(buffer[:3], "big"):
        end = 9 + int.from_bytes(buffer[:3], "big")
        sid = int.from_bytes(buffer[5:9], "big") & 0x7FFFFFFF
        out.append((buffer[3], sid, bytes(buffer[9:end])))
        del buffer[:end]
    return out


class _RawReader:
    """Frames from a raw socket: the server's MAX_CONCURRENT_STREAMS, resets, GOAWAY."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.buffer = sock, bytearray()
        self.max_streams: int | None = None
        self.refused = self.other_resets = 0
        self.goaway: int | None = None
        self.closed = False

    def read_until(self, done: Callable[[], bool], seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not (done() or self.closed) and (remaining := deadline - time.monotonic()) > 0:
            self.sock.settimeout(min(remaining, 0.5))
            try:
                chunk = self.sock.recv(1 << 16)
            except TimeoutError:
                continue
            except OSError:
                chunk = b""
            if not chunk:
                self.closed = True
            self.buffer += chunk
            for kind, sid, payload in _frames(self.buffer):
                self._frame(kind, sid, payload)

    def _frame(self, kind: int, sid: int, payload: bytes) -> None:
        if kind == SETTINGS and sid == 0 and self.max_streams is None and payload:
            for at in range(0, len(payload) - 5, 6):
                code, value = struct.unpack(">HI", payload[at : at + 6])
                if code == SettingCodes.MAX_CONCURRENT_STREAMS:
                    self.max_streams = value
        elif kind == RST_STREAM:
            refused = int.from_bytes(payload[:4], "big") == REFUSED_STREAM
            self.refused += refused
            self.other_resets += not refused
        elif kind == 7 and self.goaway is None:  # GOAWAY
            self.goaway = int.from_bytes(payload[4:8], "big")


def stream_burst(port: int, _: int) -> dict[str, int]:
    """The server's MAX_CONCURRENT_STREAMS + ``BURST_EXTRA`` ModelStreamInfer HEADERS in one
    write: each beyond the bound should be refused (REFUSED_STREAM), the connection kept."""
    with socket.create_connection((HOST, port), timeout=5) as sock:
        sock.sendall(PREFACE + frame(SETTINGS, 0, 0))
        reader = _RawReader(sock)
        reader.read_until(lambda: reader.max_streams is not None, 5.0)
        if reader.max_streams is None:
            return {"no MAX_CONCURRENT_STREAMS": 1}
        count = reader.max_streams + BURST_EXTRA
        sock.sendall(b"".join(stream_headers(2 * i + 1) for i in range(count)))
        reader.read_until(lambda: reader.refused >= BURST_EXTRA, 10.0)
        seen = {"refused": reader.refused, "other resets": reader.other_resets}
        if reader.goaway is not None:
            seen[f"GOAWAY {reader.goaway}"] = 1
        elif reader.closed:
            seen["ended by server"] = 1
        return {k: n for k, n in seen.items() if n}


def health_watches(port: int, _: int) -> dict[str, int]:
    """``WATCHES`` Health.Watch streams on one connection, held ``WATCH_HOLD_S``."""
    with H2Client(_url(port)) as client:
        sids = [client.call_async(WATCH, b"") for _ in range(WATCHES)]
        client.quiet(WATCH_HOLD_S)
        seen: dict[str, int] = {}
        for sid in sids:
            result = client.streams[sid]
            if result.done:
                key = f"status {result.status}" if result.status is not None else "reset"
            else:
                key = "watching" if result.messages else "open, no message"
            seen[key] = seen.get(key, 0) + 1
        return seen


def sequence_start(correlation_id: int) -> bytes:
    message = pb.ModelInferRequest(model_name=SEQUENCE_MODEL)
    message.parameters["sequence_id"].int64_param = correlation_id
    message.parameters["sequence_start"].bool_param = True
    message.inputs.add(name="INPUT", datatype="INT32", shape=[1, 1])
    message.raw_input_contents.append(np.ones((1, 1), np.int32).tobytes())
    return message.SerializeToString()


def unended_sequences(port: int, count: int) -> dict[str, int]:
    """``SEQUENCES`` STARTs with new correlation ids at once, never an END; answers seen
    within ``SEQUENCE_WAIT_S`` (OK: a slot; UNAVAILABLE (14): beyond the backlog; open: in
    the backlog), then the connection closes."""
    first = 1_000_000_000 + count * SEQUENCES
    with H2Client(_url(port)) as client:
        sids = [client.call_async(INFER, sequence_start(first + i)) for i in range(SEQUENCES)]
        client.wait_for(_all_done(client, sids), SEQUENCE_WAIT_S)
        return stream_outcomes([client.streams[s] for s in sids])


# ---------------------------------------------------------------------------------------------
# Hostile models (testkit/hostile_models.py)
# ---------------------------------------------------------------------------------------------
def _http_client(port: int) -> Any:
    import tritonclient.http as httpclient

    return httpclient.InferenceServerClient(
        _url(port), connection_timeout=MODEL_TIMEOUT_S, network_timeout=MODEL_TIMEOUT_S
    )


def _fp32_input(module: Any, data: np.ndarray) -> Any:
    tensor = module.InferInput("INPUT0", list(data.shape), "FP32")
    tensor.set_data_from_numpy(data)
    return tensor


def _error_text(exc: Exception) -> str:
    from tritonclient.utils import InferenceServerException

    if not isinstance(exc, InferenceServerException):
        return f"client {type(exc).__name__}"
    message = str(exc.message())
    for known in ("malformed frame", "is not healthy", "shared-memory segment", "Deadline"):
        if known in message:
            return f"{exc.status()} ({known})"
    return str(exc.status())


def model_truncate(port: int, count: int) -> str:
    """hostile_truncate over HTTP, ``queued`` (its ONNX child's input truncated while queued)
    and ``hammer`` (a Python child, 5 calls) in turn: answered right, or its own error."""
    import tritonclient.http as httpclient

    data = np.random.default_rng(count).random(SHM_VALUES, dtype=np.float32)
    hammer = count % 2
    params = (
        {"mode": "hammer", "target": "identity_fp32", "repeat": 5}
        if hammer
        else {"mode": "queued", "target": "identity_onnx_queued"}
    )
    client = _http_client(port)
    try:
        result = client.infer(
            "hostile_truncate", [_fp32_input(httpclient, data)], parameters=params
        )
    except Exception as exc:  # noqa: BLE001 - its own failure is the outcome
        return f"{params['mode']}: {_error_text(exc)}"
    finally:
        client.close()
    right = np.array_equal(result.as_numpy("OUTPUT0"), data)
    return f"{params['mode']}: answered {'right' if right else 'WRONG'}"


def model_frames(port: int, count: int) -> str:
    """hostile_frames over gRPC: 8 bytes of 0xff, or a frame head declaring 2 GiB then 128
    MiB pushed, on the stub's socket (in turn): the request fails, the stub restarts."""
    import tritonclient.grpc as grpcclient

    what = 1.0 + count % 2
    name = "garbage" if what == 1.0 else "2 GiB head"
    client = grpcclient.InferenceServerClient(_url(port))
    try:
        data = np.array([what], dtype=np.float32)
        client.infer(
            "hostile_frames", [_fp32_input(grpcclient, data)], client_timeout=MODEL_TIMEOUT_S
        )
    except Exception as exc:  # noqa: BLE001 - the refusal is the outcome
        return f"{name}: {_error_text(exc)}"
    finally:
        client.close()
    return f"{name}: answered!"


def model_self_call(port: int, _: int) -> str:
    """hostile_self_call over gRPC calls itself with its one instance held; the client's
    1 s deadline must reach the queued child, and the next plain call is answered."""
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(_url(port))
    data = np.arange(4, dtype=np.float32)
    try:
        try:
            client.infer(
                "hostile_self_call",
                [_fp32_input(grpcclient, data)],
                parameters={"again": 1},
                client_timeout=1.0,
            )
            first = "answered!"
        except Exception as exc:  # noqa: BLE001
            first = _error_text(exc)
        try:
            out = client.infer(
                "hostile_self_call", [_fp32_input(grpcclient, data)], client_timeout=MODEL_TIMEOUT_S
            ).as_numpy("OUTPUT0")
            after = "then served" if np.array_equal(out, data) else "then WRONG"
        except Exception as exc:  # noqa: BLE001
            after = f"then {_error_text(exc)}"
    finally:
        client.close()
    return f"{first}, {after}"


def _is_stub(pid: int) -> bool:
    return proctree.cmdline_has(pid, STUB_MODULE.encode())


def model_fork(port: int, _: int) -> str:
    """hostile_fork over HTTP tells its children's and its stub's pids; the stub is killed
    (SIGKILL: its crash) while its forked child holds its socket: the children must die with
    it (within 10 s; any left are killed here and reported)."""
    import tritonclient.http as httpclient

    client = _http_client(port)
    try:
        result = client.infer("hostile_fork", [_fp32_input(httpclient, np.zeros(2, np.float32))])
    except Exception as exc:  # noqa: BLE001 - not back from the last kill yet, say
        return _error_text(exc)
    finally:
        client.close()
    child, sleeper, stub = (int(p) for p in result.as_numpy("OUTPUT1"))
    if not _is_stub(stub):
        return "no stub at the pid it told"
    os.kill(stub, signal.SIGKILL)
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline and (proctree.running(child) or proctree.running(sleeper)):
        time.sleep(0.1)
    left = [pid for pid in (child, sleeper) if proctree.running(pid)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    return f"stub killed, {len(left)} children left!" if left else "stub killed, children gone"


# ---------------------------------------------------------------------------------------------
# The kinds
# ---------------------------------------------------------------------------------------------
def attack_kinds() -> list[HostileKind]:
    """Issue 22's attacks, in the order the soak's rotation takes them."""
    kind, grpc = HostileKind, "grpc"
    opening = stream_headers(1)
    return [
        kind("settings_flood_unread", functools.partial(flood, "settings_unread"), grpc),
        kind("ping_flood_unread", functools.partial(unread_flood, PING_BLOCK, b""), grpc),
        kind(
            "window_priority_flood_unread",
            functools.partial(unread_flood, WINDOW_PRIORITY_BLOCK, opening),
            grpc,
        ),
        kind("ping_empty_data_flood", functools.partial(flood, "ping_empty_data"), grpc),
        kind("empty_messages_frame", functools.partial(flood, "empty_messages"), grpc),
        kind("silent_sockets", functools.partial(quiet_sockets, SILENT_SOCKETS, b""), grpc),
        kind(
            "partial_preface",
            functools.partial(quiet_sockets, PARTIAL_PREFACES, PREFACE[:12]),
            grpc,
        ),
        kind("unfinished_messages", unfinished_messages, grpc),
        kind("zero_window", zero_window, grpc),
        kind("stream_burst", stream_burst, grpc),
        kind("health_watches", health_watches, grpc),
        kind("unended_sequences", unended_sequences, grpc),
        kind("model_truncate_shm", model_truncate, "http"),
        kind("model_bad_frame", model_frames, grpc),
        kind("model_self_call", model_self_call, grpc),
        kind("model_fork_killed", model_fork, "http"),
    ]
