"""tritium.pytriton's decorators (PyTriton's ``pytriton.decorators``) on plain requests, with
the model configuration of an execution set as the binding sets it; expected answers worked
out with numpy."""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from tritium.pytriton import decorators as d
from tritium.pytriton._binding import config_dict, model_config, run_callable
from tritium.pytriton.exceptions import PyTritonRuntimeError, PyTritonValidationError
from tritium.pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
from tritium.pytriton.proxy.types import Request

INPUTS = [
    Tensor(name="x", dtype=np.float32, shape=(-1,)),
    Tensor(name="k", dtype=np.int32, shape=(1,)),
]
OUTPUTS = [Tensor(name="y", dtype=np.float32, shape=(-1,))]


def _config(**kwargs: Any) -> Any:
    return model_config("m", 1, ModelConfig(**kwargs), INPUTS, OUTPUTS, 1)


@pytest.fixture
def config() -> Iterator[Any]:
    served = _config(max_batch_size=8, batcher=DynamicBatcher(preferred_batch_size=[4]))
    token = d.running(served)
    yield served
    d.finished(token)


@d.batch
def double(x: np.ndarray, k: np.ndarray) -> dict[str, np.ndarray]:
    return {"y": (x * 2 + k).astype(np.float32)}


def test_batch_joins_requests_and_splits_answers(config: Any) -> None:
    reqs = [
        Request({"x": np.ones((2, 3), np.float32), "k": np.array([[1], [2]], np.int32)}),
        Request({"x": np.full((1, 3), 5, np.float32), "k": np.array([[0]], np.int32)}),
    ]
    answers = double(reqs)
    np.testing.assert_array_equal(answers[0]["y"], np.ones((2, 3)) * 2 + [[1], [2]])
    np.testing.assert_array_equal(answers[1]["y"], np.full((1, 3), 10))


def test_sample_and_list_outputs(config: Any) -> None:
    @d.sample
    def infer(x: np.ndarray, k: np.ndarray) -> list[np.ndarray]:
        return [x + 1]

    (answer,) = infer([Request({"x": np.array([1.0, 2.0], np.float32), "k": np.array([0])})])
    np.testing.assert_array_equal(answer["y"], [2.0, 3.0])


def test_group_by_values_calls_once_per_value(config: Any) -> None:
    seen: list[int] = []

    @d.batch
    @d.group_by_values("k")
    def infer(x: np.ndarray, k: np.ndarray) -> dict[str, np.ndarray]:
        seen.append(len(x))
        assert len(np.unique(k)) == 1
        return {"y": x * k}

    x = np.arange(8, dtype=np.float32).reshape(4, 2)
    k = np.array([[1], [2], [1], [3]], np.int32)
    (answer,) = infer([Request({"x": x, "k": k})])
    np.testing.assert_array_equal(answer["y"], x * k)
    assert sorted(seen) == [1, 1, 2]


def test_group_by_values_before_batch_is_refused(config: Any) -> None:
    infer = d.group_by_values("k")(d.batch(lambda **kw: {"y": kw["x"]}))
    with pytest.raises(PyTritonRuntimeError, match="after the @batch"):
        infer(x=np.zeros((1, 1)), k=np.zeros((1, 1)))


def test_group_by_keys_keeps_request_order(config: Any) -> None:
    @d.group_by_keys
    def infer(requests: list[Request]) -> list[dict[str, np.ndarray]]:
        assert len({tuple(sorted(r.keys())) for r in requests}) == 1
        return [{"y": r["x"] + len(r.keys())} for r in requests]

    reqs = [
        Request({"x": np.array([1.0])}),
        Request({"x": np.array([2.0]), "k": np.array([1])}),
        Request({"x": np.array([3.0])}),
    ]
    assert [float(a["y"][0]) for a in infer(reqs)] == [2.0, 4.0, 4.0]


