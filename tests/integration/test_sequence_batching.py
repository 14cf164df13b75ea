"""The sequence batcher over the real server, seen from inside the model: the probe models of
tests/support/sequence_models.py report per request the control values (START / END / READY /
CORRID) the server injected, the request's slot, ``correlation_id()`` and ``flags()``, the
batch it ran in and a per-sequence accumulator, so every test checks Triton's contract from
the outside: in-order execution per sequence, a slot per sequence in the direct strategy
(fillers with READY=0 below the highest busy slot), batches of several sequences in the oldest
strategy, sequences spread over instances, the backlog, the idle timeout, and the
``sequence_id`` / ``sequence_start`` / ``sequence_end`` parameters surviving every codec (HTTP
binary and JSON, gRPC unary, a gRPC stream, the asyncio clients)."""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from tests.support.seq_clients import (
    serving,
    TRANSPORTS,
    Step,
    StreamTransport,
    Transport,
    expect_error,
    model_stats,
    open_transport,
)
from tests.support.sequence_models import SEQ_SHORT_IDLE_US, SEQ_X2_INSTANCES
from testkit.server_process import ServerProcess

MODELS = [
    "seq_echo_direct",
    "seq_echo_string",
    "seq_echo_oldest",
    "seq_echo_x2",
    "seq_echo_idle",
    "seq_echo_delay",
    "seq_one_slot",
]
START_ERROR = (
    "inference request for sequence {id} to model '{model}' must specify the START flag on "
    "the first request of the sequence"
)
_ids = itertools.count(1000)  # every sequence of this module has its own correlation ID


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with serving(tmp_path_factory, "sequence", MODELS) as proc:
        yield proc


def _run_sequence(t: Transport, model: str, seq_id: int | str, values: list[int]) -> list[Step]:
    """START with values[0], one step per middle value, END with values[-1]."""
    last = len(values) - 1
    return [t.step(model, v, seq_id, start=i == 0, end=i == last) for i, v in enumerate(values)]


def _assert_in_order(steps: list[Step], values: list[int]) -> None:
    """The accumulator after each step is the running sum: every step ran once, in order."""
    assert [s.seen["acc"] for s in steps] == list(itertools.accumulate(values))


def _in_threads(count: int, work: Callable[[int], Any]) -> list[Any]:
    """Run ``work(i)`` for i < count in threads; return the results, re-raise a failure."""
    results: list[Any] = [None] * count
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            results[i] = work(i)
        except BaseException as e:  # noqa: BLE001 - re-raised below, in the test's thread
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    if errors:
        raise errors[0]
    return results


# ---------------------------------------------------------------------------------------------
# What the model sees, over every transport
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_controls_and_uint64_ids_seen_by_the_model(srv: ServerProcess, transport: str) -> None:
    seq_id = 2**63 - 1 - next(_ids)  # near the top: a float anywhere on the way would round it
    with open_transport(transport, srv) as t:
        first, middle, last = _run_sequence(t, "seq_echo_direct", seq_id, [3, 4, 5])
        both = t.step("seq_echo_direct", 9, next(_ids), start=True, end=True)
    expected = [
        {"start": 1, "end": 0, "ready": 1, "flags": 1, "acc": 3},
        {"start": 0, "end": 0, "ready": 1, "flags": 0, "acc": 7},
        {"start": 0, "end": 1, "ready": 1, "flags": 2, "acc": 12},
    ]
    for step, want, value in zip([first, middle, last], expected, [3, 4, 5], strict=True):
        assert {k: step.seen[k] for k in want} == want
        assert step.seen["corrid"] == seq_id and step.seen["correlation_id"] == seq_id
        assert step.corrid_text == step.id_text == str(seq_id)
        assert step.seen["slot"] == first.seen["slot"]
        assert step.output == value
    assert {k: both.seen[k] for k in ("start", "end", "ready", "flags", "acc")} == {
        "start": 1,
        "end": 1,
        "ready": 1,
        "flags": 3,
        "acc": 9,
    }


