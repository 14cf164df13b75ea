"""The example sequence models against the real server, driven as Triton's official client
examples drive them: the same calls, the same values, the same expected answers.

* ``simple_http_sequence_sync_infer_client.py`` / ``simple_grpc_sequence_sync_infer_client.py``:
  three sequences one after the other with unary ``infer`` (HTTP, gRPC);
* ``simple_grpc_sequence_stream_infer_client.py``: the three sequences queued back to back on
  one gRPC stream (``async_stream_infer``), responses matched by request id ``<id>_<step>``;
* ``simple_grpc_aio_sequence_stream_infer_client.py``: the same with ``tritonclient.grpc.aio``
  ``stream_infer``;
* the C++ examples (``simple_*_sequence_*_client.cc``): the three sequences interleaved step by
  step, IDs 1 and 2 and the string "SEQ-3" (or "3").

Without ``-d`` the examples use ``simple_sequence`` for uint64 and string IDs; with ``-d``
``simple_dyna_sequence`` (uint64 IDs) and ``simple_string_dyna_sequence`` (string IDs); ``-o``
offsets the IDs. Then ``running_sum_onnx`` / ``running_sum_onnx_direct``: implicit state kept
by the server across steps, per sequence, reset at START.
"""

from __future__ import annotations

import asyncio
import itertools
import queue
import threading
import time
import uuid
from collections.abc import Iterator
from functools import partial
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support import clients
from testkit.server_process import ServerProcess

VALUES = [11, 7, 5, 3, 2, 0, 1]  # the examples' values
WAIT_S = 60.0  # upper bound of any single wait for an answer
SEQUENCE_MODELS = ["simple_sequence", "simple_dyna_sequence", "simple_string_dyna_sequence"]
STATE_MODELS = ["running_sum_onnx", "running_sum_onnx_direct"]
DIRECT_START = np.array([100.0, 200.0, 300.0, 400.0], dtype=np.float32)  # its initial_state file


@pytest.fixture(scope="module")
def srv(server: ServerProcess) -> ServerProcess:
    """The shared server, once every example sequence model is READY."""
    c = httpclient.InferenceServerClient(server.http_url)
    deadline = time.monotonic() + WAIT_S
    for model in SEQUENCE_MODELS + STATE_MODELS:
        while not c.is_model_ready(model):
            assert time.monotonic() < deadline, f"{model} not ready:\n{server.log_text()}"
            time.sleep(0.1)
    c.close()
    return server


# ------------------------------------------------------------------- the examples' contract


def _names(dyna: bool) -> tuple[str, str]:
    """(model for the uint64 IDs, model for the string ID), as the examples pick them."""
    if dyna:
        return "simple_dyna_sequence", "simple_string_dyna_sequence"
    return "simple_sequence", "simple_sequence"


def _plan(dyna: bool, ids: tuple[int, int, str]) -> list[tuple[list[int], int | str, str]]:
    """The examples' three sequences: (values, sequence ID, model)."""
    int_model, string_model = _names(dyna)
    negated = [-v for v in VALUES]
    return [
        ([0, *VALUES], ids[0], int_model),
        ([100, *negated], ids[1], int_model),
        ([20, *negated], ids[2], string_model),
    ]


def _expected(dyna: bool, ids: tuple[int, int, str]) -> list[list[int]]:
    """What the examples check, per sequence: without ``-d`` READY * (INPUT + START); with it
    the last step adds the ID, and the string sequence accumulates (20, 9, 2, ...)."""
    first = [1, *VALUES]
    second = [101, *(-v for v in VALUES)]
    if not dyna:
        return [first, second, [21, *(-v for v in VALUES)]]
    third = list(itertools.accumulate([20, *(-v for v in VALUES)]))
    first[-1] += ids[0]
    second[-1] += ids[1]
    third[-1] += int(ids[2])
    return [first, second, third]


