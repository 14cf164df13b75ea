"""Issue 44's attacks as hostile kinds of the soak suite (``resource_attack_kinds``, after
bench/soak_attacks.py's): requests that cost the server what a client did not pay for, on the
models of bench/soak_models.py.

Each is ``run(port, count) -> outcome`` as the other kinds ({what: how many}; a key starting
with ``max `` is a figure the soak keeps the largest of; a key with ``!`` or ``WRONG`` is a
finding, which fails the soak), bounded in time and closing what it opened. The kinds that need
more than their port (the server's pid, its other ports, the calibration of the costly
models) read them from a ``Target`` filled once the server is up.

- ``c1_empty_inputs`` (gRPC): a ModelInferRequest for ``simple`` carrying ``EMPTY_INPUTS``
  empty ``inputs`` entries (2 bytes each on the wire: 976 KiB), unary and as a
  ModelStreamInfer message: INVALID_ARGUMENT within ``FAST_S`` (``max answer ms``);
- ``costly_inline_torch``, ``costly_inline_onnx`` (gRPC): ``CHEAP_CALLS`` cheap requests on a
  model that looks fast (the inline path learns it), then one costing ~2.5 s (calibrated) on
  the same connection, with ServerReady probes on it meanwhile: ``loop blocked`` when a probe
  waited ``BLOCKED_S`` or more (the worker's event loop ran the model);
- ``zero_window_held`` (gRPC): ``ZW_CONNECTIONS`` connections advertising a zero window,
  ``ZW_CALLS`` calls each answered ``ZW_BYTES``, held ``ZW_HOLD_S`` (or until every stream
  ended), then closed: the server's RSS growth meanwhile (``max server RSS growth MiB``);
- ``crafted_hosts``, ``cache_poisoning``, ``upload_kill_worker`` (HTTP): the attacks on what
  the workers share, in bench/soak_shared_state_attacks.py.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable

import numpy as np
from h2.settings import SettingCodes
from tritonclient.grpc import service_pb2 as pb

from bench.hostile_clients import HostileKind
from bench.hostile_grpc_clients import INFER, stream_outcomes
from bench.probes import server_rss_kib
from bench.raw_http import HOST, MIB
from bench.soak_models import SPIN_ONNX, SPIN_TORCH
from bench.soak_shared_state_attacks import (
    SHARED_STATE_ATTACK_MAX_S,
    UPLOAD_GAP_S,
    Target,
    cache_poisoning,
    crafted,
    upload_kill_worker,
)
from testkit.grpc_raw import STREAM, big_output_request
from testkit.h2client import H2Client, grpc_message, parse_messages

Outcome = dict[str, float]

EMPTY_INPUTS = 500_000
EMPTY_INPUT = b"\x2a\x00"  # field 5 (inputs), length-delimited, 0 bytes
FAST_S = 2.0  # an answer to C1 slower than this is a finding (~10 ms once refused early)
# a ServerReady probe waiting this long is a finding: the costly request held the loop (it
# runs ~2.5 s; a probe on a loop left free waits milliseconds, a busy machine adds some)
CHEAP_CALLS, PROBE_EVERY_S, BLOCKED_S, COSTLY_WAIT_S = 64, 0.1, 1.0, 60.0
READY = "/inference.GRPCInferenceService/ServerReady"
ZW_CONNECTIONS, ZW_CALLS, ZW_BYTES, ZW_HOLD_S = 4, 300, MIB, 30.0
ANSWER_S = 30.0
# the longest a kind takes: the upload kind's
RESOURCE_ATTACK_MAX_S = max(SHARED_STATE_ATTACK_MAX_S, COSTLY_WAIT_S + 30.0)
STATUS = {
    0: "OK",
    3: "INVALID_ARGUMENT",
    8: "RESOURCE_EXHAUSTED",
    13: "INTERNAL",
    14: "UNAVAILABLE",
}


def _url(port: int) -> str:
    return f"{HOST}:{port}"


def _speed(seconds: float) -> str:
    return f"≤{FAST_S:g} s" if seconds <= FAST_S else f"slow (>{FAST_S:g} s)!"


def _status(result: object) -> str:
    status = getattr(result, "status", None)
    if status is not None:
        return STATUS.get(status, f"status {status}")
    reset = getattr(result, "reset", None)
    return f"reset {reset}" if reset is not None else "no answer"


# ---------------------------------------------------------------------------------------------
# C1: 500k empty inputs
# ---------------------------------------------------------------------------------------------
def empty_inputs_message() -> bytes:
    head = pb.ModelInferRequest(model_name="simple", id="c1").SerializeToString()
    return head + EMPTY_INPUT * EMPTY_INPUTS


def _stream_answer(client: H2Client, payload: bytes) -> str:
    """One ModelStreamInfer message: the error message or answer it gets (then the end)."""
    sid = client.start_call(STREAM)
    client.send_data(sid, grpc_message(payload))
    result = client.streams[sid]
    client.wait_for(lambda: result.done or bool(result.data), ANSWER_S)
    answer = _status(result)
    if result.data:
        reply = pb.ModelStreamInferResponse.FromString(parse_messages(bytes(result.data))[0][1])
        answer = "error message" if reply.error_message else "answered!"
    if not result.done:
        client.end(sid)
        client.wait_for(lambda: result.done, 5.0)
    return answer


def empty_inputs(port: int, _: int) -> Outcome:
    payload = empty_inputs_message()
    seen: Outcome = {}
    with H2Client(_url(port)) as client:
        client.sock.settimeout(ANSWER_S)
        start = time.monotonic()
        sid = client.call_async(INFER, payload)
        client.wait_for(lambda: client.streams[sid].done, ANSWER_S)
        unary_s = time.monotonic() - start
        unary = _status(client.streams[sid])
        seen[f"unary {unary}{'!' if unary == 'OK' else ''} {_speed(unary_s)}"] = 1
        start = time.monotonic()
        stream = _stream_answer(client, payload)
        stream_s = time.monotonic() - start
        seen[f"stream {stream} {_speed(stream_s)}"] = 1
    seen["max answer ms"] = round(max(unary_s, stream_s) * 1000)
    return seen


# ---------------------------------------------------------------------------------------------
# C2: a costly request on a model that looks fast
# ---------------------------------------------------------------------------------------------
def _spin_request(model: str, value: int) -> bytes:
    message = pb.ModelInferRequest(model_name=model)
    if model == SPIN_TORCH:
        message.inputs.add(name="INPUT__0", datatype="INT64", shape=[1])
        message.raw_input_contents.append(np.array([value], np.int64).tobytes())
    else:
        message.inputs.add(name="SHAPE", datatype="INT64", shape=[2])
        message.raw_input_contents.append(np.array([value, value], np.int64).tobytes())
    return message.SerializeToString()


def _spin_right(model: str, value: int, result: object) -> bool:
    try:
        payload = parse_messages(bytes(result.data))[0][1]  # type: ignore[attr-defined]
        raw = pb.ModelInferResponse.FromString(payload).raw_output_contents[0]
    except (AssertionError, IndexError, ValueError):
        return False
    if model == SPIN_TORCH:
        return int(np.frombuffer(raw, np.int64)[0]) == value
    return float(np.frombuffer(raw, np.float32)[0]) == float(value)  # exact below 2**24


def _probe_while(client: H2Client, sid: int) -> float:
    """ServerReady on the costly call's connection every ``PROBE_EVERY_S`` until that call
    ended: the longest wait for an answer."""
    longest, costly = 0.0, client.streams[sid]
    deadline = time.monotonic() + COSTLY_WAIT_S
    while not costly.done and not client.closed and time.monotonic() < deadline:
        probe = client.call_async(READY, b"")
        start = time.monotonic()
        client.wait_for(functools.partial(_ended, client, probe), COSTLY_WAIT_S)
        longest = max(longest, time.monotonic() - start)
        client.wait_for(lambda: costly.done, PROBE_EVERY_S)
    return longest


def _cheap_calls(client: H2Client, model: str) -> int:
    """``CHEAP_CALLS`` cheap calls, one after the other: how many were answered right (it
    stops at the first unanswered)."""
    right = 0
    for _ in range(CHEAP_CALLS):
        sid = client.call_async(INFER, _spin_request(model, 1))
        if not client.wait_for(functools.partial(_ended, client, sid), ANSWER_S):
            break
        right += _spin_right(model, 1, client.streams[sid])
    return right


def costly_inline(model: str, target: Target, port: int, _: int) -> Outcome:
    key = "spin_n" if model == SPIN_TORCH else "onnx_n"
    value = target.calibration[key]
    with H2Client(_url(port)) as client:
        client.sock.settimeout(ANSWER_S)
        cheap_right = _cheap_calls(client, model)
        if cheap_right < CHEAP_CALLS // 2:
            return {f"cheap answered right {cheap_right}/{CHEAP_CALLS}: no costly call": 1}
        start = time.monotonic()
        sid = client.call_async(INFER, _spin_request(model, value))
        longest = _probe_while(client, sid)
        costly_s = time.monotonic() - start
        result = client.streams[sid]
        answer = "right" if _spin_right(model, value, result) else f"{_status(result)} WRONG"
    seen: Outcome = {
        f"cheap answered right {cheap_right}/{CHEAP_CALLS}": 1,
        f"costly {answer}": 1,
        f"loop blocked ≥{BLOCKED_S:g} s!" if longest >= BLOCKED_S else "loop free": 1,
        "max costly ms": round(costly_s * 1000),
        "max ServerReady wait ms": round(longest * 1000),
    }
    return seen


# ---------------------------------------------------------------------------------------------
# S3: zero-window connections held
# ---------------------------------------------------------------------------------------------
def _ended(client: H2Client, sid: int) -> bool:
    return client.streams[sid].done


def _all_ended(client: H2Client, sids: list[int]) -> bool:
    return all(client.streams[s].done for s in sids)


def _hold(held: list[tuple[H2Client, list[int]]], pid: int, before: int) -> int:
    """Read (granting nothing) until every stream ended or ``ZW_HOLD_S`` passed; the peak
    server RSS (KiB) meanwhile."""
    peak, deadline = before, time.monotonic() + ZW_HOLD_S
    while time.monotonic() < deadline and not all(_all_ended(c, s) for c, s in held):
        for client, sids in held:
            client.wait_for(functools.partial(_all_ended, client, sids), 0.1)
        peak = max(peak, server_rss_kib(pid))
    return peak


def zero_window_held(target: Target, port: int, _: int) -> Outcome:
    settings = {int(SettingCodes.INITIAL_WINDOW_SIZE): 0}
    request = big_output_request(ZW_BYTES)
    before = server_rss_kib(target.pid)
    held: list[tuple[H2Client, list[int]]] = []
    seen: Outcome = {}
    try:
        for _ in range(ZW_CONNECTIONS):
            client = H2Client(_url(port), settings=settings, auto_ack=False)
            held.append((client, []))
            held[-1][1].extend(client.call_async(INFER, request) for _ in range(ZW_CALLS))
        peak = _hold(held, target.pid, before)
        for client, sids in held:
            for what, n in stream_outcomes([client.streams[s] for s in sids]).items():
                seen[what] = seen.get(what, 0) + n
    finally:
        for client, _sids in held:
            client.sock.close()
    seen["max server RSS growth MiB"] = round((peak - before) / 1024)
    return seen


# ---------------------------------------------------------------------------------------------
# The kinds
# ---------------------------------------------------------------------------------------------
def resource_attack_kinds(target: Target) -> list[HostileKind]:
    """Issue 44's attacks, in the order the soak's rotation takes them."""
    kind, grpc = HostileKind, "grpc"

    def with_target(run: Callable[..., Outcome], *args: object) -> Callable[[int, int], Outcome]:
        return functools.partial(run, *args, target)

    return [
        kind("c1_empty_inputs", empty_inputs, grpc),
        kind("costly_inline_torch", with_target(costly_inline, SPIN_TORCH), grpc, 20.0),
        kind("zero_window_held", with_target(zero_window_held), grpc, 90.0),
        kind("crafted_hosts", crafted),
        kind("cache_poisoning", cache_poisoning),
        kind("costly_inline_onnx", with_target(costly_inline, SPIN_ONNX), grpc, 20.0),
        kind("upload_kill_worker", with_target(upload_kill_worker), "http", UPLOAD_GAP_S),
    ]
