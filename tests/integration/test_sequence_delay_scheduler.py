"""Triton's sequence-batcher testing hooks (sequence_batch_scheduler.cc, set by its
qa/L0_sequence_batcher): with ``TRITONSERVER_DELAY_SCHEDULER=N`` the direct strategy runs
nothing until N requests are queued on its slots, so the N requests sent together are one
batch; with ``TRITONSERVER_BACKLOG_DELAY_SCHEDULER=M`` as well, it also waits until M requests
wait in the backlog. Afterwards it runs as usual. The oldest strategy ignores both (Triton's
OldestSequenceBatch reads neither). Real server, the official HTTP and gRPC clients."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc.aio as grpcaio
import tritonclient.http.aio as httpaio

from testkit.server_process import ServerProcess

HELD = 3
# READY_COUNT: how many real (READY) requests the execution that answered this one had.
MODEL_PY = """\
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        ready = [pb_utils.get_input_tensor_by_name(r, "READY").as_numpy() for r in requests]
        count = np.array([[sum(int(r.reshape(-1)[0]) for r in ready)]], dtype=np.int32)
        out = pb_utils.Tensor("READY_COUNT", count)
        return [pb_utils.InferenceResponse([out]) for _ in requests]
"""
CONFIG = """\
backend: "python"
max_batch_size: 4
input [ { name: "INPUT0", data_type: TYPE_INT32, dims: [ 1 ] } ]
output [ { name: "READY_COUNT", data_type: TYPE_INT32, dims: [ 1 ] } ]
instance_group [ { count: 1, kind: KIND_CPU } ]
sequence_batching {
  max_sequence_idle_microseconds: 60000000
  %s
  control_input [ { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY
                                               int32_false_true: [ 0, 1 ] } ] } ]
}
"""
DIRECT = CONFIG % "direct { }"
OLDEST = CONFIG % "oldest { max_candidate_sequences: 4 }"
ONE_SLOT = DIRECT.replace("max_batch_size: 4", "max_batch_size: 1")
PROTOCOLS = ("http", "grpc")


def _server(repo: Path, models: dict[str, str], env: dict[str, str]) -> ServerProcess:
    for name, config in models.items():
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "1" / "model.py").write_text(MODEL_PY)
        (repo / name / "config.pbtxt").write_text(config)
    with pytest.MonkeyPatch.context() as patch:
        for key, value in env.items():
            patch.setenv(key, value)
        return ServerProcess([repo])


@pytest.fixture(scope="module")
def delayed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    models = {f"direct_{p}": DIRECT for p in PROTOCOLS} | {"oldest": OLDEST}
    env = {"TRITONSERVER_DELAY_SCHEDULER": str(HELD)}
    proc = _server(tmp_path_factory.mktemp("seq_delay"), models, env)
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def backlog_delayed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    env = {"TRITONSERVER_DELAY_SCHEDULER": "1", "TRITONSERVER_BACKLOG_DELAY_SCHEDULER": "1"}
    proc = _server(tmp_path_factory.mktemp("seq_backlog_delay"), {"one_slot": ONE_SLOT}, env)
    yield proc
    proc.stop()


async def _one(client: Any, aio: Any, model: str, sequence: int, **flags: bool) -> int:
    inp = aio.InferInput("INPUT0", [1, 1], "INT32")
    inp.set_data_from_numpy(np.array([[sequence]], dtype=np.int32))
    result = await client.infer(model, [inp], sequence_id=sequence, **flags)
    return int(result.as_numpy("READY_COUNT")[0][0])


async def _sequences(protocol: str, url: str, model: str, ids: range) -> list[int]:
    """One request per sequence (START and END), all sent at once: READY_COUNT of each."""
    aio = httpaio if protocol == "http" else grpcaio
    client = aio.InferenceServerClient(url)
    try:
        calls = (_one(client, aio, model, i, sequence_start=True, sequence_end=True) for i in ids)
        return list(await asyncio.gather(*calls))
    finally:
        await client.close()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_direct_batcher_waits_for_the_held_count_then_runs_as_usual(
    delayed: ServerProcess, protocol: str
) -> None:
    url, model = delayed.url(protocol), f"direct_{protocol}"
    # all three run in one execution (without the hook the first would run alone)
    assert asyncio.run(_sequences(protocol, url, model, range(1, HELD + 1))) == [HELD] * HELD
    # once only: a lone sequence now runs at once, alone
    assert asyncio.run(_sequences(protocol, url, model, range(10, 11))) == [1]


def test_oldest_strategy_ignores_the_hook(delayed: ServerProcess) -> None:
    # Triton's OldestSequenceBatch does not read the variable: a lone request runs at once
    # (held, it would never be answered: 1 < 3).
    result = asyncio.run(_sequences("http", delayed.url("http"), "oldest", range(1, 2)))
    assert result == [1]


async def _backlog_case(url: str) -> tuple[bool, list[int]]:
    client = httpaio.InferenceServerClient(url)
    try:
        # sequence 1 takes the only slot; the hook holds it until a request is backlogged
        first = asyncio.ensure_future(_one(client, httpaio, "one_slot", 1, sequence_start=True))
        done, _ = await asyncio.wait([first], timeout=1.0)
        answered_alone = bool(done)
        # sequence 2 waits in the backlog (the slot is sequence 1's): that lets the batcher go
        second = asyncio.ensure_future(
            _one(client, httpaio, "one_slot", 2, sequence_start=True, sequence_end=True)
        )
        counts = [await first, await _one(client, httpaio, "one_slot", 1, sequence_end=True)]
        counts.append(await second)  # sequence 2 gets the slot once sequence 1 ended
        return answered_alone, counts
    finally:
        await client.close()


def test_backlog_hook_holds_the_batcher_until_a_request_is_backlogged(
    backlog_delayed: ServerProcess,
) -> None:
    answered_alone, counts = asyncio.run(_backlog_case(backlog_delayed.url("http")))
    assert not answered_alone, "sequence 1 ran before any request was in the backlog"
    assert counts == [1, 1, 1]
