"""One blocking ``infer`` over every way a client can send a sequence request, for the
sequence-batching tests: HTTP (binary tensors or JSON), gRPC unary, one gRPC stream
(``start_stream`` + ``async_stream_infer``) and the asyncio clients (``tritonclient.http.aio``,
``tritonclient.grpc.aio``, driven on a private event loop thread). Every transport is safe to
call from several threads at once, and every wait is bounded by ``WAIT_S``.

    with open_transport("grpc_stream", server) as t:
        step = t.step("seq_echo_direct", 5, sequence_id=7, start=True)
        step.seen["slot"], step.output, step.corrid_text
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
import tritonclient.http as httpclient
import tritonclient.http.aio as httpaio
from .sequence_models import SEEN_FIELDS
from tritonclient.utils import InferenceServerException
from testkit.server_process import ServerProcess

WAIT_S = 60.0
TRANSPORTS = ["http", "http_json", "grpc", "grpc_stream", "http_aio", "grpc_aio"]
# The status an error kind has over HTTP and gRPC (a gRPC stream answers in-stream, no status).
STATUS = {
    "INVALID_ARG": {"400", "StatusCode.INVALID_ARGUMENT"},
    "UNAVAILABLE": {"503", "StatusCode.UNAVAILABLE"},
}


def protocol_of(transport: str) -> str:
    return "http" if transport.startswith("http") else "grpc"


@dataclass
class Step:
    """One answered request of a probe model (tests/support/sequence_models.py)."""

    result: Any

    @property
    def seen(self) -> dict[str, int]:
        values = self.result.as_numpy("SEEN").reshape(-1).tolist()
        return dict(zip(SEEN_FIELDS, values, strict=True))

    @property
    def output(self) -> float:
        return self.result.as_numpy("OUTPUT0").reshape(-1)[0].item()

    @property
    def corrid_text(self) -> str:
        return bytes(self.result.as_numpy("CORRID_OUT").reshape(-1)[0]).decode()

    @property
    def id_text(self) -> str:
        return bytes(self.result.as_numpy("ID_OUT").reshape(-1)[0]).decode()


class Transport:
    """``infer(model, inputs, **kwargs)``: kwargs are tritonclient's (``sequence_id``,
    ``sequence_start``, ``sequence_end``, ``timeout``, ``outputs``...)."""

    module: Any = httpclient

    def infer(self, model: str, inputs: dict[str, np.ndarray], **kwargs: Any) -> Any:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def make_inputs(self, inputs: dict[str, np.ndarray], binary: bool = True) -> list[Any]:
        made = []
        for name, array in inputs.items():
            datatype = "FP32" if array.dtype == np.float32 else "INT32"
            made.append(self.module.InferInput(name, list(array.shape), datatype))
            if self.module in (httpclient, httpaio):
                made[-1].set_data_from_numpy(array, binary_data=binary)
            else:
                made[-1].set_data_from_numpy(array)
        return made

    def step(
        self,
        model: str,
        value: float,
        sequence_id: int | str,
        start: bool = False,
        end: bool = False,
        **kwargs: Any,
    ) -> Step:
        """One request of a sequence with INPUT0 = [[value]] (batch dimension included when
        ``batched``, the default)."""
        batched = kwargs.pop("batched", True)
        dtype = kwargs.pop("dtype", np.int32)
        array = np.full((1, 1) if batched else (1,), value, dtype=dtype)
        result = self.infer(
            model,
            {"INPUT0": array},
            sequence_id=sequence_id,
            sequence_start=start,
            sequence_end=end,
            **kwargs,
        )
        return Step(result)


class HttpTransport(Transport):
    def __init__(self, url: str, binary: bool) -> None:
        self.client = httpclient.InferenceServerClient(url, concurrency=8)
        self.binary = binary

    def infer(self, model: str, inputs: dict[str, np.ndarray], **kwargs: Any) -> Any:
        outputs = kwargs.pop("outputs", None)
        if outputs is not None:
            kwargs["outputs"] = [
                httpclient.InferRequestedOutput(n, binary_data=self.binary) for n in outputs
            ]
        return self.client.infer(model, self.make_inputs(inputs, self.binary), **kwargs)

    def close(self) -> None:
        self.client.close()


class GrpcTransport(Transport):
    module = grpcclient

    def __init__(self, url: str) -> None:
        self.client = grpcclient.InferenceServerClient(url)

    def infer(self, model: str, inputs: dict[str, np.ndarray], **kwargs: Any) -> Any:
        _requested(self.module, kwargs)
        return self.client.infer(model, self.make_inputs(inputs), client_timeout=WAIT_S, **kwargs)

    def close(self) -> None:
        self.client.close()


class StreamTransport(Transport):
    """All requests on one gRPC stream. A non-decoupled model answers a stream's requests in
    the order they were sent, and an error response carries no id through tritonclient's
    callback, so answers are matched to requests in order."""

    module = grpcclient

    def __init__(self, url: str) -> None:
        self.client = grpcclient.InferenceServerClient(url)
        self._pending: queue.SimpleQueue[concurrent.futures.Future[Any]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self.client.start_stream(callback=self._answer)

    def _answer(self, result: Any, error: Any) -> None:
        future = self._pending.get_nowait()
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

    def infer(self, model: str, inputs: dict[str, np.ndarray], **kwargs: Any) -> Any:
        return self.send(model, inputs, **kwargs).result(WAIT_S)

    def send(
        self, model: str, inputs: dict[str, np.ndarray], **kwargs: Any
    ) -> concurrent.futures.Future[Any]:
        """Send without waiting: the future completes with the answer."""
        _requested(self.module, kwargs)
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self._lock:  # the order of the pending queue is the order on the stream
            self._pending.put(future)
            self.client.async_stream_infer(model, self.make_inputs(inputs), **kwargs)
        return future

    def close(self) -> None:
        self.client.stop_stream()
        self.client.close()


class AioTransport(Transport):
    """An asyncio client living on its own event loop thread; ``infer`` blocks the caller."""

    def __init__(self, url: str, grpc: bool) -> None:
        self.module = grpcaio if grpc else httpaio
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self.client = self._run(self._open(url))

    async def _open(self, url: str) -> Any:
        return self.module.InferenceServerClient(url)

    def _run(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(WAIT_S)

    def infer(self, model: str, inputs: dict[str, np.ndarray], **kwargs: Any) -> Any:
        _requested(self.module, kwargs)
        return self._run(self.client.infer(model, self.make_inputs(inputs), **kwargs))

    def close(self) -> None:
        self._run(self.client.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(WAIT_S)
        self._loop.close()


def _requested(module: Any, kwargs: dict[str, Any]) -> None:
    outputs = kwargs.pop("outputs", None)
    if outputs is not None:
        kwargs["outputs"] = [module.InferRequestedOutput(n) for n in outputs]


def expect_error(
    transport: str, call: Callable[[], Any], message: str, kind: str = "INVALID_ARG"
) -> None:
    """``call`` fails with exactly ``message`` and, outside a stream, the status of ``kind``."""
    with pytest.raises(InferenceServerException) as info:
        call()
    assert info.value.message() == message
    if transport != "grpc_stream":
        assert info.value.status() in STATUS[kind], info.value.status()


def make_transport(transport: str, server: ServerProcess) -> Transport:
    url = server.url(protocol_of(transport))
    makers = {
        "http": lambda: HttpTransport(url, binary=True),
        "http_json": lambda: HttpTransport(url, binary=False),
        "grpc": lambda: GrpcTransport(url),
        "grpc_stream": lambda: StreamTransport(url),
        "http_aio": lambda: AioTransport(url, grpc=False),
        "grpc_aio": lambda: AioTransport(url, grpc=True),
    }
    return makers[transport]()


@contextmanager
def open_transport(transport: str, server: ServerProcess) -> Iterator[Transport]:
    t = make_transport(transport, server)
    try:
        yield t
    finally:
        t.close()


@dataclass
class Stats:
    """A model's statistics, the same from HTTP and gRPC."""

    inference_count: int
    execution_count: int
    success: int
    fail: int
    batch_sizes: dict[int, int]  # batch size -> executions


