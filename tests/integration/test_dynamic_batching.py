"""Dynamic batching over the real server: batches form under concurrent load (batch_stats),
priorities reorder the queue, queue timeouts and the queue size limit reject with Triton's
errors. Both protocols, through tritonclient's asyncio clients."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc.aio as grpcaio
import tritonclient.http.aio as httpaio
from tritonclient.utils import InferenceServerException

from testkit.server_process import ServerProcess

_MODEL_PY = """\
import time
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        import json
        params = json.loads(args["model_config"]).get("parameters", {})
        self.sleep = float(params.get("sleep_s", {}).get("string_value", "0.05"))

    def execute(self, requests):
        time.sleep(self.sleep)
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor(
                "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
            for r in requests
        ]
"""

_CONFIG = """\
backend: "python"
max_batch_size: {mbs}
input [ {{ name: "INPUT0", data_type: TYPE_FP32, dims: [ 4 ] }} ]
output [ {{ name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 4 ] }} ]
parameters {{ key: "sleep_s" value: {{ string_value: "{sleep}" }} }}
dynamic_batching {{ {batching} }}
"""

# No dynamic batching, two instances: Triton's default scheduler spreads requests over them.
# Each execution reports when it started and ended (OUTPUT0 = [start, end]).
_TWO_INSTANCES = """\
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ 1 ] } ]
output [ { name: "OUTPUT0", data_type: TYPE_FP64, dims: [ 2 ] } ]
instance_group [ { count: 2, kind: KIND_CPU } ]
"""
_WINDOW_PY = """\
import time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        started = time.time()
        time.sleep(0.3)
        window = np.array([started, time.time()], dtype=np.float64)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", window)])
                for _ in requests]
"""

# Two optional inputs: Triton batches only requests that give the same inputs. Each response
# says how many different input sets its execution saw (KINDS) and how many requests (COUNT).
_OPTIONAL = """\
backend: "python"
max_batch_size: 8
input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ 4 ], optional: true },
        { name: "INPUT1", data_type: TYPE_FP32, dims: [ 4 ], optional: true } ]
output [ { name: "KINDS", data_type: TYPE_INT32, dims: [ 1 ] },
         { name: "COUNT", data_type: TYPE_INT32, dims: [ 1 ] } ]
dynamic_batching { max_queue_delay_microseconds: 300000 }
"""
_OPTIONAL_PY = """\
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        sets = {tuple(n for n in ("INPUT0", "INPUT1")
                      if pb_utils.get_input_tensor_by_name(r, n) is not None)
                for r in requests}
        out = [pb_utils.Tensor("KINDS", np.array([[len(sets)]], dtype=np.int32)),
               pb_utils.Tensor("COUNT", np.array([[len(requests)]], dtype=np.int32))]
        return [pb_utils.InferenceResponse(out) for _ in requests]
