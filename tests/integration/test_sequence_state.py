"""Implicit state (``sequence_batching.state``) over the real server: the server feeds each
step the state the previous step produced (a running sum), starts from the configured
``initial_state`` (zeros, or a ``data_file``) at START, keeps sequences apart, does not return
the state to the client, and works for Python and ONNX models. Then thousands of abandoned
sequences (START, never END) on a model with a short idle timeout: they are released, the
server's memory stays bounded, and new sequences still get slots."""

from __future__ import annotations

import itertools
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tests.support.seq_clients import TRANSPORTS, Transport, model_stats, open_transport, serving
from tests.support.sequence_models import (
    SEQ_ABANDON_CANDIDATES,
    SEQ_INITIAL_STATE,
    SEQ_SHORT_IDLE_US,
)
from testkit.server_process import ServerProcess

MODELS = ["seq_state_py", "seq_state_file", "seq_state_onnx", "seq_abandon"]
ABANDONED = 10_000  # sequences started and never ended, per round
RSS_SLACK_KIB = 16 * 1024  # what a second round may add to the server's resident memory
_ids = itertools.count(9000)


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with serving(tmp_path_factory, "seqstate", MODELS) as proc:
        yield proc


def _sums(t: Transport, model: str, seq: int | str, values: list[float], **kw: object) -> list:
    last = len(values) - 1
    return [
        t.step(model, v, seq, start=i == 0, end=i == last, **kw).output
        for i, v in enumerate(values)
    ]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_state_carries_across_steps(srv: ServerProcess, transport: str) -> None:
    values = [5, 7, -2, 1, 30]
    with open_transport(transport, srv) as t:
        assert _sums(t, "seq_state_py", next(_ids), values) == list(itertools.accumulate(values))


@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_state_is_not_returned_to_the_client(srv: ServerProcess, transport: str) -> None:
    seq = next(_ids)
    with open_transport(transport, srv) as t:
        result = t.step("seq_state_py", 3, seq, start=True, end=True).result
    assert result.as_numpy("STATE_OUT") is None
    assert result.as_numpy("OUTPUT0") is not None


def test_state_resets_at_start(srv: ServerProcess) -> None:
    """A START, even on a sequence in progress, begins again from the initial state."""
    seq = next(_ids)
    with open_transport("grpc", srv) as t:
        assert t.step("seq_state_py", 5, seq, start=True).output == 5
        assert t.step("seq_state_py", 5, seq).output == 10
        assert t.step("seq_state_py", 1, seq, start=True).output == 1  # restarted
        assert t.step("seq_state_py", 1, seq, end=True).output == 2
        assert _sums(t, "seq_state_py", seq, [3, 4]) == [3, 7]  # the same ID, a new sequence