@pytest.mark.parametrize("transport", ["http", "http_json", "http_aio"])
def test_uint64_ids_beyond_int64_over_http(srv: ServerProcess, transport: str) -> None:
    """HTTP carries the whole uint64 range (gRPC clients send an int64 parameter)."""
    seq = 2**64 - 1 - next(_ids)
    with open_transport(transport, srv) as t:
        steps = _run_sequence(t, "seq_echo_direct", seq, [1, 2])
    _assert_in_order(steps, [1, 2])
    assert [(s.corrid_text, s.id_text) for s in steps] == [(str(seq), str(seq))] * 2


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_string_ids_seen_by_the_model(srv: ServerProcess, transport: str) -> None:
    seq_id = f"session-{transport}-{next(_ids)}"
    with open_transport(transport, srv) as t:
        steps = _run_sequence(t, "seq_echo_string", seq_id, [1, 2, 3, 4])
    _assert_in_order(steps, [1, 2, 3, 4])
    for step in steps:
        assert step.corrid_text == step.id_text == seq_id
        assert step.seen["corrid"] == step.seen["correlation_id"] == -1  # not an integer
    assert [s.seen["flags"] for s in steps] == [1, 0, 0, 2]


# ---------------------------------------------------------------------------------------------
# Order, slots, fillers
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("model", ["seq_echo_direct", "seq_echo_oldest"])
def test_pipelined_steps_run_in_order(srv: ServerProcess, model: str) -> None:
    """Three sequences' steps sent on one gRPC stream without waiting for any answer: each
    sequence still runs its steps one at a time, in the order sent."""
    ids = [next(_ids) for _ in range(3)]
    values = {seq: [seq % 7 + i for i in range(12)] for seq in ids}
    t = StreamTransport(srv.grpc_url)
    try:
        futures: dict[int, list[Any]] = {seq: [] for seq in ids}
        for i in range(12):
            for seq in ids:
                array = {"INPUT0": _int32([[values[seq][i]]])}
                futures[seq].append(
                    t.send(
                        model, array, sequence_id=seq, sequence_start=i == 0, sequence_end=i == 11
                    )
                )
        steps = {seq: [Step(f.result(60)) for f in futures[seq]] for seq in ids}
    finally:
        t.close()
    for seq in ids:
        _assert_in_order(steps[seq], values[seq])
        assert {s.seen["corrid"] for s in steps[seq]} == {seq}


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_interleaved_sequences_from_threads(srv: ServerProcess, transport: str) -> None:
    """Six clients at once on a model with four slots: two sequences wait in the backlog
    until a slot frees; every sequence keeps its slot and runs in order."""

    def client(i: int) -> tuple[list[Step], list[int]]:
        values = [i + 1] * 3 + [10 * i, -i, 7]
        with open_transport(transport, srv) as t:
            return _run_sequence(t, "seq_echo_direct", next(_ids), values), values

    for steps, values in _in_threads(6, client):
        _assert_in_order(steps, values)
        assert len({s.seen["slot"] for s in steps}) == 1
        assert all(s.seen["ready"] == 1 and s.seen["bad_fillers"] == 0 for s in steps)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_direct_fillers_hold_idle_slots(srv: ServerProcess, protocol: str) -> None:
    """Two live sequences, one request at a time: the batch runs slots 0..k, a slot whose
    sequence sent nothing gets a READY=0 filler (zeroed inputs, START/END/CORRID 0), and the
    statistics count only the real requests."""
    model = "seq_echo_direct"
    before = model_stats(protocol, srv, model)
    a, b = next(_ids), next(_ids)
    with open_transport(protocol, srv) as t:
        t.step(model, 1, a, start=True)
        t.step(model, 2, b, start=True)
        step_a, step_b = t.step(model, 3, a), t.step(model, 4, b)
        t.step(model, 5, a, end=True)
        t.step(model, 6, b, end=True)
    after = model_stats(protocol, srv, model)
    assert step_a.seen["slot"] != step_b.seen["slot"]
    low, high = sorted([step_a, step_b], key=lambda s: s.seen["slot"])
    for step in (low, high):
        assert step.seen["batch_size"] == step.seen["slot"] + 1  # slots 0..own slot
        assert step.seen["ready"] == 1 and step.seen["bad_fillers"] == 0
    assert high.seen["filler_mask"] & (1 << low.seen["slot"]), "no filler for the idle slot"
    assert not high.seen["filler_mask"] & (1 << high.seen["slot"])
    assert (step_a.seen["acc"], step_b.seen["acc"]) == (4, 6)
    assert after.inference_count - before.inference_count == 6  # fillers are not counted
    assert after.success - before.success == 6
    assert high.seen["batch_size"] in after.batch_sizes