"""

MODELS = {
    "batching": (8, 0.05, "max_queue_delay_microseconds: 20000"),
    "queue_limited": (1, 0.3, "default_queue_policy { max_queue_size: 2 }"),
    "queue_timeout": (
        1,
        0.3,
        "default_queue_policy { timeout_action: REJECT default_timeout_microseconds: 100000 }",
    ),
    "queue_override": (
        1,
        0.3,
        "default_queue_policy { default_timeout_microseconds: 10000000 "
        "allow_timeout_override: true }",
    ),
    "priority": (1, 0.1, "priority_levels: 2 default_priority_level: 2"),
}


@pytest.fixture(scope="module")
def batching_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("batching") / "repo"
    for name, (mbs, sleep, batching) in MODELS.items():
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(
            _CONFIG.format(mbs=mbs, sleep=sleep, batching=batching)
        )
        (repo / name / "1" / "model.py").write_text(_MODEL_PY)
    (repo / "two_instances" / "1").mkdir(parents=True)
    (repo / "two_instances" / "config.pbtxt").write_text(_TWO_INSTANCES)
    (repo / "two_instances" / "1" / "model.py").write_text(_WINDOW_PY)
    (repo / "optional" / "1").mkdir(parents=True)
    (repo / "optional" / "config.pbtxt").write_text(_OPTIONAL)
    (repo / "optional" / "1" / "model.py").write_text(_OPTIONAL_PY)
    proc = ServerProcess([repo])
    yield proc
    proc.stop()


def _client(protocol: str, proc: ServerProcess) -> Any:
    module = httpaio if protocol == "http" else grpcaio
    return module.InferenceServerClient(proc.url(protocol))


async def _infer(protocol: str, client: Any, model: str, value: float, **kwargs: Any) -> Any:
    module = httpaio if protocol == "http" else grpcaio
    data = np.full((1, 4), value, dtype=np.float32)
    inp = module.InferInput("INPUT0", [1, 4], "FP32")
    inp.set_data_from_numpy(data)
    result = await client.infer(model, [inp], **kwargs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)
    return time.monotonic()


async def _burst(protocol: str, proc: ServerProcess, model: str, count: int) -> list[Any]:
    """``count`` requests at once; each result is a completion time or the exception."""
    client = _client(protocol, proc)
    try:
        return await asyncio.gather(
            *(_infer(protocol, client, model, i) for i in range(count)), return_exceptions=True
        )
    finally:
        await client.close()


def _errors(results: list[Any]) -> list[InferenceServerException]:
    return [r for r in results if isinstance(r, InferenceServerException)]


def test_batches_form_under_concurrent_load(batching_server: ServerProcess, protocol: str) -> None:
    async def main() -> dict:
        client = _client(protocol, batching_server)
        try:
            await asyncio.gather(*(_infer(protocol, client, "batching", i) for i in range(32)))
            stats = await client.get_inference_statistics("batching")
        finally:
            await client.close()
        return (
            stats
            if protocol == "http"
            else {
                "model_stats": [
                    {
                        "batch_stats": [
                            {
                                "batch_size": b.batch_size,
                                "compute_infer": {"count": b.compute_infer.count},
                            }
                            for b in stats.model_stats[0].batch_stats
                        ]
                    }
                ]
            }
        )

    stats = asyncio.run(main())
    sizes = {
        int(b["batch_size"]): int(b["compute_infer"]["count"])
        for b in stats["model_stats"][0]["batch_stats"]
    }
    assert max(sizes) > 1, sizes  # requests were merged into batches
    assert all(size <= 8 for size in sizes)


def test_queue_size_limit_rejects(batching_server: ServerProcess, protocol: str) -> None:
    errors = _errors(asyncio.run(_burst(protocol, batching_server, "queue_limited", 6)))
    assert errors, "with one executing and 2 queued, later requests must be rejected"
    for error in errors:
        assert "Exceeds maximum queue size" in str(error)
        assert error.status() in ("503", "StatusCode.UNAVAILABLE")


def test_queue_timeout_rejects(batching_server: ServerProcess, protocol: str) -> None:
    results = asyncio.run(_burst(protocol, batching_server, "queue_timeout", 4))
    errors = _errors(results)
    assert errors and len(errors) < len(results)
    for error in errors:
        assert "Request timeout expired" in str(error)
        assert error.status() in ("503", "StatusCode.UNAVAILABLE")


def test_request_timeout_override(batching_server: ServerProcess, protocol: str) -> None:
    async def main() -> list[Any]:
        client = _client(protocol, batching_server)
        try:
            first = asyncio.ensure_future(_infer(protocol, client, "queue_override", 0))
            await asyncio.sleep(0.05)  # the first one executes for 0.3 s
            hurried = _infer(protocol, client, "queue_override", 1, timeout=50_000)
            return await asyncio.gather(first, hurried, return_exceptions=True)
        finally:
            await client.close()

    first, hurried = asyncio.run(main())
    assert not isinstance(first, Exception)
    assert isinstance(hurried, InferenceServerException)
    assert "Request timeout expired" in str(hurried)


def test_priorities_reorder_the_queue(batching_server: ServerProcess, protocol: str) -> None:
    async def main() -> tuple[list[float], float]:
        client = _client(protocol, batching_server)
        try:
            blocker = asyncio.ensure_future(_infer(protocol, client, "priority", 0))
            await asyncio.sleep(0.03)
            low = [
                asyncio.ensure_future(_infer(protocol, client, "priority", i + 1)) for i in range(3)
            ]
            await asyncio.sleep(0.03)
            high = asyncio.ensure_future(_infer(protocol, client, "priority", 9, priority=1))
            done = await asyncio.gather(blocker, *low, high)
            return list(done[1:4]), done[4]
        finally:
            await client.close()

    low_done, high_done = asyncio.run(main())
    assert high_done < min(low_done), "the priority-1 request must run before the queued ones"


def test_instances_execute_concurrently(batching_server: ServerProcess, protocol: str) -> None:
    """Two instances, two requests at once: their executions overlap in time."""
    module = httpaio if protocol == "http" else grpcaio

    async def window(client: Any) -> np.ndarray:
        inp = module.InferInput("INPUT0", [1], "FP32")
        inp.set_data_from_numpy(np.zeros(1, dtype=np.float32))
        return (await client.infer("two_instances", [inp])).as_numpy("OUTPUT0")

    async def main() -> list[np.ndarray]:
        client = _client(protocol, batching_server)
        try:
            return list(await asyncio.gather(window(client), window(client)))
        finally:
            await client.close()

    (start_a, end_a), (start_b, end_b) = asyncio.run(main())
    assert start_a < end_b and start_b < end_a, "the two executions did not overlap"


def test_optional_inputs_batch_only_with_the_same_inputs(
    batching_server: ServerProcess, protocol: str
) -> None:
    module = httpaio if protocol == "http" else grpcaio

    async def one(client: Any, name: str) -> tuple[int, int]:
        inp = module.InferInput(name, [1, 4], "FP32")
        inp.set_data_from_numpy(np.ones((1, 4), dtype=np.float32))
        result = await client.infer("optional", [inp])
        return int(result.as_numpy("KINDS")[0][0]), int(result.as_numpy("COUNT")[0][0])

    async def main() -> list[tuple[int, int]]:
        client = _client(protocol, batching_server)
        try:
            names = ["INPUT0", "INPUT0", "INPUT1", "INPUT1", "INPUT0", "INPUT1"]
            return await asyncio.gather(*(one(client, name) for name in names))
        finally:
            await client.close()

    results = asyncio.run(main())
    assert all(kinds == 1 for kinds, _ in results), results
