"""Every request the sequence batcher refuses, with Triton's exact text and status, over every
transport (a gRPC stream answers in-stream, without a status): no correlation ID, a batch
of more than one, a first request without START (never started, ended, or idled out — the
last in test_sequence_batching.py), an ID of the wrong type for the model's CORRID control,
a backlogged sequence whose request timeout passed, a new sequence beyond
``--sequence-backlog-limit`` (tritium's bound; its ``tritium_sequence_backlog`` gauge). The
server keeps serving afterwards."""

from __future__ import annotations

import concurrent.futures
import itertools
import time
import urllib.request
from collections.abc import Iterator

import numpy as np
import pytest
from tests.support.seq_clients import TRANSPORTS, Transport, expect_error, open_transport, serving
from tests.support.models import build_test_repository
from testkit.server_process import ServerProcess
from tritonclient.utils import InferenceServerException

MODELS = ["seq_echo_direct", "seq_echo_string", "seq_echo_oldest", "seq_one_slot", "seq_state_py"]
NO_ID = "inference request to model '{model}' must specify a non-zero or non-empty correlation ID"
BATCH = (
    "inference request to model '{model}' must specify batch-size 1 due to requirements of "
    "sequence batcher"
)
NO_START = (
    "inference request for sequence {id} to model '{model}' must specify the START flag on "
    "the first request of the sequence"
)
WRONG_TYPE = (
    "sequence batching control 'CORRID' data-type is '{sent}', but model '{model}' expects "
    "'{expected}'"
)
EXPIRED = "timeout of the corresponding sequence has been expired"
BACKLOG_FULL = (
    "Exceeds maximum queue size: {n} sequences of model '{model}' already wait for a sequence "
    "slot (--sequence-backlog-limit)"
)
BACKLOG_LIMIT = 2
_ids = itertools.count(5000)


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with serving(tmp_path_factory, "seqerrors", MODELS) as proc:
        yield proc


@pytest.fixture(params=TRANSPORTS)
def transport(request: pytest.FixtureRequest) -> str:
    return request.param


def _still_serving(t: Transport, model: str = "seq_echo_direct") -> None:
    seq = next(_ids)
    assert t.step(model, 2, seq, start=True).seen["acc"] == 2
    assert t.step(model, 3, seq, end=True).seen["acc"] == 5


@pytest.mark.parametrize("model", ["seq_echo_direct", "seq_echo_oldest", "seq_state_py"])
def test_a_sequence_model_needs_a_correlation_id(
    srv: ServerProcess, transport: str, model: str
) -> None:
    with open_transport(transport, srv) as t:
        for start in (False, True):  # tritonclient sends no flags without an ID either
            expect_error(
                transport, lambda s=start: t.step(model, 1, 0, start=s), NO_ID.format(model=model)
            )
        _still_serving(t)


def test_an_empty_string_id_is_no_id(srv: ServerProcess, transport: str) -> None:
    model = "seq_echo_string"
    with open_transport(transport, srv) as t:
        expect_error(transport, lambda: t.step(model, 1, "", start=True), NO_ID.format(model=model))
        _still_serving(t)


def test_batch_of_more_than_one(srv: ServerProcess, transport: str) -> None:
    model = "seq_echo_direct"
    with open_transport(transport, srv) as t:
        expect_error(
            transport,
            lambda: t.infer(
                model,
                {"INPUT0": np.ones((2, 1), dtype=np.int32)},
                sequence_id=next(_ids),
                sequence_start=True,
            ),
            BATCH.format(model=model),
        )
        _still_serving(t)


@pytest.mark.parametrize("model", ["seq_echo_direct", "seq_echo_oldest"])
def test_first_request_without_start(srv: ServerProcess, transport: str, model: str) -> None:
    """A never-started ID, and an ID whose sequence has ended, both need START again."""
    with open_transport(transport, srv) as t:
        fresh = next(_ids)
        expect_error(
            transport, lambda: t.step(model, 1, fresh), NO_START.format(id=fresh, model=model)
        )
        expect_error(
            transport,
            lambda: t.step(model, 1, fresh, end=True),
            NO_START.format(id=fresh, model=model),
        )
        ended = next(_ids)
        t.step(model, 1, ended, start=True, end=True)
        expect_error(
            transport, lambda: t.step(model, 1, ended), NO_START.format(id=ended, model=model)
        )
        _still_serving(t)


def test_first_request_without_start_string_id(srv: ServerProcess, transport: str) -> None:
    model, seq = "seq_echo_string", f"never-started-{next(_ids)}"
    with open_transport(transport, srv) as t:
        expect_error(transport, lambda: t.step(model, 1, seq), NO_START.format(id=seq, model=model))


def test_id_of_the_wrong_type(srv: ServerProcess, transport: str) -> None:
    """A string ID for a UINT64 CORRID control, a number for a STRING one."""
    with open_transport(transport, srv) as t:
        expect_error(
            transport,
            lambda: t.step("seq_echo_direct", 1, "abc", start=True),
            WRONG_TYPE.format(sent="BYTES", model="seq_echo_direct", expected="UINT64"),
        )
        expect_error(
            transport,
            lambda: t.step("seq_echo_string", 1, 77, start=True),
            WRONG_TYPE.format(sent="UINT64", model="seq_echo_string", expected="BYTES"),
        )
        _still_serving(t)