def _python_ids(dyna: bool, offset: int, string_offset: int) -> tuple[int, int, str]:
    """The Python examples' IDs: 1000 + 2 * offset, 1001 + 2 * offset, and "1002" (plus
    ``string_offset``: the stream examples add ``-o``, the sync ones do not) or a UUID4."""
    string_id = str(1002 + string_offset) if dyna else str(uuid.uuid4())
    return 1000 + offset * 2, 1001 + offset * 2, string_id


def _int32_input(module: Any, value: int) -> Any:
    data = np.full(shape=[1, 1], fill_value=value, dtype=np.int32)
    inp = module.InferInput("INPUT", data.shape, "INT32")
    inp.set_data_from_numpy(data)
    return inp


def _output(result: Any) -> int:
    output = result.as_numpy("OUTPUT")
    assert output.dtype == np.int32 and output.shape == (1, 1), output
    return int(output[0][0])


def _infer_step(c: Any, module: Any, model: str, value: int, seq: int | str, step: tuple) -> int:
    """One ``infer`` of a sequence; ``step`` = (count, number of values)."""
    count, total = step
    result = c.infer(
        model_name=model,
        inputs=[_int32_input(module, value)],
        outputs=[module.InferRequestedOutput("OUTPUT")],
        sequence_id=seq,
        sequence_start=(count == 1),
        sequence_end=(count == total),
    )
    return _output(result)


def _sync_send(c: Any, module: Any, values: list[int], seq: int | str, model: str) -> list[int]:
    """The sync examples' ``sync_send``: one sequence, one ``infer`` per value."""
    return [
        _infer_step(c, module, model, value, seq, (count, len(values)))
        for count, value in enumerate(values, 1)
    ]


@pytest.mark.parametrize("dyna", [False, True], ids=["simple", "dyna"])
@pytest.mark.parametrize("offset", [0, 3])
def test_sync_examples(srv: ServerProcess, protocol: str, dyna: bool, offset: int) -> None:
    """simple_{http,grpc}_sequence_sync_infer_client.py [-d] [-o offset]."""
    ids = _python_ids(dyna, offset, 0)
    c = clients.client(protocol, srv.url(protocol))
    module = clients.module(protocol)
    try:
        got = [_sync_send(c, module, *plan) for plan in _plan(dyna, ids)]
    finally:
        c.close()
    assert got == _expected(dyna, ids)


@pytest.mark.parametrize("dyna", [False, True], ids=["simple", "dyna"])
def test_cpp_examples_interleaved(srv: ServerProcess, protocol: str, dyna: bool) -> None:
    """simple_{http,grpc}_sequence_sync_infer_client.cc: the three sequences interleaved step
    by step, IDs 1 + 2 * offset, 2 + 2 * offset and "SEQ-3" (or "3" + 2 * offset with -d)."""
    offset = 7
    ids = (1 + offset * 2, 2 + offset * 2, str(3 + offset * 2) if dyna else "SEQ-3")
    plans = _plan(dyna, ids)
    c = clients.client(protocol, srv.url(protocol))
    module = clients.module(protocol)
    got: list[list[int]] = [[], [], []]
    try:
        for count in range(1, len(VALUES) + 2):
            for i, (values, seq, model) in enumerate(plans):
                step = (count, len(values))
                got[i].append(_infer_step(c, module, model, values[count - 1], seq, step))
    finally:
        c.close()
    assert got == _expected(dyna, ids)


def _stream_requests(dyna: bool, ids: tuple[int, int, str]) -> Iterator[dict[str, Any]]:
    """The stream examples' requests, in their order (``async_stream_send`` per sequence)."""
    for values, seq, model in _plan(dyna, ids):
        for count, value in enumerate(values, 1):
            yield {
                "model_name": model,
                "inputs": [_int32_input(grpcclient, value)],
                "outputs": [grpcclient.InferRequestedOutput("OUTPUT")],
                "request_id": f"{seq}_{count}",
                "sequence_id": seq,
                "sequence_start": count == 1,
                "sequence_end": count == len(values),
            }