def test_direct_delay_waits_for_slot_utilization(srv: ServerProcess) -> None:
    """direct { max_queue_delay_microseconds: 5 s, minimum_slot_utilization: 0.5 } with four
    slots: a lone request waits for a second sequence's, so two sequences stepping together
    always share an execution."""
    model, ids = "seq_echo_delay", [next(_ids), next(_ids)]
    together = threading.Barrier(2)

    def client(i: int) -> list[Step]:
        steps = []
        with open_transport("grpc", srv) as t:
            for k, value in enumerate([1, 2, 3]):
                together.wait(60)
                steps.append(t.step(model, value + 10 * i, ids[i], start=k == 0, end=k == 2))
        return steps

    first, second = _in_threads(2, client)
    for a, b in zip(first, second, strict=True):
        assert a.seen["execution"] == b.seen["execution"]
        assert a.seen["batch_size"] == b.seen["batch_size"] == 2
    _assert_in_order(first, [1, 2, 3])
    _assert_in_order(second, [11, 12, 13])


def test_start_on_a_running_sequence_restarts_it(srv: ServerProcess) -> None:
    """Triton ends the old sequence early and starts the new one (a warning in its log)."""
    seq = next(_ids)
    with open_transport("grpc", srv) as t:
        assert t.step("seq_echo_direct", 2, seq, start=True).seen["acc"] == 2
        assert t.step("seq_echo_direct", 3, seq).seen["acc"] == 5
        restarted = t.step("seq_echo_direct", 10, seq, start=True)
        assert restarted.seen["acc"] == 10 and restarted.seen["start"] == 1
        assert t.step("seq_echo_direct", 1, seq, end=True).seen["acc"] == 11


# ---------------------------------------------------------------------------------------------
# Oldest strategy, instances, backlog
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_oldest_batches_really_form(srv: ServerProcess, protocol: str) -> None:
    """Eight sequences at once on the oldest strategy: requests of different sequences share
    executions (statistics: fewer executions than inferences, batch sizes above 1), never with
    a filler, and each sequence still runs in order."""
    model, values = "seq_echo_oldest", [1, 2, 3, 4, 5, 6]
    before = model_stats(protocol, srv, model)
    started = threading.Barrier(8)

    def client(i: int) -> list[Step]:
        seq = next(_ids)
        with open_transport(f"{protocol}_aio", srv) as t:
            steps = [t.step(model, values[0], seq, start=True)]
            started.wait(60)
            steps += [t.step(model, v, seq, end=v == values[-1]) for v in values[1:]]
            return steps

    runs = _in_threads(8, client)
    after = model_stats(protocol, srv, model)
    for steps in runs:
        _assert_in_order(steps, values)
        assert all(s.seen["filler_mask"] == 0 and s.seen["batch_size"] <= 4 for s in steps)
    inferences = after.inference_count - before.inference_count
    executions = after.execution_count - before.execution_count
    assert inferences == 8 * len(values)
    assert executions < inferences, (executions, inferences)
    assert max(after.batch_sizes) > 1, after.batch_sizes
    assert max(s.seen["batch_size"] for steps in runs for s in steps) > 1


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_sequences_spread_over_instances(srv: ServerProcess, protocol: str) -> None:
    """Two instances of two slots, four live sequences: each sequence stays on one slot of
    one instance from START to END, and every slot of both instances is used."""
    model, values = "seq_echo_x2", [5, 1, 2, 3, 4, 9]
    started = threading.Barrier(4)

    def client(i: int) -> list[Step]:
        seq = next(_ids)
        with open_transport(protocol, srv) as t:
            steps = [t.step(model, values[0] + i, seq, start=True)]
            started.wait(60)  # all four hold a slot now
            steps += [t.step(model, v, seq, end=v == values[-1]) for v in values[1:]]
            return steps

    runs = _in_threads(4, client)
    places = set()
    for i, steps in enumerate(runs):
        _assert_in_order(steps, [values[0] + i, *values[1:]])
        assert len({(s.seen["pid"], s.seen["slot"]) for s in steps}) == 1
        places.add((steps[0].seen["pid"], steps[0].seen["slot"]))
    assert len(places) == 4
    assert len({pid for pid, _ in places}) == SEQ_X2_INSTANCES


