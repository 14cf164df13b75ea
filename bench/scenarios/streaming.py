"""The ``streaming`` list (issue 3): ``simple`` on one ModelStreamInfer stream (N requests in
flight) and on N streams (one each) next to unary gRPC, and the decoupled ``square_int32`` on
one stream; the stream sessions that drive them."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np

from bench.common import Issue, Scenario, Window, check_answer, make_inputs
from bench.drivers import GrpcDriver


def streaming_scenarios() -> list[Scenario]:
    """Issue 3: ``simple`` on one ModelStreamInfer stream (N requests in flight) and on N
    streams (one each) next to unary gRPC; the decoupled ``square_int32`` (N = 100 responses
    per request) with 1 and 8 requests in flight on one stream."""
    simple = [
        Scenario("simple", protocol, concurrency)
        for concurrency in (1, 16)
        for protocol in ("grpc", "grpc-stream", "grpc-streams")
        if not (protocol == "grpc-streams" and concurrency == 1)  # the same as grpc-stream c1
    ]
    return simple + [Scenario("square_int32", "grpc-stream", c, responses=100) for c in (1, 8)]


class StreamCredit:
    """The closed loop on one stream: ``depth`` requests in flight, each answer (each final
    answer for a decoupled model) lets the next request go. The request generator stops when
    the window closes, which half-closes the stream; the server then answers what is still in
    flight and ends the stream."""

    def __init__(self, depth: int, win: Window) -> None:
        self.credit, self.win = asyncio.Semaphore(depth), win

    async def next_index(self) -> Any:
        """Yields 0, 1, 2 ... as credit allows, until the window closes."""
        i = 0
        while True:
            await self.credit.acquire()
            if self.win.closed():
                return
            yield i
            i += 1

    def done(self) -> None:
        self.credit.release()


async def stream_session(sc: Scenario, url: str, wid: int, depth: int, win: Window, every: int):
    """``simple`` over ModelStreamInfer with tritonclient's ``stream_infer``: ``depth``
    requests in flight, answers matched by request id and required in send order."""
    driver = GrpcDriver()
    client = driver.client(url)
    data = make_inputs(wid, sc.batch)
    prepared = [driver.prepare(a, b) for a, b in data]
    loop = StreamCredit(depth, win)
    in_flight: dict[str, tuple[float, int, bool]] = {}  # id -> (sent at, data set, check)
    order: deque[str] = deque()  # ids in send order

    async def requests() -> Any:
        async for i in loop.next_index():
            check = i % every == 0
            k = (i // every if check else i) % len(data)
            rid = f"{wid}-{i}"
            in_flight[rid] = (time.perf_counter(), k, check)
            order.append(rid)
            inputs, outputs = prepared[k]
            yield {"model_name": sc.model, "inputs": inputs, "outputs": outputs, "request_id": rid}

    stream = client.stream_infer(requests())
    try:
        async for result, error in stream:
            t1 = time.perf_counter()
            if error is not None:
                raise error
            rid, expected = result.get_response().id, order.popleft() if order else None
            if rid != expected:
                raise RuntimeError(f"answer for id {rid!r} when {expected!r} was the oldest")
            t0, k, check = in_flight.pop(rid)
            if win.open():
                win.latencies.append(t1 - t0)
            if check:
                win.verified += 1
                problem = check_answer(result, *data[k]) or final_flag_problem(
                    result.get_response(), True
                )
                if problem:
                    win.wrong.append(f"{rid}: {problem}")
            loop.done()
        if in_flight:
            raise RuntimeError(f"stream ended with {len(in_flight)} requests unanswered")
    except Exception as exc:  # noqa: BLE001 - a failing scenario is reported, not fatal
        win.errors.append(f"{type(exc).__name__}: {exc}")
    finally:
        stream.cancel()
        await client.close()


def final_flag_problem(response: Any, expected: bool) -> str | None:
    """Triton sets ``triton_final_response`` on every response of a stream."""
    if "triton_final_response" not in response.parameters:
        return "no triton_final_response parameter"
    if response.parameters["triton_final_response"].bool_param != expected:
        return f"triton_final_response is not {expected}"
    return None


def square_request(sc: Scenario, rid: str) -> Any:
    """What tritonclient's ``async_stream_infer(..., enable_empty_final_response=True)`` sends:
    the aio client's ``stream_infer`` cannot ask for the empty final response (it forwards no
    such key, and rejects ``triton_`` parameters), so the decoupled session sends the protos
    itself on the aio client's own stub."""
    import tritonclient.grpc.aio as grpcclient
    from tritonclient.grpc._utils import _get_inference_request

    tensor = grpcclient.InferInput("IN", [1], "INT32")
    tensor.set_data_from_numpy(np.array([sc.responses], np.int32))
    request = _get_inference_request(
        model_name=sc.model,
        inputs=[tensor],
        model_version="",
        request_id=rid,
        outputs=None,
        sequence_id=0,
        sequence_start=False,
        sequence_end=False,
        priority=0,
        timeout=None,
        parameters=None,
    )
    request.parameters["triton_enable_empty_final_response"].bool_param = True
    return request


