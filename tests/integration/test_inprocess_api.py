"""tritium.tritonserver, Triton's in-process Python API, on a server in this process: what
Triton core's python/test/test_api.py checks where it applies to a CPU server (start/stop,
readiness, options refused, model listing and control, inference on ONNX and Python models,
decoupled responses, parameters, response queues, the error classes, Tensor and DLPack),
plus cancellation and use from threads and from the caller's own event loop."""

from __future__ import annotations

import asyncio
import gc
import json
import queue
import re
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import tritium.tritonserver as ts
from tests.support.inprocess_api import api_repository

SIMPLE_IN = np.arange(16, dtype=np.int32).reshape(1, 16)
WAIT_S = 30.0  # a generous bound on a wait (never a timing assertion)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return api_repository(tmp_path_factory.mktemp("inprocess_api"))


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[ts.Server]:
    started = ts.Server(model_repository=str(repo), exit_timeout=5).start(wait_until_ready=True)
    yield started
    started.stop()


def _simple(server: ts.Server, a: np.ndarray = SIMPLE_IN) -> dict[str, np.ndarray]:
    (response,) = list(server.model("simple").infer(inputs={"INPUT0": a, "INPUT1": SIMPLE_IN}))
    assert response.final and response.error is None
    return {name: np.from_dlpack(t) for name, t in response.outputs.items()}


# -- the server ----------------------------------------------------------------------------------
def test_not_started_raises_invalid_argument() -> None:
    server = ts.Server(model_repository="/nonexistent")
    for call in (server.ready, server.live, server.metadata, server.models, server.stop):
        with pytest.raises(ts.InvalidArgumentError, match="Server not started"):
            call()
    with pytest.raises(ts.InvalidArgumentError):
        server.model("simple")


def test_invalid_option_types_raise_type_error() -> None:
    with pytest.raises(TypeError):
        ts.Server(server_id=1).start()  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        ts.Server(model_repository=1).start()  # type: ignore[arg-type]


def test_missing_repository() -> None:
    with pytest.raises(ts.InvalidArgumentError, match="Model repository must be specified"):
        ts.Server(model_repository=None).start()  # type: ignore[arg-type]
    with pytest.raises(ts.InternalError, match="foo"):
        ts.Server(model_repository="foo").start()


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("pinned_memory_pool_size", 1 << 20),
        ("cuda_memory_pool_sizes", {0: 1 << 20}),
        ("backend_directory", "/tmp"),
        ("host_policies", {"p": {"numa-node": "0"}}),
        ("cache_config", {"redis": {"host": "x"}}),
    ],
)
def test_options_tritium_cannot_honour_are_refused(repo: Path, option: str, value: object) -> None:
    with pytest.raises(ts.UnsupportedError, match=option):
        ts.Server(model_repository=str(repo), **{option: value}).start()


def test_started_server(server: ts.Server) -> None:
    assert server.live() and server.ready()
    metadata = server.metadata()
    assert metadata["name"] == "triton" and "model_repository" in metadata["extensions"]
    with pytest.raises(ts.InvalidArgumentError, match="already started"):
        server.start()


def test_models_listed(server: ts.Server) -> None:
    models = server.models()
    assert models[("simple", 1)].state == "READY"
    assert models["simple"].name == "simple" and models["simple"].version == -1
    with pytest.raises(KeyError):
        models["nope"]
    assert server.model("simple").ready()
    assert not server.model("simple", 7).ready()
    assert server.model("simple").batch_properties() is ts.ModelBatchFlag.FIRST_DIM
    assert (
        server.model("square_int32").transaction_properties() is ts.ModelTxnPropertyFlag.DECOUPLED
    )
    assert server.model("simple").config()["name"] == "simple"
    metadata = server.model("simple").metadata()
    assert [i["name"] for i in metadata["inputs"]] == ["INPUT0", "INPUT1"]