def test_backlog_waits_for_a_slot_in_order(srv: ServerProcess) -> None:
    """One slot: B and C (sent in this order on a stream) wait while A holds it; A's END
    gives the slot to B, B's END to C."""
    model = "seq_one_slot"
    a, b, c = next(_ids), next(_ids), next(_ids)
    stream = StreamTransport(srv.grpc_url)
    try:
        with open_transport("grpc", srv) as t:
            t.step(model, 1, a, start=True, batched=False)
            b_start = stream.send(
                model, {"INPUT0": _int32([2])}, sequence_id=b, sequence_start=True
            )
            c_start = stream.send(
                model, {"INPUT0": _int32([3])}, sequence_id=c, sequence_start=True
            )
            time.sleep(0.3)
            assert not b_start.done() and not c_start.done(), "ran while the slot was taken"
            t.step(model, 1, a, end=True, batched=False)
            b_first = Step(b_start.result(60))
            time.sleep(0.3)
            assert not c_start.done(), "C ran while B held the only slot"
            b_last = t.step(model, 5, b, end=True, batched=False)
            c_first = Step(c_start.result(60))
            c_last = t.step(model, 4, c, end=True, batched=False)
    finally:
        stream.close()
    assert (b_first.seen["acc"], b_last.seen["acc"]) == (2, 7)
    assert (c_first.seen["acc"], c_last.seen["acc"]) == (3, 7)
    assert b_first.seen["execution"] < b_last.seen["execution"] < c_first.seen["execution"]


def test_one_sequence_over_every_transport(srv: ServerProcess) -> None:
    """A sequence's requests may arrive over a gRPC stream, unary gRPC, HTTP (binary and
    JSON) and the asyncio clients, in turn: one sequence, one slot, in order."""
    seq, values = next(_ids), [1, 2, 3, 4, 5, 6, 7]
    with contextlib.ExitStack() as stack:
        stream = stack.enter_context(open_transport("grpc_stream", srv))
        others = [
            stack.enter_context(open_transport(name, srv))
            for name in TRANSPORTS
            if name != "grpc_stream"
        ]
        steps = [stream.step("seq_echo_direct", values[0], seq, start=True)]
        for t, v in zip(others, values[1:-1], strict=True):
            steps.append(t.step("seq_echo_direct", v, seq))
        steps.append(stream.step("seq_echo_direct", values[-1], seq, end=True))
    _assert_in_order(steps, values)
    assert {s.seen["slot"] for s in steps} == {steps[0].seen["slot"]}
    assert {s.id_text for s in steps} == {str(seq)}


# ---------------------------------------------------------------------------------------------
# Idle timeout
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("transport", ["http", "grpc", "grpc_stream"])
def test_idle_sequence_is_released(srv: ServerProcess, transport: str) -> None:
    """A sequence idle past max_sequence_idle_microseconds is gone: its next request without
    START is refused as an unknown sequence, and the ID can start again."""
    model, seq = "seq_echo_idle", next(_ids)
    with open_transport(transport, srv) as t:
        assert t.step(model, 4, seq, start=True).seen["acc"] == 4
        time.sleep(5 * SEQ_SHORT_IDLE_US / 1e6)
        expect_error(
            transport,
            lambda: t.step(model, 1, seq),
            START_ERROR.format(id=seq, model=model),
        )
        # START and END in one request: a pause between two steps could idle it out again
        again = t.step(model, 6, seq, start=True, end=True)
        assert (again.seen["acc"], again.seen["flags"]) == (6, 3)


def _int32(rows: list[Any]) -> np.ndarray:
    return np.array(rows, dtype=np.int32)