def _route(ids: tuple[int, int, str], answers: list[tuple[str, int]]) -> list[list[int]]:
    """Responses (request id, OUTPUT) per sequence, in arrival order, as the examples do."""
    got: list[list[int]] = [[], [], []]
    for request_id, value in answers:
        got[[str(i) for i in ids].index(request_id.split("_")[0])].append(value)
    return got


@pytest.mark.parametrize("dyna", [False, True], ids=["simple", "dyna"])
@pytest.mark.parametrize("offset", [0, 5])
def test_grpc_stream_example(srv: ServerProcess, dyna: bool, offset: int) -> None:
    """simple_grpc_sequence_stream_infer_client.py [-d] [-o offset]."""
    ids = _python_ids(dyna, offset, offset)
    done: queue.Queue[Any] = queue.Queue()
    with grpcclient.InferenceServerClient(srv.grpc_url) as c:
        c.start_stream(callback=partial(lambda q, result, error: q.put(error or result), done))
        for request in _stream_requests(dyna, ids):
            c.async_stream_infer(**request)
        items = [done.get(timeout=WAIT_S) for _ in range(3 * (len(VALUES) + 1))]
        c.stop_stream()
    errors = [item.message() for item in items if isinstance(item, InferenceServerException)]
    assert not errors, errors
    answers = [(item.get_response().id, _output(item)) for item in items]
    assert _route(ids, answers) == _expected(dyna, ids)


@pytest.mark.parametrize("dyna", [False, True], ids=["simple", "dyna"])
def test_grpc_aio_stream_example(srv: ServerProcess, dyna: bool) -> None:
    """simple_grpc_aio_sequence_stream_infer_client.py [-d] -o 11."""
    ids = _python_ids(dyna, 11, 11)

    async def run() -> list[tuple[str, int]]:
        async def requests() -> Any:
            for request in _stream_requests(dyna, ids):
                yield request

        answers = []
        async with grpcaio.InferenceServerClient(srv.grpc_url) as c:
            stream = c.stream_infer(inputs_iterator=requests())
            async for result, error in stream:  # until the server ends the call, as the example
                assert error is None, error.message()
                answers.append((result.get_response().id, _output(result)))
        return answers

    answers = asyncio.run(asyncio.wait_for(run(), WAIT_S))
    assert _route(ids, answers) == _expected(dyna, ids)


def _expect_error(c: Any, model: str, seq: int | str, start: bool = True) -> str:
    with pytest.raises(InferenceServerException) as info:
        c.infer(model, [_int32_input(grpcclient, 1)], sequence_id=seq, sequence_start=start)
    return info.value.message()


def test_string_model_needs_an_integer_id(srv: ServerProcess) -> None:
    """The dyna_sequence backend's rule (and message): the string ID must read as an integer,
    so "SEQ-3" (which simple_sequence accepts) fails on simple_string_dyna_sequence."""
    with grpcclient.InferenceServerClient(srv.grpc_url) as c:
        message = _expect_error(c, "simple_string_dyna_sequence", "SEQ-3")
        assert message == (
            "dyna sequence backend expects correlation ID to be decodable into an integer"
        )
        assert _infer_step(c, grpcclient, "simple_sequence", 4, "SEQ-3", (1, 1)) == 5


def test_id_type_must_match_corrid(srv: ServerProcess) -> None:
    """A model with a CORRID control takes only IDs of its type (design: Triton's message)."""
    with grpcclient.InferenceServerClient(srv.grpc_url) as c:
        message = _expect_error(c, "simple_string_dyna_sequence", 77)
        assert message == (
            "sequence batching control 'CORRID' data-type is 'UINT64', but model "
            "'simple_string_dyna_sequence' expects 'BYTES'"
        )
        message = _expect_error(c, "simple_dyna_sequence", "77")
        assert message == (
            "sequence batching control 'CORRID' data-type is 'BYTES', but model "
            "'simple_dyna_sequence' expects 'UINT64'"
        )