def test_explicit_load_and_unload(repo: Path) -> None:
    server = ts.Server(
        model_repository=str(repo),
        model_control_mode=ts.ModelControlMode.EXPLICIT,
        startup_models=["simple"],
    ).start(wait_until_ready=True)
    try:
        assert server.model("simple").ready()
        assert not server.model("add_sub_python").ready()
        server.load("add_sub_python")
        assert server.models(exclude_not_ready=True)[("add_sub_python", 1)].state == "READY"
        config = {"name": "simple", "backend": "onnxruntime", "max_batch_size": 4}
        model = server.load("simple", {"config": json.dumps(config)})
        assert model.config()["max_batch_size"] == 4
        server.unload("add_sub_python", wait_until_unloaded=True, timeout=WAIT_S)
        assert server.models()[("add_sub_python", 1)].state == "UNAVAILABLE"
        with pytest.raises(ts.InvalidArgumentError):
            server.load("simple", {"unknown": "x"})
        with pytest.raises(ts.TritonError):
            server.load("not_in_the_repository")
    finally:
        server.stop()
    with pytest.raises(ts.InvalidArgumentError):
        server.ready()


@pytest.mark.parametrize(
    ("startup", "expected"),
    [
        (["nonexistent_model"], "failed to poll model 'nonexistent_model': model not found"),
        (["simple", "nonexistent_model"], "model not found in any model repository"),
        (["*", "simple"], "Wildcard model name '*' must be the ONLY startup model"),
    ],
)
def test_startup_models_that_cannot_load_fail_the_start(
    repo: Path, startup: list[str], expected: str
) -> None:
    # Triton's manager refuses "*" beside other names and a startup model no repository
    # holds; with exit_on_error (the default) the start fails (Triton's OpenAI front-end's
    # test_model_management checks these texts).
    server = ts.Server(
        model_repository=str(repo),
        model_control_mode=ts.ModelControlMode.EXPLICIT,
        startup_models=startup,
    )
    with pytest.raises(ts.InternalError, match=re.escape(expected)):
        server.start(wait_until_ready=True, timeout=WAIT_S)
    with pytest.raises(ts.InvalidArgumentError, match="Server not started"):
        server.ready()


def test_unknown_startup_model_without_exit_on_error_loads_the_others(repo: Path) -> None:
    server = ts.Server(
        model_repository=str(repo),
        model_control_mode=ts.ModelControlMode.EXPLICIT,
        startup_models=["simple", "nonexistent_model"],
        exit_on_error=False,
    ).start(wait_until_ready=True, timeout=WAIT_S)
    try:
        assert server.model("simple").ready()
    finally:
        server.stop()


def test_start_again_after_stop(repo: Path) -> None:
    server = ts.Server(
        model_repository=str(repo),
        model_control_mode=ts.ModelControlMode.EXPLICIT,
        startup_models=["simple"],
    )
    for _ in range(2):
        server.start(wait_until_ready=True, timeout=WAIT_S)
        np.testing.assert_array_equal(_simple(server)["OUTPUT1"], SIMPLE_IN * 0)
        server.stop()
        with pytest.raises(ts.InvalidArgumentError, match="Server not started"):
            server.ready()


def test_metrics(server: ts.Server) -> None:
    _simple(server)
    text = server.metrics()
    assert 'nv_inference_request_success{model="simple",version="1"}' in text


def test_custom_metrics_are_rendered_and_follow_their_objects(server: ts.Server) -> None:
    """Triton's ``MetricFamily``/``Metric``: a counter and a gauge with labels, shown by the
    server's metrics beside its own families; a family whose objects are gone is not."""
    requests = ts.MetricFamily(ts.MetricKind.COUNTER, "app_requests", "requests seen")
    depth = ts.MetricFamily(ts.MetricKind.GAUGE, "app_queue_depth", "queue depth")
    seen = ts.Metric(requests, {"route": "a"})
    queued = ts.Metric(depth)
    assert (seen.kind, queued.kind) == (ts.MetricKind.COUNTER, ts.MetricKind.GAUGE)
    seen.increment(2)
    seen.increment(3)
    queued.set_value(7)
    queued.increment(-2)
    assert (seen.value, queued.value) == (5.0, 5.0)
    text = server.metrics()
    assert "# TYPE app_requests counter" in text
    assert 'app_requests{route="a"} 5' in text
    assert "app_queue_depth 5" in text
    assert "nv_inference_request_success" in text or "nv_inference_count" in text
    del seen, queued, requests, depth
    gc.collect()
    assert "app_requests" not in server.metrics()


