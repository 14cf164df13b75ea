"""gRPC ModelStreamInfer, decoupled models, HTTP generate / generate_stream and the asynchronous
tritonclient APIs at load, against the real server.

The rules checked here are Triton's (reference/protocol.md §3.9, §4.3, §1.3):

* non-decoupled models answer once per request, in the order the requests were sent on the
  stream (even when later ones finish first), each response echoing the request ``id``;
* a failing request answers in-stream (``error_message`` + ``id``) and the stream stays open,
  unless the stream was opened with the ``triton_grpc_error: true`` header, in which case the
  first error ends the RPC with a gRPC status;
* every streamed response carries ``triton_final_response``; a flag-only completion of a
  decoupled model produces an empty response only when the request asked for
  ``triton_enable_empty_final_response``;
* unary ``ModelInfer`` / HTTP ``/infer`` refuse decoupled models (UNIMPLEMENTED / 501);
* ``generate`` / ``generate_stream`` map top-level (and ``parameters``) keys that name a model
  input to tensors, any other key to a request parameter, and stream server-sent events.

Expected values are always computed with numpy from the inputs that were sent. Every wait is
bounded (``WAIT_S``), so a server that drops a response fails a test instead of hanging it.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import queue
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
import tritonclient.http as httpclient
import tritonclient.http.aio as httpaio
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from tests.support.models import build_test_repository
from testkit.server_process import ServerProcess

STREAM_TEST_MODELS = [
    "decoupled_raises",
    "decoupled_error_response",
    "slow_identity_int32",
    "text_echo",
    "text_stream",
    "identity_int32",
    "raises",
    "slow",
]
WAIT_S = 60.0  # upper bound of any single wait for an answer
QUIET_S = 0.3  # how long "nothing more arrives" is watched

DECOUPLED_GRPC = "ModelInfer RPC doesn't support models with decoupled transaction policy"
DECOUPLED_HTTP = "HTTP end point doesn't support models with decoupled transaction policy"
UNKNOWN_MODEL = "Request for unknown model: 'nope' is not found"
BAD_SHAPE = "unexpected shape for input 'INPUT0' for model 'simple'. Expected [-1,16], got [1,8]"
FINAL = "triton_final_response"


# ---------------------------------------------------------------------------------------------
# The server: the examples (simple, repeat_int32, square_int32, ...) plus this module's models.
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def srv(example_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = build_test_repository(tmp_path_factory.mktemp("streaming") / "repo", STREAM_TEST_MODELS)
    proc = ServerProcess([example_repo, repo])
    try:
        proc.wait_live(90.0, endpoint="ready")
        yield proc
    finally:
        proc.stop()


# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------
class Responses:
    """A ``start_stream`` callback: (result, error) pairs in arrival order."""

    def __init__(self) -> None:
        self._items: queue.Queue[tuple[Any, InferenceServerException | None]] = queue.Queue()

    def __call__(self, result: Any, error: InferenceServerException | None) -> None:
        self._items.put((result, error))

    def get(self, timeout: float = WAIT_S) -> tuple[Any, InferenceServerException | None]:
        try:
            return self._items.get(timeout=timeout)
        except queue.Empty:
            pytest.fail(f"no stream response within {timeout}s")

    def take(self, n: int, allow_errors: bool = False) -> list[tuple[Any, Any]]:
        """The next ``n`` items; an error fails at once unless ``allow_errors``."""
        deadline = time.monotonic() + WAIT_S
        items = []
        for _ in range(n):
            result, error = self.get(max(deadline - time.monotonic(), 0.01))
            if error is not None and not allow_errors:
                pytest.fail(f"unexpected error on the stream after {len(items)} answers: {error}")
            items.append((result, error))
        return items

    def results(self, n: int) -> list[Any]:
        return [result for result, _ in self.take(n)]

    def error(self) -> InferenceServerException:
        result, error = self.get()
        assert error is not None, f"expected an error, got a result: {result.get_response()}"
        return error

    def assert_quiet(self, seconds: float = QUIET_S) -> None:
        try:
            result, error = self._items.get(timeout=seconds)
        except queue.Empty:
            return
        got = error if error is not None else result.get_response()
        pytest.fail(f"unexpected extra stream response: {got}")

    def until_final(self, ids: set[str]) -> dict[str, list[Any]]:
        """Collect responses until every request in ``ids`` got its final response (requests
        sent with ``enable_empty_final_response``); {id: [responses in arrival order]}."""
        by_id: dict[str, list[Any]] = defaultdict(list)
        pending = set(ids)
        deadline = time.monotonic() + WAIT_S
        while pending:
            result, error = self.get(max(deadline - time.monotonic(), 0.01))
            if error is not None:
                pytest.fail(f"unexpected error on the stream: {error}")
            response = result.get_response()
            assert response.id in ids, f"response for an unknown request id {response.id!r}"
            assert response.id in pending, f"response after the final one for {response.id!r}"
            by_id[response.id].append(result)
            if is_final(result):
                pending.discard(response.id)
        return by_id


@contextlib.contextmanager
def stream(srv: ServerProcess, **kwargs: Any) -> Iterator[tuple[Any, Responses]]:
    """A sync gRPC client with a started stream; cancelled and closed on exit."""
    client = grpcclient.InferenceServerClient(srv.grpc_url)
    responses = Responses()
    client.start_stream(responses, **kwargs)
    try:
        yield client, responses
    finally:
        client.stop_stream(cancel_requests=True)
        client.close()


def tensor(mod: Any, name: str, array: np.ndarray, datatype: str) -> Any:
    inp = mod.InferInput(name, list(array.shape), datatype)
    inp.set_data_from_numpy(array)
    return inp


def simple_arrays(i: int) -> tuple[np.ndarray, np.ndarray]:
    a = (np.arange(16, dtype=np.int32) * (i % 13 + 1) + i).reshape(1, 16)
    b = np.full((1, 16), i % 11 - 5, dtype=np.int32)
    return a, b


def simple_inputs(mod: Any, a: np.ndarray, b: np.ndarray) -> list[Any]:
    if mod is httpclient or mod is httpaio:
        inputs = []
        for name, array in (("INPUT0", a), ("INPUT1", b)):
            inp = mod.InferInput(name, list(array.shape), "INT32")
            inp.set_data_from_numpy(array, binary_data=True)
            inputs.append(inp)
        return inputs
    return [tensor(mod, "INPUT0", a, "INT32"), tensor(mod, "INPUT1", b, "INT32")]


def check_simple(result: Any, a: np.ndarray, b: np.ndarray) -> None:
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def int32_inputs(values: np.ndarray) -> list[Any]:
    return [tensor(grpcclient, "INPUT0", np.asarray(values, dtype=np.int32), "INT32")]


def square_inputs(n: int) -> list[Any]:
    return [tensor(grpcclient, "IN", np.array([n], dtype=np.int32), "INT32")]


def repeat_inputs(mod: Any, values: list[int], delays: list[int], wait: int) -> list[Any]:
    return [
        tensor(mod, "IN", np.array(values, dtype=np.int32), "INT32"),
        tensor(mod, "DELAY", np.array(delays, dtype=np.uint32), "UINT32"),
        tensor(mod, "WAIT", np.array([wait], dtype=np.uint32), "UINT32"),
    ]


def final_param(result: Any) -> bool | None:
    params = result.get_response().parameters
    return params[FINAL].bool_param if FINAL in params else None


def is_final(result: Any) -> bool:
    return final_param(result) is True


def send_simple(client: Any, i: int, request_id: str | None = None) -> tuple[np.ndarray, ...]:
    a, b = simple_arrays(i)
    client.async_stream_infer(
        "simple", simple_inputs(grpcclient, a, b), request_id=request_id or str(i)
    )
    return a, b


def server_status(pid: int) -> dict[str, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "Threads"):
            fields[key] = int(value.split()[0])
    return fields


# ---------------------------------------------------------------------------------------------
# Ordering and concurrency on streams
# ---------------------------------------------------------------------------------------------
def test_stream_order_1000_requests(srv: ServerProcess) -> None:
    n = 1000
    with stream(srv) as (client, responses):
        sent = [send_simple(client, i) for i in range(n)]
        results = responses.results(n)
        responses.assert_quiet(0.1)
    for i, (result, (a, b)) in enumerate(zip(results, sent, strict=True)):
        assert result.get_response().id == str(i), "responses must come back in send order"
        assert result.get_response().model_name == "simple"
        check_simple(result, a, b)


def test_stream_order_when_later_requests_finish_first(srv: ServerProcess) -> None:
    # slow_identity_int32 has 4 instances and sleeps INPUT0[0] ms: the fast requests sent after
    # a slow one finish first inside the server, yet must be written after it.
    delays = [800, 5, 5, 5, 5, 400, 5, 5, 400, 5, 1, 1]
    with stream(srv) as (client, responses):
        for i, delay in enumerate(delays):
            client.async_stream_infer(
                "slow_identity_int32", int32_inputs([delay, i, -i]), request_id=f"r{i}"
            )
        results = responses.results(len(delays))
    assert [r.get_response().id for r in results] == [f"r{i}" for i in range(len(delays))]
    for i, (result, delay) in enumerate(zip(results, delays, strict=True)):
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.array([delay, i, -i]))


def test_many_streams_at_once(srv: ServerProcess) -> None:
    streams, per_stream = 8, 200
    failures: list[str] = []
    barrier = threading.Barrier(streams)

    def one_stream(k: int) -> None:
        try:
            with stream(srv) as (client, responses):
                barrier.wait(timeout=WAIT_S)
                sent = {}
                for i in range(per_stream):
                    rid = f"s{k}-{i}"
                    sent[rid] = send_simple(client, k * 1000 + i, rid)
                for i, result in enumerate(responses.results(per_stream)):
                    rid = result.get_response().id
                    if rid != f"s{k}-{i}":
                        failures.append(f"stream {k}: answer {i} has id {rid!r}")
                        return
                    check_simple(result, *sent[rid])
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(f"stream {k}: {exc!r}")

    threads = [threading.Thread(target=one_stream, args=(k,)) for k in range(streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT_S * 2)
    assert not failures, failures[:5]


def test_aio_stream_infer_order(srv: ServerProcess) -> None:
    n = 500

    async def main() -> None:
        async with grpcaio.InferenceServerClient(srv.grpc_url) as client:
            sent = [simple_arrays(i) for i in range(n)]

            async def requests() -> Any:
                for i, (a, b) in enumerate(sent):
                    yield {
                        "model_name": "simple",
                        "inputs": simple_inputs(grpcaio, a, b),
                        "request_id": f"aio{i}",
                    }

            got = 0
            iterator = client.stream_infer(requests(), stream_timeout=WAIT_S)
            async for result, error in iterator:
                assert error is None, str(error)
                assert result.get_response().id == f"aio{got}"
                check_simple(result, *sent[got])
                got += 1
            assert got == n

    asyncio.run(asyncio.wait_for(main(), WAIT_S))


# ---------------------------------------------------------------------------------------------
# Errors inside a stream
# ---------------------------------------------------------------------------------------------
def _bad_shape(client: Any) -> None:
    a = np.zeros((1, 8), dtype=np.int32)
    client.async_stream_infer("simple", simple_inputs(grpcclient, a, a), request_id="bad")


ERROR_CASES = {
    "bad_shape": (_bad_shape, BAD_SHAPE),
    "unknown_model": (
        lambda c: c.async_stream_infer("nope", int32_inputs([1]), request_id="bad"),
        UNKNOWN_MODEL,
    ),
    "raises": (
        lambda c: c.async_stream_infer(
            "raises",
            [tensor(grpcclient, "INPUT0", np.ones(2, np.float32), "FP32")],
            request_id="bad",
        ),
        "boom from model",
    ),
    "decoupled_raises": (
        lambda c: c.async_stream_infer("decoupled_raises", int32_inputs([1]), request_id="bad"),
        "decoupled boom",
    ),
    "decoupled_error_response": (
        lambda c: c.async_stream_infer(
            "decoupled_error_response", int32_inputs([1]), request_id="bad"
        ),
        "stream bad",
    ),
}


@pytest.mark.parametrize("case", list(ERROR_CASES))
def test_in_stream_error_then_good_request(srv: ServerProcess, case: str) -> None:
    send_bad, phrase = ERROR_CASES[case]
    with stream(srv) as (client, responses):
        for round_ in range(2):  # the stream survives the error, twice
            a, b = send_simple(client, round_, "good-before")
            check_simple(responses.results(1)[0], a, b)
            send_bad(client)
            error = responses.error()
            assert phrase in error.message(), error.message()
            # An in-stream error is a response with error_message, not an RPC status.
            assert error.status() is None, f"the stream ended: {error.status()} {error}"
            a, b = send_simple(client, round_ + 10, "good-after")
            result = responses.results(1)[0]
            assert result.get_response().id == "good-after"
            check_simple(result, a, b)
        responses.assert_quiet()


def _raw_request(model: str, rid: str, **arrays: tuple[np.ndarray, str]) -> Any:
    request = service_pb2.ModelInferRequest(model_name=model, id=rid)
    for name, (array, datatype) in arrays.items():
        request.inputs.add(name=name, datatype=datatype, shape=list(array.shape))
        request.raw_input_contents.append(array.tobytes())
    return request


def test_in_stream_errors_carry_request_id_in_order(srv: ServerProcess) -> None:
    """Raw ModelStreamInfer: error responses keep their request id and their place in the
    send order (non-decoupled models); the client's half-close ends the RPC with OK after the
    last answer."""
    a, b = simple_arrays(3)
    small = np.zeros((1, 8), dtype=np.int32)
    requests = [
        _raw_request("simple", "g1", INPUT0=(a, "INT32"), INPUT1=(b, "INT32")),
        _raw_request("nope", "e-unknown", INPUT0=(a, "INT32")),
        _raw_request("simple", "e-shape", INPUT0=(small, "INT32"), INPUT1=(small, "INT32")),
        _raw_request("raises", "e-raises", INPUT0=(np.ones(3, np.float32), "FP32")),
        _raw_request("simple", "g2", INPUT0=(b, "INT32"), INPUT1=(a, "INT32")),
    ]
    with grpc.insecure_channel(srv.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        answers = list(stub.ModelStreamInfer(iter(requests), timeout=WAIT_S))
    ids = [r.infer_response.id for r in answers]
    assert ids == ["g1", "e-unknown", "e-shape", "e-raises", "g2"]
    errors = {r.infer_response.id: r.error_message for r in answers if r.error_message}
    assert set(errors) == {"e-unknown", "e-shape", "e-raises"}
    assert UNKNOWN_MODEL in errors["e-unknown"]
    assert BAD_SHAPE in errors["e-shape"]
    assert "boom from model" in errors["e-raises"]
    first, last = answers[0].infer_response, answers[-1].infer_response
    assert first.parameters[FINAL].bool_param and last.parameters[FINAL].bool_param
    np.testing.assert_array_equal(
        np.frombuffer(first.raw_output_contents[0], np.int32).reshape(1, 16), a + b
    )
    np.testing.assert_array_equal(
        np.frombuffer(last.raw_output_contents[1], np.int32).reshape(1, 16), b - a
    )


GRPC_ERROR_CASES = {
    "unknown_model": "StatusCode.NOT_FOUND",
    "bad_shape": "StatusCode.INVALID_ARGUMENT",
    "raises": "StatusCode.INTERNAL",
}


@pytest.mark.parametrize("case", list(GRPC_ERROR_CASES))
def test_triton_grpc_error_header_ends_stream(srv: ServerProcess, case: str) -> None:
    send_bad, phrase = ERROR_CASES[case]
    client = grpcclient.InferenceServerClient(srv.grpc_url)
    try:
        responses = Responses()
        client.start_stream(responses, headers={"triton_grpc_error": "true"})
        a, b = send_simple(client, 1, "ok")
        check_simple(responses.results(1)[0], a, b)
        send_bad(client)
        error = responses.error()
        assert error.status() == GRPC_ERROR_CASES[case], f"{error.status()}: {error}"
        assert phrase in error.message(), error.message()
        # The RPC is over: the client refuses further requests on it...
        with pytest.raises(InferenceServerException, match="no longer in valid state"):
            send_simple(client, 2, "after")
        responses.assert_quiet()
        client.stop_stream()
        # ... and a new stream on the same client works.
        responses = Responses()
        client.start_stream(responses)
        a, b = send_simple(client, 3, "new")
        result = responses.results(1)[0]
        assert result.get_response().id == "new"
        check_simple(result, a, b)
    finally:
        client.stop_stream(cancel_requests=True)
        client.close()


# ---------------------------------------------------------------------------------------------
# triton_final_response / triton_enable_empty_final_response
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("empty_final", [False, True])
def test_final_flag_on_non_decoupled_responses(srv: ServerProcess, empty_final: bool) -> None:
    n = 20
    with stream(srv) as (client, responses):
        sent = []
        for i in range(n):
            a, b = simple_arrays(i)
            client.async_stream_infer(
                "simple",
                simple_inputs(grpcclient, a, b),
                request_id=str(i),
                enable_empty_final_response=empty_final,
            )
            sent.append((a, b))
        results = responses.results(n)
        # The response itself carries the final flag: no extra empty response, even when asked.
        responses.assert_quiet()
    for i, result in enumerate(results):
        assert final_param(result) is True, result.get_response()
        assert result.get_response().id == str(i)
        check_simple(result, *sent[i])


def test_decoupled_final_flags(srv: ServerProcess) -> None:
    with stream(srv) as (client, responses):
        client.async_stream_infer(
            "square_int32", square_inputs(3), request_id="sq3", enable_empty_final_response=True
        )
        got = responses.until_final({"sq3"})["sq3"]
    assert len(got) == 4, [r.get_response() for r in got]
    for data in got[:3]:
        assert final_param(data) is False, data.get_response()
        np.testing.assert_array_equal(data.as_numpy("OUT"), np.array([3], np.int32))
    empty = got[3].get_response()
    assert final_param(got[3]) is True
    assert len(empty.outputs) == 0 and len(empty.raw_output_contents) == 0, empty
    assert (empty.id, empty.model_name, empty.model_version) == ("sq3", "square_int32", "1")


def test_decoupled_without_empty_final_sends_data_only(srv: ServerProcess) -> None:
    with stream(srv) as (client, responses):
        client.async_stream_infer("square_int32", square_inputs(3), request_id="plain")
        client.async_stream_infer("square_int32", square_inputs(0), request_id="zero")
        # A later request that does ask for the empty final marks the end of the others.
        client.async_stream_infer(
            "square_int32", square_inputs(1), request_id="marker", enable_empty_final_response=True
        )
        collected: list[Any] = []
        while True:
            result = responses.results(1)[0]
            collected.append(result)
            if result.get_response().id == "marker" and is_final(result):
                break
        responses.assert_quiet()
    plain = [r for r in collected if r.get_response().id == "plain"]
    assert not [r for r in collected if r.get_response().id == "zero"], "N=0 sent a response"
    assert len(plain) == 3, [r.get_response() for r in plain]
    for r in plain:
        assert final_param(r) is False
        np.testing.assert_array_equal(r.as_numpy("OUT"), np.array([3], np.int32))


def test_decoupled_error_then_empty_final(srv: ServerProcess) -> None:
    """An error response sent without the final flag, then a flag-only final: the error arrives
    in-stream with its id, then (when asked for) the empty final response."""
    with grpc.insecure_channel(srv.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        request = _raw_request(
            "decoupled_error_response", "de", INPUT0=(np.ones(1, np.int32), "INT32")
        )
        request.parameters["triton_enable_empty_final_response"].bool_param = True
        answers = list(stub.ModelStreamInfer(iter([request]), timeout=WAIT_S))
    assert len(answers) == 2, answers
    error, final = answers
    assert "stream bad" in error.error_message and error.infer_response.id == "de"
    assert not final.error_message and final.infer_response.id == "de"
    assert final.infer_response.parameters[FINAL].bool_param is True
    assert len(final.infer_response.outputs) == 0


# ---------------------------------------------------------------------------------------------
# Decoupled models
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [0, 1, 5])
def test_square_int32_sends_n_responses(srv: ServerProcess, n: int) -> None:
    with stream(srv) as (client, responses):
        client.async_stream_infer(
            "square_int32", square_inputs(n), request_id=f"sq{n}", enable_empty_final_response=True
        )
        got = responses.until_final({f"sq{n}"})[f"sq{n}"]
        responses.assert_quiet()
    data, final = got[:-1], got[-1]
    assert len(data) == n
    for r in data:
        assert r.get_response().id == f"sq{n}"
        np.testing.assert_array_equal(r.as_numpy("OUT"), np.array([n], np.int32))
    assert len(final.get_response().outputs) == 0


@pytest.mark.parametrize(
    ("values", "delays", "wait"),
    [([4, 2, 0, 1], [1, 2, 3, 4], 5), ([], [], 0), ([-7], [30], 100)],
    ids=["triton-example", "empty", "wait-longer-than-delays"],
)
def test_repeat_int32_contract(
    srv: ServerProcess, values: list[int], delays: list[int], wait: int
) -> None:
    with stream(srv) as (client, responses):
        client.async_stream_infer(
            "repeat_int32",
            repeat_inputs(grpcclient, values, delays, wait),
            request_id="rep",
            enable_empty_final_response=True,
        )
        got = responses.until_final({"rep"})["rep"]
    data = got[:-1]
    assert len(data) == len(values)
    for i, r in enumerate(data):
        out, idx = r.as_numpy("OUT"), r.as_numpy("IDX")
        assert out.dtype == np.int32 and idx.dtype == np.uint32
        np.testing.assert_array_equal(idx, np.array([i], np.uint32))
        np.testing.assert_array_equal(out, np.array([values[i]], np.int32))
        assert final_param(r) is False


def test_repeat_int32_mismatched_delay_is_an_error(srv: ServerProcess) -> None:
    with stream(srv) as (client, responses):
        client.async_stream_infer(
            "repeat_int32", repeat_inputs(grpcclient, [1, 2], [0], 0), request_id="mismatch"
        )
        error = responses.error()
        assert "expected IN and DELAY shape to match" in error.message(), error.message()
        assert error.status() is None
        a, b = send_simple(client, 9, "after")
        check_simple(responses.results(1)[0], a, b)


def test_decoupled_responses_interleave_matched_by_id(srv: ServerProcess) -> None:
    rng = np.random.default_rng(7)
    requests = {"long": ([10, 11, 12, 13, 14], [150] * 5)}
    for k in range(20):
        size = int(rng.integers(0, 5))
        requests[f"r{k}"] = (
            rng.integers(-1000, 1000, size).tolist(),
            rng.integers(0, 10, size).tolist(),
        )
    with stream(srv) as (client, responses):
        for rid, (values, delays) in requests.items():
            client.async_stream_infer(
                "repeat_int32",
                repeat_inputs(grpcclient, values, delays, 0),
                request_id=rid,
                enable_empty_final_response=True,
            )
        arrivals: list[str] = []
        by_id: dict[str, list[Any]] = defaultdict(list)
        pending = set(requests)
        while pending:
            result = responses.results(1)[0]
            rid = result.get_response().id
            assert rid in pending, f"unexpected response for {rid!r}"
            arrivals.append(rid)
            by_id[rid].append(result)
            if is_final(result):
                pending.discard(rid)
    for rid, (values, _) in requests.items():
        data = by_id[rid][:-1]
        assert [int(r.as_numpy("IDX")[0]) for r in data] == list(range(len(values))), rid
        assert [int(r.as_numpy("OUT")[0]) for r in data] == values, rid
    # "long" was sent first but takes 750 ms: the short ones are answered while it runs.
    assert arrivals[-1] == "long", "responses of concurrent decoupled requests must interleave"


def test_aio_stream_infer_decoupled(srv: ServerProcess) -> None:
    requests = {f"q{n}": n for n in (2, 0, 4, 1)}

    async def main() -> dict[str, list[int]]:
        got: dict[str, list[int]] = defaultdict(list)
        done = asyncio.Event()

        async def inputs() -> Any:
            for rid, n in requests.items():
                yield {
                    "model_name": "square_int32",
                    "inputs": [tensor(grpcaio, "IN", np.array([n], np.int32), "INT32")],
                    "request_id": rid,
                }
            await done.wait()  # half-close only once everything arrived

        expected = sum(requests.values())
        async with grpcaio.InferenceServerClient(srv.grpc_url) as client:
            count = 0
            async for result, error in client.stream_infer(inputs(), stream_timeout=WAIT_S):
                assert error is None, str(error)
                got[result.get_response().id].append(int(result.as_numpy("OUT")[0]))
                count += 1
                if count == expected:
                    done.set()
        return got

    got = asyncio.run(asyncio.wait_for(main(), WAIT_S))
    assert dict(got) == {rid: [n] * n for rid, n in requests.items() if n}


@pytest.mark.parametrize("model", ["square_int32", "repeat_int32"])
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_unary_infer_refuses_decoupled(srv: ServerProcess, protocol: str, model: str) -> None:
    mod = httpclient if protocol == "http" else grpcclient
    url = srv.http_url if protocol == "http" else srv.grpc_url
    if model == "square_int32":
        inputs = [tensor(mod, "IN", np.array([2], np.int32), "INT32")]
    else:
        inputs = repeat_inputs(mod, [1], [0], 0)
    client = mod.InferenceServerClient(url)
    try:
        with pytest.raises(InferenceServerException) as info:
            client.infer(model, inputs)
    finally:
        client.close()
    if protocol == "http":
        assert info.value.status() == "501"
        assert info.value.message() == DECOUPLED_HTTP
    else:
        assert info.value.status() == "StatusCode.UNIMPLEMENTED"
        assert info.value.message() == DECOUPLED_GRPC


# ---------------------------------------------------------------------------------------------
# Cancellation
# ---------------------------------------------------------------------------------------------
def _stream_still_works(srv: ServerProcess) -> None:
    with stream(srv) as (client, responses):
        client.async_stream_infer(
            "repeat_int32",
            repeat_inputs(grpcclient, [7, 8], [0, 0], 0),
            request_id="after",
            enable_empty_final_response=True,
        )
        got = responses.until_final({"after"})["after"]
        assert [int(r.as_numpy("OUT")[0]) for r in got[:-1]] == [7, 8]
        a, b = send_simple(client, 5, "after-simple")
        check_simple(responses.results(1)[0], a, b)


def test_stop_stream_mid_decoupled_request(srv: ServerProcess) -> None:
    for _ in range(3):
        client = grpcclient.InferenceServerClient(srv.grpc_url)
        responses = Responses()
        client.start_stream(responses)
        client.async_stream_infer(
            "repeat_int32",
            repeat_inputs(grpcclient, list(range(40)), [50] * 40, 0),
            request_id="long",
        )
        first = responses.results(1)[0]
        assert int(first.as_numpy("IDX")[0]) == 0
        client.stop_stream(cancel_requests=True)
        client.close()
    _stream_still_works(srv)


def test_stop_stream_with_requests_outstanding(srv: ServerProcess) -> None:
    client = grpcclient.InferenceServerClient(srv.grpc_url)
    client.start_stream(Responses())
    for i in range(4):
        client.async_stream_infer(
            "slow",
            [tensor(grpcclient, "INPUT0", np.ones(2, np.float32), "FP32")],
            request_id=f"slow{i}",
        )
    for i in range(50):
        send_simple(client, i)
    client.stop_stream(cancel_requests=True)
    client.close()
    _stream_still_works(srv)


def test_cancelled_requests_leave_the_queue(srv: ServerProcess) -> None:
    """``slow`` has one instance and takes 0.5 s a request. Requests queued behind it by a stream
    that is then dropped, or by unary calls that are then cancelled, are not executed: a request
    sent afterwards waits for the one running at most, not for all of them."""
    queued, x = 8, np.arange(3, dtype=np.float32)
    executions_before = _executions(srv, "slow")
    client = grpcclient.InferenceServerClient(srv.grpc_url)
    client.start_stream(Responses())
    for i in range(queued):
        client.async_stream_infer(
            "slow", [tensor(grpcclient, "INPUT0", x, "FP32")], request_id=f"q{i}"
        )
    time.sleep(0.2)  # all of them reached the server; the first one is running
    client.stop_stream(cancel_requests=True)
    client.close()

    async def cancel_unary_calls() -> None:
        async with grpcaio.InferenceServerClient(srv.grpc_url) as aio:
            inputs = [tensor(grpcaio, "INPUT0", x, "FP32")]
            tasks = [asyncio.ensure_future(aio.infer("slow", inputs)) for _ in range(queued)]
            await asyncio.sleep(0.2)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(asyncio.wait_for(cancel_unary_calls(), WAIT_S))
    with grpcclient.InferenceServerClient(srv.grpc_url) as sync:
        result = sync.infer("slow", [tensor(grpcclient, "INPUT0", x, "FP32")])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x)
    # Of the 2 × 8 cancelled requests, at most the one running at each cancellation was
    # executed (and on a slow machine the stream's first, finished before its cancellation
    # arrived), then the request above: the rest left the queue unexecuted.
    executed = _executions(srv, "slow") - executions_before
    assert 1 <= executed <= 4, f"{executed} executions: cancelled requests were executed"


def test_cancelled_requests_handed_over_together_are_not_run(srv: ServerProcess) -> None:
    """Requests that queued behind a running one go to the Python stub together, in one
    frame, once it is answered. Cancelled then, only the one the stub had started runs: the
    others are answered CANCELLED without an execution, as if they had still been queued."""
    queued, x = 8, np.arange(3, dtype=np.float32)
    executions_before = _executions(srv, "slow")
    responses = Responses()
    client = grpcclient.InferenceServerClient(srv.grpc_url)
    client.start_stream(responses)
    for i in range(1 + queued):
        client.async_stream_infer(
            "slow", [tensor(grpcclient, "INPUT0", x, "FP32")], request_id=f"h{i}"
        )
    first = responses.results(1)[0]  # answered: the eight behind it are in the stub's hands
    np.testing.assert_array_equal(first.as_numpy("OUTPUT0"), x)
    client.stop_stream(cancel_requests=True)
    client.close()
    with grpcclient.InferenceServerClient(srv.grpc_url) as sync:
        result = sync.infer("slow", [tensor(grpcclient, "INPUT0", x, "FP32")])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x)
    # The first, the one the stub was running when the cancellation came, the request above.
    executed = _executions(srv, "slow") - executions_before
    assert executed <= 3, f"{executed} executions: requests cancelled in the stub's queue ran"


def _executions(srv: ServerProcess, model: str) -> int:
    with grpcclient.InferenceServerClient(srv.grpc_url) as c:
        stats = c.get_inference_statistics(model_name=model).model_stats
    return sum(s.execution_count for s in stats)


def test_aio_unary_cancel_and_deadline(srv: ServerProcess) -> None:
    async def main() -> None:
        x = np.arange(4, dtype=np.float32)
        async with grpcaio.InferenceServerClient(srv.grpc_url) as client:
            inputs = [tensor(grpcaio, "INPUT0", x, "FP32")]
            with pytest.raises(InferenceServerException) as info:
                await client.infer("slow", inputs, client_timeout=0.1)
            assert info.value.status() == "StatusCode.DEADLINE_EXCEEDED"
            task = asyncio.ensure_future(client.infer("slow", inputs))
            await asyncio.sleep(0.1)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            # The server keeps serving: the same model answers a call nobody cancels.
            result = await asyncio.wait_for(client.infer("slow", inputs), WAIT_S)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x)

    asyncio.run(asyncio.wait_for(main(), WAIT_S))
    _stream_still_works(srv)


# ---------------------------------------------------------------------------------------------
# HTTP generate / generate_stream (server-sent events)
# ---------------------------------------------------------------------------------------------
def _post(srv: ServerProcess, path: str, body: Any) -> tuple[int, str, bytes]:
    host, port = srv.http_url.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=WAIT_S)
    try:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        conn.request("POST", path, body=data, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, response.getheader("Content-Type", ""), response.read()
    finally:
        conn.close()


def _events(payload: bytes) -> list[dict[str, Any]]:
    """Server-sent events as Triton writes them: ``data: <json>\\n\\n`` each."""
    text = payload.decode()
    chunks = text.split("\n\n")
    assert chunks[-1] == "", f"the event stream must end with a blank line: {text!r}"
    events = []
    for chunk in chunks[:-1]:
        assert chunk.startswith("data: "), f"not an SSE data line: {chunk!r}"
        events.append(json.loads(chunk[len("data: ") :]))
    return events


def test_generate_stream_text(srv: ServerProcess) -> None:
    status, ctype, body = _post(
        srv, "/v2/models/text_stream/generate_stream", {"text_input": "a b c"}
    )
    assert status == 200, body
    assert ctype.startswith("text/event-stream"), ctype
    events = _events(body)
    assert [e["text_output"] for e in events] == ["a", "b", "c"]
    for e in events:
        assert e["model_name"] == "text_stream" and e["model_version"] == "1", e


def test_generate_text_echo(srv: ServerProcess) -> None:
    status, ctype, body = _post(srv, "/v2/models/text_echo/generate", {"text_input": "hello!"})
    assert status == 200, body
    assert ctype.startswith("application/json"), ctype
    answer = json.loads(body)
    assert answer["text_output"] == "hello!"[::-1]
    assert answer["model_name"] == "text_echo" and answer["model_version"] == "1"


def test_generate_stream_events_arrive_as_produced(srv: ServerProcess) -> None:
    host, port = srv.http_url.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=WAIT_S)
    body = {"IN": [5, 6, 7], "DELAY": [0, 400, 400], "WAIT": 0}
    try:
        start = time.monotonic()
        conn.request("POST", "/v2/models/repeat_int32/generate_stream", body=json.dumps(body))
        response = conn.getresponse()
        assert response.status == 200
        assert response.getheader("Content-Type", "").startswith("text/event-stream")
        events, times = [], []
        while len(events) < 3:
            line = response.readline()
            assert line, f"stream ended after {len(events)} events"
            if line.startswith(b"data: "):
                events.append(json.loads(line[len(b"data: ") :]))
                times.append(time.monotonic() - start)
        assert response.read().strip() == b""
    finally:
        conn.close()
    assert [(e["OUT"], e["IDX"]) for e in events] == [(5, 0), (6, 1), (7, 2)]
    assert times[2] - times[0] > 0.6, f"events were buffered, not streamed: {times}"


def test_generate_stream_square_from_top_level_and_parameters(srv: ServerProcess) -> None:
    for body, n in (({"IN": 3}, 3), ({"parameters": {"IN": 2}}, 2), ({"IN": [4]}, 4)):
        status, ctype, payload = _post(srv, "/v2/models/square_int32/generate_stream", body)
        assert status == 200, payload
        assert ctype.startswith("text/event-stream")
        events = _events(payload)
        assert [e["OUT"] for e in events] == [n] * n, body


def test_generate_needs_exactly_one_response(srv: ServerProcess) -> None:
    # A data response followed by a flag-only final counts as one response.
    status, _, body = _post(srv, "/v2/models/square_int32/generate", {"IN": 1})
    assert status == 200, body
    assert json.loads(body)["OUT"] == 1
    for n in (0, 3):
        status, ctype, body = _post(srv, "/v2/models/square_int32/generate", {"IN": n})
        assert status >= 400, body
        assert ctype.startswith("application/json")
        assert "generate expects model to produce exactly 1 response" in json.loads(body)["error"]


@pytest.mark.parametrize("route", ["generate", "generate_stream"])
def test_generate_unknown_model_is_a_json_404(srv: ServerProcess, route: str) -> None:
    status, ctype, body = _post(srv, f"/v2/models/nope/{route}", {"text_input": "x"})
    assert status == 404
    assert ctype.startswith("application/json"), ctype
    assert json.loads(body) == {"error": UNKNOWN_MODEL}


@pytest.mark.parametrize("route", ["generate", "generate_stream"])
def test_generate_other_keys_become_parameters(srv: ServerProcess, route: str) -> None:
    model = "text_echo" if route == "generate" else "text_stream"
    body = {
        "text_input": "ab cd",
        "max_tokens": 16,
        "temperature": 0.5,
        "stream": True,
        "stop": "x",
        "parameters": {"top_k": 3, "note": "hi"},
    }
    status, _, payload = _post(srv, f"/v2/models/{model}/{route}", body)
    assert status == 200, payload
    if route == "generate":
        assert json.loads(payload)["text_output"] == "dc ba"
    else:
        assert [e["text_output"] for e in _events(payload)] == ["ab", "cd"]


def test_generate_missing_input_is_a_json_400(srv: ServerProcess) -> None:
    for route in ("generate", "generate_stream"):
        status, ctype, body = _post(srv, f"/v2/models/text_echo/{route}", {"prompt": "x"})
        assert status == 400, body
        assert ctype.startswith("application/json")
        assert "expected 1 inputs but got 0" in json.loads(body)["error"]


# (body, the text Triton's generate endpoint answers; L0_http generate_endpoint_test.py)
_GENERATE_REFUSED = [
    (
        b'{"text_input": "a", "stream": false, "text_input": "b"}',
        "input 'text_input' already exists in request",
    ),
    (
        b'{"text_input": "a", "parameters": {"text_input": "b"}}',
        "Converting keyword: 'parameters': input 'text_input' already exists in request",
    ),
    (
        b'{"text_\\u0069nput": "a", "text_input": "b"}',  # the same key, escaped
        "input 'text_input' already exists in request",
    ),
    (b'{"text_input": 123}', "attempt to access JSON non-string as string"),
    (b'{"text_input": {"USER": "hi"}}', "attempt to access JSON non-string as string"),
    (b'{"text_input": "a", "parameters": 1}', "Expected JSON object for keyword: 'parameters'"),
    (
        b'{"text_input": "a", "PARAMS": {"P": 0}}',
        "parameter 'PARAMS' has invalid type. It should be either 'int', 'bool', or 'string'.",
    ),
    (
        b'{"text_input": "a", "parameters": {"nested": {"twice": 1}}}',
        "Converting keyword: 'parameters': parameter 'nested' has invalid type.",
    ),
]


@pytest.mark.parametrize(("body", "text"), _GENERATE_REFUSED)
@pytest.mark.parametrize("route", ["generate", "generate_stream"])
def test_generate_refuses_as_triton_does(
    srv: ServerProcess, route: str, body: bytes, text: str
) -> None:
    status, ctype, payload = _post(srv, f"/v2/models/text_echo/{route}", body)
    assert status == 400, payload
    assert ctype.startswith("application/json")
    assert text in json.loads(payload)["error"], payload


def test_generate_stream_error_response_is_an_event(srv: ServerProcess) -> None:
    status, ctype, body = _post(
        srv, "/v2/models/decoupled_error_response/generate_stream", {"INPUT0": [1]}
    )
    assert ctype.startswith("text/event-stream"), (status, ctype, body)
    events = _events(body)
    assert len(events) == 1 and "stream bad" in events[0]["error"], events


def test_generate_stream_client_disconnect(srv: ServerProcess) -> None:
    host, port = srv.http_url.split(":")
    for _ in range(3):
        conn = http.client.HTTPConnection(host, int(port), timeout=WAIT_S)
        body = {"IN": list(range(30)), "DELAY": [100] * 30, "WAIT": 0}
        conn.request("POST", "/v2/models/repeat_int32/generate_stream", body=json.dumps(body))
        response = conn.getresponse()
        assert response.status == 200
        assert response.readline().startswith(b"data: ")
        conn.close()  # drop the connection mid-stream
    status, _, payload = _post(srv, "/v2/models/text_stream/generate_stream", {"text_input": "z"})
    assert status == 200 and [e["text_output"] for e in _events(payload)] == ["z"]
    _stream_still_works(srv)


# ---------------------------------------------------------------------------------------------
# Slow reader
# ---------------------------------------------------------------------------------------------
def test_slow_reader_gets_every_answer(srv: ServerProcess) -> None:
    """2,000 requests of 16 KiB sent while the client does not read for 3 s: HTTP/2 flow
    control pushes back, the server neither fails nor loses an answer."""
    n, size = 2000, 4096
    rss_before = server_status(srv.proc.pid)["VmRSS"]
    gate = threading.Event()
    items: queue.Queue[tuple[Any, Any]] = queue.Queue()

    def callback(result: Any, error: Any) -> None:
        gate.wait(WAIT_S)  # the reader thread blocks: nothing is read meanwhile
        items.put((result, error))

    client = grpcclient.InferenceServerClient(srv.grpc_url)
    try:
        client.start_stream(callback)
        base = np.arange(size, dtype=np.int32)
        for i in range(n):
            client.async_stream_infer("identity_int32", int32_inputs(base + i), request_id=str(i))
        time.sleep(3.0)
        assert srv.proc.poll() is None, "the server died under a slow reader"
        rss_peak = server_status(srv.proc.pid)["VmRSS"]
        gate.set()
        for i in range(n):
            try:
                result, error = items.get(timeout=WAIT_S)
            except queue.Empty:
                pytest.fail(f"only {i} of {n} answers arrived")
            assert error is None, str(error)
            assert result.get_response().id == str(i)
            out = result.as_numpy("OUTPUT0")
            assert out[0] == i and out[-1] == size - 1 + i
    finally:
        gate.set()
        client.stop_stream(cancel_requests=True)
        client.close()
    growth_mib = (rss_peak - rss_before) / 1024
    # 2,000 × 16 KiB is 31 MiB each way; a server that buffers without bound still fits in
    # this, so this only catches gross blow-ups. Back-pressure proper is the soak's business.
    assert growth_mib < 512, f"server RSS grew {growth_mib:.0f} MiB while the client stalled"
    _stream_still_works(srv)


# ---------------------------------------------------------------------------------------------
# Asynchronous clients at load (every answer checked against its own input)
# ---------------------------------------------------------------------------------------------
LOAD = 300


def test_grpc_aio_concurrent_infer(srv: ServerProcess) -> None:
    async def main() -> None:
        async with grpcaio.InferenceServerClient(srv.grpc_url) as client:
            sent = [simple_arrays(i) for i in range(LOAD)]
            calls = [
                client.infer("simple", simple_inputs(grpcaio, a, b), request_id=str(i))
                for i, (a, b) in enumerate(sent)
            ]
            results = await asyncio.gather(*calls)
        for i, result in enumerate(results):
            assert result.get_response().id == str(i)
            check_simple(result, *sent[i])

    asyncio.run(asyncio.wait_for(main(), WAIT_S))


def test_http_aio_concurrent_infer(srv: ServerProcess) -> None:
    async def main() -> None:
        client = httpaio.InferenceServerClient(srv.http_url)
        try:
            sent = [simple_arrays(i) for i in range(LOAD)]
            calls = [
                client.infer("simple", simple_inputs(httpaio, a, b), request_id=str(i))
                for i, (a, b) in enumerate(sent)
            ]
            results = await asyncio.gather(*calls)
        finally:
            await client.close()
        for i, result in enumerate(results):
            assert result.get_response()["id"] == str(i)
            check_simple(result, *sent[i])

    asyncio.run(asyncio.wait_for(main(), WAIT_S))


def test_grpc_async_infer_callbacks(srv: ServerProcess) -> None:
    done: queue.Queue[tuple[int, Any, Any]] = queue.Queue()

    def callback(i: int, result: Any, error: Any) -> None:
        done.put((i, result, error))

    client = grpcclient.InferenceServerClient(srv.grpc_url)
    try:
        sent = [simple_arrays(i) for i in range(LOAD)]
        for i, (a, b) in enumerate(sent):
            client.async_infer(
                "simple", simple_inputs(grpcclient, a, b), partial(callback, i), request_id=str(i)
            )
        seen = set()
        for _ in range(LOAD):
            i, result, error = done.get(timeout=WAIT_S)
            assert error is None, str(error)
            assert result.get_response().id == str(i)
            check_simple(result, *sent[i])
            seen.add(i)
        assert seen == set(range(LOAD))
    finally:
        client.close()


def test_http_async_infer(srv: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(srv.http_url, concurrency=16)
    try:
        sent = [simple_arrays(i) for i in range(LOAD)]
        handles = [
            client.async_infer("simple", simple_inputs(httpclient, a, b), request_id=str(i))
            for i, (a, b) in enumerate(sent)
        ]
        for i, handle in enumerate(handles):
            result = handle.get_result(timeout=WAIT_S)
            assert result.get_response()["id"] == str(i)
            check_simple(result, *sent[i])
    finally:
        client.close()


def test_the_server_process_does_not_load_the_grpc_library(srv: ServerProcess) -> None:
    """tritium's gRPC transport is its own: serving gRPC (unary and streams, above) never
    loads the gRPC client library's native module into the server (``_lazy_client.py``)."""
    _stream_still_works(srv)
    maps = Path(f"/proc/{srv.proc.pid}/maps").read_text()
    assert "cygrpc" not in maps, "the server loaded grpc's native module"
    assert "onnxruntime" in maps or "numpy" in maps  # (the maps are the server's own)