@pytest.mark.parametrize("model", SEQUENCE_MODELS)
def test_sequence_models_need_an_id(srv: ServerProcess, protocol: str, model: str) -> None:
    c = clients.client(protocol, srv.url(protocol))
    module = clients.module(protocol)
    try:
        with pytest.raises(InferenceServerException) as info:
            c.infer(model, [_int32_input(module, 1)])
    finally:
        c.close()
    assert info.value.message() == (
        f"inference request to model '{model}' must specify a non-zero or non-empty correlation ID"
    )


# ------------------------------------------------------------------- implicit state (ONNX)


def _fp32_input(module: Any, row: np.ndarray) -> Any:
    inp = module.InferInput("INPUT", [1, 4], "FP32")
    inp.set_data_from_numpy(row.reshape(1, 4).astype(np.float32))
    return inp


def _sum_step(c: Any, module: Any, model: str, row: np.ndarray, **sequence: Any) -> np.ndarray:
    """One step of a running-sum sequence (no outputs named: the server returns every
    configured output, and OUTPUT_STATE is not one)."""
    result = c.infer(model, [_fp32_input(module, row)], **sequence)
    assert result.as_numpy("OUTPUT_STATE") is None  # state stays in the server
    output = result.as_numpy("OUTPUT")
    assert output.dtype == np.float32 and output.shape == (1, 4)
    return output[0]


def _steps(seed: int, count: int) -> np.ndarray:
    """Small integers as FP32, so every running sum is exact."""
    return np.random.default_rng(seed).integers(-50, 50, size=(count, 4)).astype(np.float32)


@pytest.mark.parametrize("model", STATE_MODELS)
def test_running_sum_interleaved(srv: ServerProcess, protocol: str, model: str) -> None:
    """Two sequences interleaved step by step: each sees only its own running sum; the state
    starts from the initial_state (zeros, or the data file) and is never returned."""
    start = DIRECT_START if model == "running_sum_onnx_direct" else np.zeros(4, np.float32)
    ids = (4001, "running-sum-b") if protocol == "grpc" else (4101, "running-sum-b-http")
    a, b = _steps(1, 6), _steps(2, 6)
    c = clients.client(protocol, srv.url(protocol))
    module = clients.module(protocol)
    try:
        for i in range(6):
            for seq, steps in zip(ids, (a, b), strict=True):
                flags = {"sequence_start": i == 0, "sequence_end": i == 5}
                got = _sum_step(c, module, model, steps[i], sequence_id=seq, **flags)
                np.testing.assert_array_equal(got, start + steps[: i + 1].sum(axis=0))
    finally:
        c.close()


@pytest.mark.parametrize("model", STATE_MODELS)
def test_running_sum_reset_at_start(srv: ServerProcess, protocol: str, model: str) -> None:
    """START resets the state: a new sequence under an ended ID, and START again on an ID in
    progress (the old sequence ends early, as in Triton), both begin from the initial state."""
    start = DIRECT_START if model == "running_sum_onnx_direct" else np.zeros(4, np.float32)
    seq = 4200 if protocol == "http" else 4201
    one = np.ones(4, np.float32)
    c = clients.client(protocol, srv.url(protocol))
    module = clients.module(protocol)
    try:
        step = partial(_sum_step, c, module, model, sequence_id=seq)
        np.testing.assert_array_equal(step(one, sequence_start=True), start + 1)
        np.testing.assert_array_equal(step(one), start + 2)
        np.testing.assert_array_equal(step(one, sequence_end=True), start + 3)
        np.testing.assert_array_equal(step(5 * one, sequence_start=True), start + 5)
        np.testing.assert_array_equal(step(one), start + 6)
        np.testing.assert_array_equal(step(2 * one, sequence_start=True), start + 2)
        np.testing.assert_array_equal(step(one, sequence_end=True), start + 3)
        with pytest.raises(InferenceServerException, match="must specify the START flag"):
            step(one)  # ended: the next request needs START
    finally:
        c.close()