def test_custom_metric_refusals() -> None:
    """Triton's errors: a counter goes only up and cannot be set; a name Prometheus refuses,
    or the server's own family names, are refused; histograms need buckets this API lacks."""
    counter = ts.Metric(ts.MetricFamily(ts.MetricKind.COUNTER, "app_refusals", "c"))
    with pytest.raises(ts.InvalidArgumentError, match="monotonically"):
        counter.increment(-1)
    with pytest.raises(ts.UnsupportedError, match="does not support Set"):
        counter.set_value(3)
    with pytest.raises(ts.InvalidArgumentError, match="Invalid metric name"):
        ts.MetricFamily(ts.MetricKind.GAUGE, "not a name", "x")
    with pytest.raises(ts.InvalidArgumentError):
        ts.MetricFamily(ts.MetricKind.GAUGE, "nv_inference_count", "taken by the server")
    with pytest.raises(ts.InvalidArgumentError, match="different type"):
        ts.MetricFamily(ts.MetricKind.GAUGE, "app_refusals", "a counter already")
    with pytest.raises(ts.UnsupportedError, match="bucket"):
        ts.MetricFamily(ts.MetricKind.HISTOGRAM, "app_latency", "x")


# -- inference -----------------------------------------------------------------------------------
def test_infer_onnx_simple(server: ts.Server) -> None:
    outputs = _simple(server, SIMPLE_IN * 3)
    np.testing.assert_array_equal(outputs["OUTPUT0"], SIMPLE_IN * 4)
    np.testing.assert_array_equal(outputs["OUTPUT1"], SIMPLE_IN * 2)


def test_infer_python_model_with_request_object(server: ts.Server) -> None:
    model = server.model("add_sub_python")
    request = model.create_request(request_id="r1")
    request.inputs["INPUT0"] = ts.Tensor.from_dlpack(SIMPLE_IN)
    request.inputs["INPUT1"] = SIMPLE_IN
    (response,) = list(model.infer(request))
    assert response.request_id == "r1"
    assert response.model.name == "add_sub_python" and response.model.version == 1
    np.testing.assert_array_equal(np.asarray(response.outputs["OUTPUT0"]), SIMPLE_IN * 2)


def test_decoupled_yields_every_response(server: ts.Server) -> None:
    responses = list(server.model("square_int32").infer(inputs={"IN": np.array([4], np.int32)}))
    assert [r.final for r in responses] == [False] * 4 + [True]
    assert [np.from_dlpack(r.outputs["OUT"]).tolist() for r in responses[:4]] == [[4]] * 4
    assert responses[-1].outputs == {}


def test_bytes_tensors(server: ts.Server) -> None:
    text = np.array([["hello"]], dtype=object)
    (response,) = list(server.model("text_echo").infer(inputs={"text_input": text[0]}))
    out = response.outputs["text_output"]
    assert out.data_type is ts.DataType.BYTES
    assert out.to_bytes_array().tolist() == [b"olleh"]
    assert out.to_string_array().tolist() == ["olleh"]
    tensor = ts.Tensor.from_string_array([["hello"]])
    assert tensor.to_string_array().tolist() == [["hello"]]
    with pytest.raises(ts.InvalidArgumentError):
        np.from_dlpack(out)  # BYTES has no DLPack type (as Triton's)


def test_parameters_reach_the_model(server: ts.Server) -> None:
    given = {"int_parameter": 0, "float_parameter": 0.5, "bool_parameter": False, "s": "test"}
    (response,) = list(
        server.model("parameters_echo").infer(
            inputs={"INPUT0": np.array([1], np.int32)}, parameters=given
        )
    )
    assert json.loads(response.outputs["OUTPUT0"].to_string_array()[0]) == given
    for bad in ({"invalid": {"test": 1}}, {"invalid": None}):
        with pytest.raises(ts.InvalidArgumentError):
            server.model("parameters_echo").infer(
                inputs={"INPUT0": np.array([1], np.int32)}, parameters=bad
            )