def test_any_id_type_without_a_corrid_control(srv: ServerProcess) -> None:
    """Only a CORRID control fixes the ID type: a model without one takes both."""
    with open_transport("grpc", srv) as t:
        for seq in (next(_ids), f"text-{next(_ids)}"):
            assert t.step("seq_state_py", 4, seq, start=True).output == 4
            assert t.step("seq_state_py", 5, seq, end=True).output == 9


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_backlogged_sequence_times_out(srv: ServerProcess, protocol: str) -> None:
    """A sequence waiting in the backlog for longer than its request's timeout is refused
    with UNAVAILABLE while the slot is still taken; the slot's own sequence is unaffected."""
    model, holder, waiter = "seq_one_slot", next(_ids), next(_ids)
    with open_transport(protocol, srv) as t:
        t.step(model, 1, holder, start=True, batched=False)
        expect_error(
            protocol,
            lambda: t.step(model, 1, waiter, start=True, batched=False, timeout=200_000),
            EXPIRED,
            kind="UNAVAILABLE",
        )
        assert t.step(model, 2, holder, batched=False).seen["acc"] == 3
        expect_error(
            protocol,
            lambda: t.step(model, 1, waiter, batched=False),
            NO_START.format(id=waiter, model=model),
        )
        assert t.step(model, 3, holder, end=True, batched=False).seen["acc"] == 6


def test_errors_do_not_disturb_a_running_sequence(srv: ServerProcess) -> None:
    """Refused requests between the steps of a live sequence leave it intact."""
    model, seq = "seq_echo_direct", next(_ids)
    with open_transport("grpc_stream", srv) as t:
        assert t.step(model, 1, seq, start=True).seen["acc"] == 1
        for bad in (
            lambda: t.step(model, 1, 0),
            lambda: t.step(model, 1, "x", start=True),
            lambda: t.step(model, 1, next(_ids)),
        ):
            with pytest.raises(InferenceServerException):
                bad()
        assert t.step(model, 2, seq, end=True).seen["acc"] == 3


@pytest.fixture(scope="module")
def bounded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = build_test_repository(tmp_path_factory.mktemp("seqbound") / "repo", ["seq_one_slot"])
    proc = ServerProcess([repo], f"--sequence-backlog-limit={BACKLOG_LIMIT}")
    yield proc
    proc.stop()


def _backlog_gauge(proc: ServerProcess, model: str) -> int:
    url = f"http://127.0.0.1:{proc.ports['metrics']}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    for line in text.splitlines():
        if line.startswith("tritium_sequence_backlog{") and f'model="{model}"' in line:
            return int(float(line.rsplit(" ", 1)[1]))
    raise AssertionError(f"no tritium_sequence_backlog series for {model}:\n{text}")


def _wait(check: object, what: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError(f"not within 60 s: {what}")


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_new_sequence_beyond_the_backlog_bound_is_refused_at_once(
    bounded: ServerProcess, protocol: str
) -> None:
    """One slot, a backlog of at most two: with the slot held and two sequences waiting, a
    third START is refused UNAVAILABLE at once (Triton's full-queue answer) while the held
    sequence goes on; the waiting ones get the slot in turn, and then there is room again."""
    model, holder, over = "seq_one_slot", next(_ids), next(_ids)
    waiters = [next(_ids) for _ in range(BACKLOG_LIMIT)]

    def start(cid: int) -> int:
        with open_transport(protocol, bounded) as own:
            own.step(model, 1, cid, start=True, batched=False)
        return cid

    with (
        open_transport(protocol, bounded) as t,
        concurrent.futures.ThreadPoolExecutor(BACKLOG_LIMIT) as pool,
    ):
        t.step(model, 1, holder, start=True, batched=False)
        waiting = [pool.submit(start, cid) for cid in waiters]
        _wait(lambda: _backlog_gauge(bounded, model) == BACKLOG_LIMIT, "two sequences waiting")
        expect_error(
            protocol,
            lambda: t.step(model, 1, over, start=True, batched=False),
            BACKLOG_FULL.format(n=BACKLOG_LIMIT, model=model),
            kind="UNAVAILABLE",
        )
        assert t.step(model, 2, holder, batched=False).seen["acc"] == 3
        t.step(model, 3, holder, end=True, batched=False)
        pending = set(waiting)
        while pending:  # each waiter gets the slot in turn; ending it frees it for the next
            done, pending = concurrent.futures.wait(
                pending, timeout=60, return_when="FIRST_COMPLETED"
            )
            assert done, "a backlogged sequence never got the slot"
            for future in done:
                t.step(model, 1, future.result(), end=True, batched=False)
        assert _backlog_gauge(bounded, model) == 0
        assert t.step(model, 4, over, start=True, end=True, batched=False).seen["acc"] == 4
