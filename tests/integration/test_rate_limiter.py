"""The rate limiter over the real server (HTTP and gRPC): three Python models (Triton's default
scheduler, dynamic batching, sequence batching) list one resource "R"; with
``--rate-limit=execution_count`` and ``R:1`` no two of them ever execute at once, while with
``--rate-limit=off`` (the default) they do. A model needing more R than
``--rate-limit-resource`` gives fails its load with Triton's text; the others serve.

Each execution leaves a marker file in a directory shared by the repository's models while it
runs, and looks for another model's marker for up to WAIT seconds (an input): SEEN = 1 when
it found one, i.e. when two executions overlapped. No timing is asserted."""

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

_PROBE_PY = """\
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.markers = os.path.join(os.path.dirname(args["model_repository"]), "markers")
        os.makedirs(self.markers, exist_ok=True)
        self.mine = args["model_name"] + "-" + args["model_instance_name"]

    def execute(self, requests):
        first = pb_utils.get_input_tensor_by_name(requests[0], "WAIT").as_numpy()
        deadline = time.monotonic() + float(first.flat[0])
        mine = os.path.join(self.markers, self.mine)
        open(mine, "w").close()
        seen = 0
        try:
            while not seen and time.monotonic() < deadline:
                seen = int(any(name != self.mine for name in os.listdir(self.markers)))
                time.sleep(0.01)
        finally:
            os.remove(mine)
        responses = []
        for request in requests:
            shape = pb_utils.get_input_tensor_by_name(request, "WAIT").as_numpy().shape
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("SEEN", np.full(shape, seen, dtype=np.int32))]))
        return responses
"""

_LIMITED = 'instance_group [ { count: 1 kind: KIND_CPU rate_limiter { resources [ { name: "R" count: %d } ] } } ]'  # noqa: E501
_IO = """\
input [ { name: "WAIT" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "SEEN" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""
MODELS = {
    "direct": "max_batch_size: 0",
    "batched": "max_batch_size: 4\ndynamic_batching { max_queue_delay_microseconds: 1000 }",
    "sequence": "max_batch_size: 0\nsequence_batching { }",
}
GREEDY = "greedy"  # needs R:2
CONCURRENT = 3  # requests to each model at once
GREEDY_REASON = (
    'Resource count for "R" is limited to 1 which will prevent scheduling of one or more '
    "model instances, the minimum required count is 2"
)


def _repo(root: Path) -> Path:
    configs = {name: (extra, 1) for name, extra in MODELS.items()}
    configs[GREEDY] = ("max_batch_size: 0", 2)
    for name, (extra, count) in configs.items():
        (root / name / "1").mkdir(parents=True)
        config = f'name: "{name}"\nbackend: "python"\n{extra}\n{_IO}{_LIMITED % count}\n'
        (root / name / "config.pbtxt").write_text(config)
        (root / name / "1" / "model.py").write_text(_PROBE_PY)
    return root


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = _repo(tmp_path_factory.mktemp("limited") / "repo")
    proc = ServerProcess(
        [repo],
        "--rate-limit=execution_count",
        "--rate-limit-resource=R:1",
        "--exit-on-error=false",
        "--strict-readiness=false",
    )
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def unlimited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = _repo(tmp_path_factory.mktemp("unlimited") / "repo")
    proc = ServerProcess([repo], "--rate-limit=off")
    yield proc
    proc.stop()


def _module(protocol: str) -> Any:
    return httpaio if protocol == "http" else grpcaio


async def _probe(protocol: str, client: Any, model: str, wait: float, sequence: int) -> int:
    module = _module(protocol)
    shape = [1, 1] if model == "batched" else [1]
    data = np.full(shape, wait, dtype=np.float32)
    inp = module.InferInput("WAIT", shape, "FP32")
    inp.set_data_from_numpy(data)
    kwargs: dict[str, Any] = {}
    if model == "sequence":
        kwargs = {"sequence_id": sequence, "sequence_start": True, "sequence_end": True}
    result = await client.infer(model, [inp], **kwargs)
    return int(result.as_numpy("SEEN").flat[0])


async def _all_at_once(protocol: str, proc: ServerProcess, wait: float, each: int) -> list[int]:
    client = _module(protocol).InferenceServerClient(proc.url(protocol))
    try:
        return await asyncio.wait_for(
            asyncio.gather(
                *(
                    _probe(protocol, client, model, wait, 1 + n)
                    for n in range(each)
                    for model in MODELS
                )
            ),
            120,
        )
    finally:
        await client.close()


def test_models_sharing_a_resource_never_run_at_once(limited: ServerProcess, protocol: str) -> None:
    seen = asyncio.run(_all_at_once(protocol, limited, 0.2, CONCURRENT))
    assert seen == [0] * (CONCURRENT * len(MODELS))


def test_with_rate_limit_off_they_overlap(unlimited: ServerProcess, protocol: str) -> None:
    """Each waits (up to 60 s) for another model's execution to appear beside it."""
    seen = asyncio.run(_all_at_once(protocol, unlimited, 60.0, 1))
    assert any(seen), seen


def test_a_count_below_the_need_fails_the_load_with_tritons_text(
    limited: ServerProcess, unlimited: ServerProcess, protocol: str
) -> None:
    for proc, state, reason in ((limited, "UNAVAILABLE", GREEDY_REASON), (unlimited, "READY", "")):
        rows = asyncio.run(_index(protocol, proc))
        greedy = rows[GREEDY]
        assert (greedy["state"], greedy.get("reason", "")) == (state, reason), greedy
        assert all(rows[name]["state"] == "READY" for name in MODELS), rows


async def _index(protocol: str, proc: ServerProcess) -> dict[str, dict[str, Any]]:
    client = _module(protocol).InferenceServerClient(proc.url(protocol))
    try:
        if protocol == "http":
            rows = await client.get_model_repository_index()
        else:
            rows = (await client.get_model_repository_index(as_json=True)).get("models", [])
    finally:
        await client.close()
    return {row["name"]: row for row in rows}