def test_errors_are_triton_classes(server: ts.Server) -> None:
    with pytest.raises(ts.NotFoundError):
        server.model("nope").infer(inputs={})
    with pytest.raises(ts.InvalidArgumentError, match="missing required input"):
        server.model("simple").infer(inputs={"INPUT0": SIMPLE_IN})
    with pytest.raises(ts.InvalidArgumentError):
        server.model("simple").infer(inputs={"INPUT0": object()})
    with pytest.raises(ts.InvalidArgumentError):  # Triton's answer to a bad memory type
        server.model("simple").infer(
            inputs={"INPUT0": SIMPLE_IN, "INPUT1": SIMPLE_IN}, output_memory_type="unsupported"
        )
    with pytest.raises(ts.UnsupportedError):
        server.model("simple").infer(
            inputs={"INPUT0": SIMPLE_IN, "INPUT1": SIMPLE_IN}, output_memory_type="gpu"
        )
    assert issubclass(ts.CancelledError, ts.UnknownError)


def test_an_input_name_that_is_not_a_string_is_a_type_error(server: ts.Server) -> None:
    # Triton's bindings take input names as str (pybind raises TypeError); Triton's OpenAI
    # front-end sends a None name to a model with no exclude_input_in_output input.
    inputs = {"INPUT0": SIMPLE_IN, "INPUT1": SIMPLE_IN, None: SIMPLE_IN}
    with pytest.raises(TypeError, match="input name"):
        server.model("simple").infer(inputs=inputs)


def test_error_response(server: ts.Server) -> None:
    value = np.ones(2, np.float32)
    (response,) = list(
        server.model("error_response").infer(inputs={"INPUT0": value}, raise_on_error=False)
    )
    assert response.final and isinstance(response.error, ts.TritonError)
    assert "bad things" in str(response.error.args[0])
    assert response.error.args[-1] is response  # as Triton's: the error carries its response
    with pytest.raises(ts.TritonError, match="bad things"):
        list(server.model("error_response").infer(inputs={"INPUT0": value}))


def test_fp16_and_bf16(server: ts.Server) -> None:
    half = np.random.rand(100).astype(np.float16)
    (response,) = list(server.model("identity_fp16").infer(inputs={"INPUT0": half}))
    np.testing.assert_array_equal(np.from_dlpack(response.outputs["OUTPUT0"]), half)
    bf16 = ts.DataType.BF16
    import ml_dtypes

    values = np.array([1.5, -2.0], dtype=ml_dtypes.bfloat16)
    (response,) = list(server.model("identity_bf16").infer(inputs={"INPUT0": values}))
    out = response.outputs["OUTPUT0"]
    assert out.data_type is bf16
    np.testing.assert_array_equal(np.asarray(out), values)  # numpy interop keeps bfloat16
    with pytest.raises(ts.UnsupportedError, match="BF16"):
        np.from_dlpack(out)  # numpy has no DLPack bfloat16


def test_cancel_after_stop_is_harmless(repo: Path) -> None:
    server = ts.Server(
        model_repository=str(repo),
        model_control_mode=ts.ModelControlMode.EXPLICIT,
        startup_models=["square_int32"],
    ).start(wait_until_ready=True)
    model = server.model("square_int32")
    iterator = model.infer(inputs={"IN": np.array([2], np.int32)})
    loop = server._loop_or_raise()
    server.stop()
    iterator.cancel()
    with pytest.raises(ts.InvalidArgumentError, match="Server not started"):
        model.infer(inputs={"IN": np.array([2], np.int32)})
    with pytest.raises(ts.UnavailableError, match="stopping"):
        loop.soon(print)  # a stopped loop schedules nothing that could never run