def test_running_sum_many_sequences_on_a_stream(srv: ServerProcess) -> None:
    """Eight sequences' steps queued round-robin on one gRPC stream: the oldest strategy batches
    rows of different sequences, and each row still carries its own sequence's state."""
    model, steps = "running_sum_onnx", {4300 + k: _steps(10 + k, 5) for k in range(8)}
    done: queue.Queue[Any] = queue.Queue()
    with grpcclient.InferenceServerClient(srv.grpc_url) as c:
        c.start_stream(callback=partial(lambda q, result, error: q.put(error or result), done))
        for i in range(5):
            for seq, rows in steps.items():
                c.async_stream_infer(
                    model,
                    [_fp32_input(grpcclient, rows[i])],
                    request_id=f"{seq}_{i}",
                    sequence_id=seq,
                    sequence_start=i == 0,
                    sequence_end=i == 4,
                )
        items = [done.get(timeout=WAIT_S) for _ in range(5 * len(steps))]
        c.stop_stream()
    for item in items:
        assert not isinstance(item, InferenceServerException), item.message()
        seq, i = (int(part) for part in item.get_response().id.split("_"))
        want = steps[seq][: i + 1].sum(axis=0)
        np.testing.assert_array_equal(item.as_numpy("OUTPUT")[0], want)


@pytest.mark.parametrize("model", STATE_MODELS)
def test_running_sum_concurrent_aio(srv: ServerProcess, model: str) -> None:
    """Six sequences stepped concurrently by tritonclient.grpc.aio (unary calls)."""
    start = DIRECT_START if model == "running_sum_onnx_direct" else np.zeros(4, np.float32)
    base = 4400 if model == "running_sum_onnx" else 4500

    async def sequence(c: Any, seq: int, rows: np.ndarray) -> None:
        for i, row in enumerate(rows):
            result = await c.infer(
                model,
                [_fp32_input(grpcaio, row)],
                sequence_id=seq,
                sequence_start=i == 0,
                sequence_end=i == len(rows) - 1,
            )
            np.testing.assert_array_equal(
                result.as_numpy("OUTPUT")[0], start + rows[: i + 1].sum(axis=0)
            )

    async def run() -> None:
        async with grpcaio.InferenceServerClient(srv.grpc_url) as c:
            await asyncio.gather(*(sequence(c, base + k, _steps(20 + k, 6)) for k in range(6)))

    asyncio.run(asyncio.wait_for(run(), WAIT_S))


def test_running_sum_threads_over_http(srv: ServerProcess) -> None:
    """Four HTTP clients in threads, each its own sequence, against the direct model: every
    sequence keeps its slot's state while the others' requests (or fillers) share batches."""
    model, failures = "running_sum_onnx_direct", []

    def sequence(seq: int, rows: np.ndarray) -> None:
        c = httpclient.InferenceServerClient(srv.http_url)
        try:
            for i, row in enumerate(rows):
                flags = {"sequence_start": i == 0, "sequence_end": i == len(rows) - 1}
                got = _sum_step(c, httpclient, model, row, sequence_id=seq, **flags)
                np.testing.assert_array_equal(got, DIRECT_START + rows[: i + 1].sum(axis=0))
        except Exception as exc:  # noqa: BLE001 - reported by the main thread
            failures.append(exc)
        finally:
            c.close()

    threads = [
        threading.Thread(target=sequence, args=(4600 + k, _steps(30 + k, 8))) for k in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT_S)
    assert not any(thread.is_alive() for thread in threads)
    assert not failures, failures