@dataclass
class Decoupled:
    """One square_int32 request in flight: N data responses (OUT == [N], final flag false),
    then an empty response with ``triton_final_response`` true."""

    sent: float
    check: bool
    first: float | None = None
    count: int = 0

    def answer(self, sc: Scenario, response: Any) -> str | None:
        from tritonclient.grpc import InferResult

        if not response.outputs:  # the final response
            if self.count != sc.responses:
                return f"final after {self.count} responses, {sc.responses} expected"
            return final_flag_problem(response, True)
        self.count += 1
        if self.count > sc.responses:
            return f"more than {sc.responses} responses"
        if self.check:
            out = InferResult(response).as_numpy("OUT")
            if out is None or out.tolist() != [sc.responses]:
                return f"OUT={out if out is None else out.tolist()}, [{sc.responses}] expected"
            return final_flag_problem(response, False)
        return None


def decoupled_message(
    sc: Scenario, in_flight: dict[str, Decoupled], win: Window, message: Any, t1: float
) -> bool:
    """Accounts one ModelStreamInferResponse; True when it completes its request."""
    if message.error_message:
        raise RuntimeError(f"in-stream error: {message.error_message}")
    response = message.infer_response
    state = in_flight.get(response.id)
    if state is None:
        raise RuntimeError(f"response for id {response.id!r}, not in flight")
    if state.first is None:
        state.first = t1
        if win.open():
            win.first_latencies.append(t1 - state.sent)
    problem = state.answer(sc, response)
    if problem:
        win.wrong.append(f"{response.id}: {problem}")
    if response.outputs:
        win.responses += win.open()
        return False
    del in_flight[response.id]
    win.verified += state.check
    if win.open():
        win.latencies.append(t1 - state.sent)
    return True


async def decoupled_session(
    sc: Scenario, url: str, wid: int, depth: int, win: Window, every: int
) -> None:
    """square_int32 over ModelStreamInfer: ``depth`` requests in flight, each answered by
    ``sc.responses`` responses interleaved across requests and matched by id; a request's
    final response lets the next one go."""
    client = GrpcDriver().client(url)
    loop = StreamCredit(depth, win)
    in_flight: dict[str, Decoupled] = {}

    async def requests() -> Any:
        async for i in loop.next_index():
            rid = f"{wid}-{i}"
            request = square_request(sc, rid)
            in_flight[rid] = Decoupled(time.perf_counter(), i % every == 0)
            yield request

    call = client._client_stub.ModelStreamInfer(requests(), metadata=client._get_metadata(None))
    try:
        async for message in call:
            if decoupled_message(sc, in_flight, win, message, time.perf_counter()):
                loop.done()
        if in_flight:
            raise RuntimeError(f"stream ended with {len(in_flight)} requests unfinished")
    except Exception as exc:  # noqa: BLE001 - a failing scenario is reported, not fatal
        win.errors.append(f"{type(exc).__name__}: {exc}")
    finally:
        call.cancel()
        await client.close()


NOTE = (
    "`grpc` is unary `ModelInfer` (one client per in-flight request, as in the "
    "foundation rows; measured once in a run that covers both lists); `grpc-stream` is ONE "
    "`ModelStreamInfer` stream (one client) with `conc` requests in flight, answers matched by "
    "request id and checked to come back in send order; `grpc-streams` is `conc` streams (one "
    "client each) with one request in flight each."
)
ISSUE = Issue("streaming", streaming_scenarios, note=NOTE)