def test_response_queue(server: ts.Server) -> None:
    responses: queue.SimpleQueue[ts.InferenceResponse] = queue.SimpleQueue()
    inputs = {"INPUT0": SIMPLE_IN, "INPUT1": SIMPLE_IN}
    iterators = [
        server.model("simple").infer(inputs=inputs, response_queue=responses) for _ in range(2)
    ]
    for _ in range(2):  # filled without iterating
        got = responses.get(timeout=WAIT_S)
        np.testing.assert_array_equal(np.from_dlpack(got.outputs["OUTPUT0"]), SIMPLE_IN * 2)
    for iterator in iterators:
        assert [r.final for r in iterator] == [True]
    assert responses.empty()


def test_cancel_a_running_decoupled_request(server: ts.Server) -> None:
    iterator = server.model("cancellable").infer(
        inputs={"IN": np.array([0], np.int32)}, raise_on_error=False
    )
    first = next(iterator)
    assert first.error is None and not first.final
    iterator.cancel()
    rest = list(iterator)
    assert rest[-1].final
    assert isinstance(rest[-1].error, ts.CancelledError)
    assert len(rest) < 400  # it stopped well before its 500 responses


def test_cancel_raises_with_raise_on_error(server: ts.Server) -> None:
    iterator = server.model("cancellable").infer(inputs={"IN": np.array([0], np.int32)})
    next(iterator)
    iterator.cancel()
    with pytest.raises(ts.CancelledError):
        for _ in iterator:
            pass


def test_from_threads(server: ts.Server) -> None:
    seen: dict[int, set[int]] = {}

    def work(k: int) -> None:
        seen[k] = {int(_simple(server, SIMPLE_IN * k)["OUTPUT0"][0, 1]) for _ in range(20)}

    threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT_S)
    assert seen == {k: {k + 1} for k in range(6)}


def test_async_infer_in_the_callers_loop(server: ts.Server) -> None:
    async def one(k: int) -> list[int]:
        got = []
        async for response in server.model("square_int32").async_infer(
            inputs={"IN": np.array([k], np.int32)}
        ):
            if not response.final:
                got.append(int(np.from_dlpack(response.outputs["OUT"])[0]))
        return got

    async def main() -> tuple[list[list[int]], bool]:
        ticks = 0

        async def ticker() -> None:  # the caller's loop keeps running meanwhile
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        task = asyncio.create_task(ticker())
        results = await asyncio.gather(*(one(k) for k in (1, 2, 3)))
        task.cancel()
        return list(results), ticks > 0

    results, ticked = asyncio.run(main())
    assert results == [[1], [2, 2], [3, 3, 3]] and ticked


def test_async_infer_errors_and_queue(server: ts.Server) -> None:
    async def main() -> None:
        with pytest.raises(ts.NotFoundError):
            async for _ in server.model("nope").async_infer(inputs={}):
                pass
        responses: asyncio.Queue[ts.InferenceResponse] = asyncio.Queue()
        inputs = {"INPUT0": SIMPLE_IN, "INPUT1": SIMPLE_IN}
        iterator = server.model("add_sub_python").async_infer(
            inputs=inputs, response_queue=responses
        )
        got = await asyncio.wait_for(responses.get(), WAIT_S)
        np.testing.assert_array_equal(np.from_dlpack(got.outputs["OUTPUT1"]), SIMPLE_IN * 0)
        assert [r.final async for r in iterator] == [True]

    asyncio.run(main())


def test_blocking_call_on_the_server_loop_is_refused(server: ts.Server) -> None:
    loop = server._loop_or_raise()
    result: queue.SimpleQueue[BaseException | bool] = queue.SimpleQueue()

    def on_loop() -> None:
        try:
            result.put(server.ready())
        except ts.TritonError as exc:
            result.put(exc)

    def infer_on_loop() -> None:
        try:
            server.model("simple").infer(inputs={"INPUT0": SIMPLE_IN, "INPUT1": SIMPLE_IN})
            result.put(True)
        except ts.TritonError as exc:
            result.put(exc)

    loop.soon(on_loop)
    assert isinstance(result.get(timeout=WAIT_S), ts.UnsupportedError)
    loop.soon(infer_on_loop)
    assert isinstance(result.get(timeout=WAIT_S), ts.UnsupportedError)
    assert server.ready()  # the loop goes on