def test_pad_batch_repeats_the_last_sample_to_a_preferred_size(config: Any) -> None:
    @d.batch
    @d.pad_batch
    def infer(x: np.ndarray, k: np.ndarray) -> dict[str, np.ndarray]:
        assert len(x) == 4  # preferred batch size 4 above 3
        np.testing.assert_array_equal(x[3], x[2])
        return {"y": x[:3]}

    infer([Request({"x": np.arange(6, dtype=np.float32).reshape(3, 2), "k": np.ones((3, 1))})])


def test_first_value_and_fill_optionals(config: Any) -> None:
    @d.fill_optionals(k=np.array([7], np.int32))
    @d.batch
    @d.first_value("k")
    def infer(x: np.ndarray, k: Any) -> dict[str, np.ndarray]:
        assert np.isscalar(k) or np.ndim(k) == 0
        return {"y": x * k}

    (answer,) = infer([Request({"x": np.ones((2, 1), np.float32)})])
    np.testing.assert_array_equal(answer["y"], [[7.0], [7.0]])
    with pytest.raises(PyTritonRuntimeError, match="are not equal"):
        infer([Request({"x": np.ones((2, 1), np.float32), "k": np.array([[1], [2]], np.int32)})])


def test_constant_padder_pads_to_the_largest_shape() -> None:
    padded = d.ConstantPadder(-1)([{"y": np.ones((1, 2))}, {"y": np.ones((2, 3))}])
    np.testing.assert_array_equal(padded[0]["y"], [[1, 1, -1]])
    assert padded[1]["y"].shape == (2, 3)


def test_triton_context_gives_the_model_config(config: Any) -> None:
    @d.triton_context
    def infer(requests: list[Request], triton_context: Any) -> Any:
        return triton_context.model_configs[infer].max_batch_size

    assert infer([]) == 8


def test_outside_an_execution_the_config_is_missing() -> None:
    with pytest.raises(PyTritonValidationError):
        d.get_model_config()


def test_decorated_functions_pickle_by_name() -> None:
    assert pickle.loads(pickle.dumps(double)) is double


def test_run_callable_checks_answers() -> None:
    served = _config(max_batch_size=8)
    calls = [({"x": np.ones((1, 2), np.float32), "k": np.ones((1, 1), np.int32)}, {}, None)]
    (answer,) = list(run_callable(double, served, True, calls))
    np.testing.assert_array_equal(answer[0]["y"], [[3.0, 3.0]])
    with pytest.raises(ValueError, match="does not match number of requests"):
        list(run_callable(lambda reqs: [], served, False, calls))
    with pytest.raises(ValueError, match="invalid type"):
        list(run_callable(lambda reqs: [{"y": np.ones((1, 2), np.int64)}], served, True, calls))
    with pytest.raises(ValueError, match="invalid shapes"):
        list(
            run_callable(lambda reqs: [{"y": np.ones((1, 2, 2), np.float32)}], served, True, calls)
        )


def test_config_is_pytritons() -> None:
    served = config_dict(
        _config(max_batch_size=16, batcher=DynamicBatcher(max_queue_delay_microseconds=50))
    )
    assert served["max_batch_size"] == 16
    assert served["dynamic_batching"] == {"maxQueueDelayMicroseconds": 50}
    assert served["instance_group"] == [{"count": 1, "kind": "KIND_CPU"}]
    assert served["input"][1] == {"name": "k", "dims": [1], "data_type": "TYPE_INT32"}
    assert "dynamic_batching" not in config_dict(_config(batching=False))


def test_async_callables_run_to_their_answers() -> None:
    served = _config(max_batch_size=8, decoupled=True)
    calls = [({"x": np.ones((1, 2), np.float32), "k": np.ones((1, 1), np.int32)}, {}, None)]

    async def once(requests: list[Request]) -> list[dict[str, np.ndarray]]:
        return [{"y": r["x"] + 1} for r in requests]

    async def steps(requests: list[Request]) -> Any:
        for i in range(3):
            yield [{"y": r["x"] * i} for r in requests]

    (answer,) = list(run_callable(once, served, False, calls))
    np.testing.assert_array_equal(answer[0]["y"], [[2.0, 2.0]])
    answers = list(run_callable(steps, served, False, calls))
    assert [float(a[0]["y"][0, 0]) for a in answers] == [0.0, 1.0, 2.0]