def model_stats(protocol: str, server: ServerProcess, model: str) -> Stats:
    if protocol == "http":
        with httpclient.InferenceServerClient(server.http_url) as c:
            raw = c.get_inference_statistics(model)
    else:
        with grpcclient.InferenceServerClient(server.grpc_url) as c:
            raw = c.get_inference_statistics(model, as_json=True)
    stats = raw["model_stats"][0]
    infer = stats.get("inference_stats", {})
    return Stats(
        inference_count=int(stats.get("inference_count", 0)),
        execution_count=int(stats.get("execution_count", 0)),
        success=int(infer.get("success", {}).get("count", 0)),
        fail=int(infer.get("fail", {}).get("count", 0)),
        batch_sizes={
            int(b["batch_size"]): int(b.get("compute_infer", {}).get("count", 0))
            for b in stats.get("batch_stats", [])
        },
    )


@contextmanager
def serving(
    tmp_path_factory: pytest.TempPathFactory, label: str, models: list[str]
) -> Iterator[ServerProcess]:
    """A server over a fresh test repository of ``models``, ready, stopped afterwards (the
    module-scoped ``srv`` fixture of each sequence test module)."""
    from pathlib import Path

    from .models import build_test_repository

    repo = build_test_repository(tmp_path_factory.mktemp(label) / "repo", models)
    proc = ServerProcess([Path(repo)])
    try:
        proc.wait_live(90.0, endpoint="ready")
        yield proc
    finally:
        proc.stop()