def test_callers_loop_closed_while_waiting(server: ts.Server) -> None:
    """A caller's loop that closes while a response is on its way: the server goes on."""

    async def leave_early() -> None:
        iterator = server.model("cancellable").async_infer(inputs={"IN": np.array([0], np.int32)})
        await iterator.__anext__()
        with pytest.raises(TimeoutError):  # a wait cut short: its waiter is dropped
            await asyncio.wait_for(_forever(iterator), 0.05)
        iterator.cancel()

    async def _forever(iterator: ts.AsyncResponseIterator) -> None:
        async for _ in iterator:
            pass

    asyncio.run(leave_early())
    assert _simple(server)["OUTPUT0"].shape == (1, 16)


# -- Tensor --------------------------------------------------------------------------------------
def test_tensor_dlpack_round_trip_without_copy() -> None:
    owner = np.random.rand(3, 5).astype(np.float32)
    tensor = ts.Tensor.from_dlpack(owner)
    assert tensor.data_type is ts.DataType.FP32 and list(tensor.shape) == [3, 5]
    assert tensor.data_ptr == owner.ctypes.data and tensor.size == owner.nbytes
    assert tensor.memory_type is ts.MemoryType.CPU
    assert tensor.__dlpack_device__() == (ts.DLDeviceType.kDLCPU, 0)
    array = np.from_dlpack(tensor)
    assert array.ctypes.data == owner.ctypes.data
    np.testing.assert_array_equal(array, owner)
    tensor.shape = [15]
    assert np.from_dlpack(tensor).shape == (15,)


def test_tensor_memory_outlives_its_owner_and_tensor() -> None:
    owner = np.arange(1 << 16, dtype=np.int64)
    address = owner.ctypes.data
    tensor = ts.Tensor.from_dlpack(owner)
    assert sys.getrefcount(owner) - 1 == 2  # the caller's and the tensor's
    del owner
    array = np.from_dlpack(tensor)
    del tensor
    gc.collect()
    assert array.ctypes.data == address
    assert int(array[-1]) == (1 << 16) - 1


def test_response_tensor_memory_outlives_the_response(server: ts.Server) -> None:
    (response,) = list(
        server.model("simple").infer(inputs={"INPUT0": SIMPLE_IN, "INPUT1": SIMPLE_IN})
    )
    tensor = response.outputs["OUTPUT0"]
    del response
    gc.collect()
    array = np.from_dlpack(tensor)
    del tensor
    gc.collect()
    np.testing.assert_array_equal(array, SIMPLE_IN * 2)


def test_tensor_conversions() -> None:
    assert ts.Tensor._from_object(np.float16(1.5)).data_type is ts.DataType.FP16
    assert ts.Tensor._from_object([[True, False]]).data_type is ts.DataType.BOOL
    with pytest.raises(ts.InvalidArgumentError):
        ts.Tensor.from_bytes_array(np.zeros(2, np.int32))
    with pytest.raises(ts.InvalidArgumentError):
        ts.Tensor._from_object({"a": 1})
    with pytest.raises(ts.InvalidArgumentError):
        ts.Tensor.from_dlpack(np.zeros((4, 4), np.float32)[:, 1])  # not contiguous
    tensor = ts.Tensor.from_dlpack(np.zeros(2, np.float32))
    assert tensor.to_device("cpu") is tensor
    with pytest.raises(ts.UnsupportedError):
        tensor.to_device("gpu:0")


def test_python_models_load_in_a_server_started_after_another_stopped(repo: Path) -> None:
    """Each in-process server runs on a loop of its own, and its Python stubs are forked from
    a zygote tied to that loop: one left by a stopped server (its loop closed) is put away
    and a new one serves the next server's models (it failed with 'Event loop is closed')."""
    for _ in range(4):
        server = ts.Server(
            model_repository=str(repo),
            model_control_mode=ts.ModelControlMode.EXPLICIT,
            startup_models=["square_int32"],
        ).start(wait_until_ready=True)
        try:
            assert server.model("square_int32").ready()
        finally:
            server.stop()
