"""The one inference call (``api/inference.py:Inference``, ``api/call.py:InferenceCall``) in
process: a real server over an ONNX identity model, no front-end, no socket. What every door
relies on: one response awaited or streamed, errors as ``ServerError`` with Triton's kind, a
decoupled model refused by a door that refuses them, each trace stamp once, one access-log
line per call, statistics counted once."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from tests.support.models import _onnx_identity_fp32, _unary_config
from tritium.api import Door, Inference
from tritium.errors import ErrorKind, ServerError
from tritium.options import LogOptions, RepositoryOptions, ServerOptions
from tritium.server import InferenceServer
from tritium.tracing import TraceConfig
from tritium.tracing.settings import TraceLevel, TraceValues
from tritium.types import ClientRequest, DataType, Tensor

_DOOR = Door("http", "no decoupled here", ("RECV_START", "RECV_END"), ("SEND_START", "SEND_END"))
_STREAMS = Door("grpc", None, ("RECV_START", "RECV_END"), ("SEND_START", "SEND_END"))


def _repository(root: Path) -> Path:
    for name, extra in (("plain", ""), ("split", "model_transaction_policy { decoupled: true }")):
        version = root / name / "1"
        version.mkdir(parents=True)
        config = _unary_config(name, "TYPE_FP32", [-1], backend="onnxruntime", extra=extra)
        (root / name / "config.pbtxt").write_text(config)
        (version / "model.onnx").write_bytes(_onnx_identity_fp32())
    return root


def _client(model: str = "plain", rid: str = "r1") -> ClientRequest:
    data = np.arange(4, dtype=np.float32)
    return ClientRequest(model, -1, rid, (Tensor("INPUT0", DataType.FP32, (4,), data),))


def _serve(tmp_path: Path, test: Callable[[InferenceServer, Inference], Awaitable[None]]) -> Path:
    """Run ``test`` on a started server tracing every request and writing an access log;
    returns the access log's path (written when the server stops)."""
    access = tmp_path / "access.log"
    options = ServerOptions(
        repository=RepositoryOptions(paths=(_repository(tmp_path / "models"),)),
        logging=replace(LogOptions(), access_log_file=str(access)),
        tracing=TraceConfig(
            TraceValues(TraceLevel.TIMESTAMPS, rate=1, file=str(tmp_path / "trace.json"))
        ),
    )

    async def run() -> None:
        server = InferenceServer(options)
        await server.start()
        try:
            await test(server, server.inference)
        finally:
            await server.stop()

    asyncio.run(run())
    return access


def _lines(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_one_awaited_response_each_stamp_once_one_access_line(tmp_path: Path) -> None:
    seen: dict[str, Any] = {}

    async def test(server: InferenceServer, inference: Inference) -> None:
        call = inference.call(_DOOR, "peer:1", 16)
        call.asked("plain", "", "r1")
        call.sample("plain", None, None, (10, 20))
        trace = call.trace
        assert trace is not None
        response = await inference.infer(_client(), call)
        call.responded()
        call.sent(30, 40)
        call.sent(50, 60)  # once only: the trace has ended
        call.count(123)
        call.outcome("SUCCESS", 200)
        call.logged()
        call.logged()  # once only: the line is written
        seen["names"] = [name for name, _ in trace.stamps]
        seen["output"] = response.outputs[0].data.tolist()
        stats = server.statistics("plain")["model_stats"][0]
        seen["count"] = stats["inference_stats"]["success"]["count"]

    access = _serve(tmp_path, test)
    names = seen["names"]
    for name in ("RECV_START", "RECV_END", "REQUEST_START", "QUEUE_START", "REQUEST_END"):
        assert names.count(name) == 1, names
    for name in ("INFER_RESPONSE_COMPLETE", "SEND_START", "SEND_END"):
        assert names.count(name) == 1, names
    assert seen["output"] == [0.0, 1.0, 2.0, 3.0]
    assert seen["count"] == 1
    (line,) = _lines(access)
    assert (line["model"], line["request_id"], line["status"]) == ("plain", "r1", "SUCCESS")
    assert (line["protocol"], line["bytes_out"], line["code"]) == ("http", 123, 200)


def test_errors_raise_with_triton_kinds_and_fail_the_call_once(tmp_path: Path) -> None:
    kinds: list[ErrorKind] = []

    async def test(server: InferenceServer, inference: Inference) -> None:
        call = inference.call(_DOOR, "peer:2", 8)
        call.asked("nope", "", "bad")
        for client in (_client("nope"), _client("../x")):
            with pytest.raises(ServerError) as caught:
                await inference.infer(client, call)
            kinds.append(caught.value.kind)
        wrong = ClientRequest("plain", -1, "w", (Tensor("OTHER", DataType.FP32, (1,), None),))
        with pytest.raises(ServerError) as caught:
            await inference.infer(wrong)
        kinds.append(caught.value.kind)
        call.failed("NOT_FOUND", 404)
        call.failed("INTERNAL", 500)

    access = _serve(tmp_path, test)
    assert kinds == [ErrorKind.NOT_FOUND, ErrorKind.INVALID_ARG, ErrorKind.INVALID_ARG]
    (line,) = _lines(access)
    assert (line["status"], line["code"], line["request_id"]) == ("NOT_FOUND", 404, "bad")


def test_a_door_that_refuses_decoupled_models_refuses_them(tmp_path: Path) -> None:
    outcome: dict[str, Any] = {}

    async def test(server: InferenceServer, inference: Inference) -> None:
        with pytest.raises(ServerError) as caught:
            await inference.infer(_client("split"), inference.call(_DOOR, "p", 1))
        outcome["refused"] = (caught.value.kind, caught.value.message)
        with pytest.raises(ServerError) as caught:
            await inference.infer(_client("split"))  # in process: use stream()
        outcome["in_process"] = caught.value.kind
        stream = inference.stream(_client("split"), inference.call(_STREAMS, "p", 1))
        outcome["streamed"] = [r.outputs[0].data.tolist() async for r in stream]

    _serve(tmp_path, test)
    assert outcome["refused"] == (ErrorKind.UNSUPPORTED, "no decoupled here")
    assert outcome["in_process"] is ErrorKind.UNSUPPORTED
    assert outcome["streamed"] == [[0.0, 1.0, 2.0, 3.0]]


def test_start_answers_through_the_callback_and_inline_follows_tracing(tmp_path: Path) -> None:
    answers: list[tuple[Any, bool]] = []
    inline: list[bool] = []

    async def test(server: InferenceServer, inference: Inference) -> None:
        inline.append(inference.inline())  # traced and logged: not inline
        done = asyncio.get_running_loop().create_future()

        def callback(response: Any, final: bool) -> None:
            answers.append((None if response is None else response.id, final))
            if final:
                done.set_result(None)

        inference.start(_client(rid="cb"), callback)
        await done
        server.trace_setting("", {"trace_level": ["OFF"]})
        inference.access_log = None
        inline.append(inference.inline())

    _serve(tmp_path, test)
    assert answers == [("cb", True)]
    assert inline == [False, True]