def test_concurrent_sequences_keep_their_own_state(srv: ServerProcess) -> None:
    """Three sequences in step with each other (so batches hold several slots, and fillers),
    plus three more threads: each sum is its own."""
    values = {i: [i * 100 + k for k in range(8)] for i in range(6)}
    sums: dict[int, list[float]] = {}

    def run(i: int) -> None:
        with open_transport("grpc_aio" if i % 2 else "http", srv) as t:
            sums[i] = _sums(t, "seq_state_py", next(_ids), values[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in values]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert sums == {i: list(itertools.accumulate(v)) for i, v in values.items()}


@pytest.mark.parametrize("transport", ["http_json", "grpc_stream"])
def test_initial_state_from_a_data_file(srv: ServerProcess, transport: str) -> None:
    with open_transport(transport, srv) as t:
        for _ in range(2):  # every sequence starts from the file's value
            got = _sums(t, "seq_state_file", next(_ids), [1, 2, 3], batched=False)
            assert got == [SEQ_INITIAL_STATE + 1, SEQ_INITIAL_STATE + 3, SEQ_INITIAL_STATE + 6]


@pytest.mark.parametrize("transport", ["http", "grpc", "grpc_aio"])
def test_onnx_model_with_implicit_state(srv: ServerProcess, transport: str) -> None:
    """The state is an input and an output of the ONNX graph; two interleaved sequences."""
    a, b = next(_ids), next(_ids)
    with open_transport(transport, srv) as t:
        kw = {"dtype": np.float32}
        got = [
            t.step("seq_state_onnx", 1.5, a, start=True, **kw).output,
            t.step("seq_state_onnx", 10, b, start=True, **kw).output,
            t.step("seq_state_onnx", 2, a, **kw).output,
            t.step("seq_state_onnx", 20, b, **kw).output,
            t.step("seq_state_onnx", 0.25, a, end=True, **kw).output,
            t.step("seq_state_onnx", 5, b, end=True, **kw).output,
        ]
    assert got == [1.5, 10.0, 3.5, 30.0, 3.75, 35.0]


# ---------------------------------------------------------------------------------------------
# Thousands of abandoned sequences
# ---------------------------------------------------------------------------------------------
def _abandon(url: str, count: int) -> int:
    """Start ``count`` sequences on one gRPC stream and never end them; return how many
    answered with an error (all answers are awaited)."""
    done, errors = threading.Event(), []
    answered = itertools.count(1)

    def callback(result: object, error: object) -> None:
        if error is not None:
            errors.append(error)
        if next(answered) == count:
            done.set()

    first = next(_ids)
    for _ in range(count):
        next(_ids)
    inp = grpcclient.InferInput("INPUT0", [1, 1], "INT32")
    inp.set_data_from_numpy(np.ones((1, 1), dtype=np.int32))
    with grpcclient.InferenceServerClient(url) as c:
        c.start_stream(callback=callback)
        for seq in range(first, first + count):
            c.async_stream_infer("seq_abandon", [inp], sequence_id=seq, sequence_start=True)
        assert done.wait(120), "not every abandoned sequence was answered"
        c.stop_stream()
    return len(errors)


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def _pending(server: ServerProcess) -> float:
    """nv_inference_pending_request_count of seq_abandon, from the metrics endpoint."""
    url = f"http://127.0.0.1:{server.ports['metrics']}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    for line in text.splitlines():
        if line.startswith("nv_inference_pending_request_count") and "seq_abandon" in line:
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError("no pending count for seq_abandon")


def _all_slots_free(server: ServerProcess) -> None:
    """As many new sequences as the model has slots all start at once (none waits in the
    backlog, so every abandoned one was released), and each sees fresh state."""
    idle_s = SEQ_SHORT_IDLE_US / 1e6
    time.sleep(3 * idle_s)
    with open_transport("grpc_stream", server) as t:
        ids = [next(_ids) for _ in range(SEQ_ABANDON_CANDIDATES)]
        futures = [
            t.send(
                "seq_abandon",
                {"INPUT0": np.full((1, 1), 7, np.int32)},
                sequence_id=i,
                sequence_start=True,
                outputs=["OUTPUT0"],
            )
            for i in ids
        ]
        outputs = [f.result(60).as_numpy("OUTPUT0").item() for f in futures]
    assert outputs == [7] * len(ids)
    time.sleep(3 * idle_s)


def test_abandoned_sequences_are_released(srv: ServerProcess) -> None:
    before = model_stats("grpc", srv, "seq_abandon")
    assert _abandon(srv.grpc_url, ABANDONED) == 0
    _all_slots_free(srv)
    rss_first = _rss_kib(srv.proc.pid)
    assert _abandon(srv.grpc_url, ABANDONED) == 0
    _all_slots_free(srv)
    rss_second = _rss_kib(srv.proc.pid)
    after = model_stats("grpc", srv, "seq_abandon")
    sent = 2 * (ABANDONED + SEQ_ABANDON_CANDIDATES)
    assert after.inference_count - before.inference_count == sent
    assert after.success - before.success == sent
    assert _pending(srv) == 0
    # A second round of ten thousand leaves the server where the first one did (measured:
    # within 1 MiB; keeping each abandoned request would add about 100 MiB a round).
    assert rss_second - rss_first < RSS_SLACK_KIB, (rss_first, rss_second)
