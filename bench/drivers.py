"""Protocol drivers: build the request objects once per worker, send them, decode the answer.
``PROTOCOLS`` names them (``Scenario.protocol``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np


def triton_dtype(array: np.ndarray) -> str:
    from tritonclient.utils import np_to_triton_dtype

    return np_to_triton_dtype(array.dtype)


class _Driver:
    """What both unary drivers share: ``mod`` is tritonclient's http.aio or grpc.aio module,
    ``binary_kwargs`` the keyword arguments its tensors take (HTTP: binary_data)."""

    mod: Any
    binary_kwargs: dict[str, Any] = {}

    def client(self, url: str) -> Any:
        return self.mod.InferenceServerClient(url)

    def prepare(self, in0: np.ndarray, in1: np.ndarray) -> tuple[list, list]:
        return self.prepare_tensors({"INPUT0": in0, "INPUT1": in1}, ("OUTPUT0", "OUTPUT1"))

    def prepare_tensors(
        self, arrays: dict[str, np.ndarray], output_names: tuple[str, ...]
    ) -> tuple[list, list]:
        inputs = []
        for name, array in arrays.items():
            tensor = self.mod.InferInput(name, list(array.shape), triton_dtype(array))
            tensor.set_data_from_numpy(array, **self.binary_kwargs)
            inputs.append(tensor)
        outputs = [self.mod.InferRequestedOutput(n, **self.binary_kwargs) for n in output_names]
        return inputs, outputs


class HttpDriver(_Driver):
    """``accept_encoding=None`` keeps aiohttp's default ``Accept-Encoding: gzip, deflate, br``
    (tritonclient's aio session sends it on every request, so the server may compress the
    response); the foundation scenarios send ``identity`` as perf_analyzer and the sync
    client do."""

    url_key = "http"

    def __init__(self, binary: bool, accept_encoding: str | None = "identity") -> None:
        import tritonclient.http.aio as httpclient

        self.mod, self.binary = httpclient, binary
        self.binary_kwargs = {"binary_data": binary}
        self.headers = {"Accept-Encoding": accept_encoding} if accept_encoding else None

    async def infer(self, client: Any, model: str, inputs: list, outputs: list) -> Any:
        return await client.infer(model, inputs, outputs=outputs, headers=self.headers)


class GrpcDriver(_Driver):
    url_key = "grpc"

    def __init__(self) -> None:
        import tritonclient.grpc.aio as grpcclient

        self.mod = grpcclient

    async def infer(self, client: Any, model: str, inputs: list, outputs: list) -> Any:
        return await client.infer(model, inputs, outputs=outputs)


class GrpcStreamDriver:
    """gRPC ``ModelStreamInfer``: ``one_stream`` keeps N requests in flight on one stream
    (``grpc-stream``), otherwise N streams each keep one (``grpc-streams``). One client (one
    channel, one connection) per stream. The sessions are ``stream_session`` (the ``simple``
    contract, through tritonclient's ``stream_infer``) and ``decoupled_session``."""

    url_key = "grpc"

    def __init__(self, one_stream: bool) -> None:
        self.one_stream = one_stream

    def depths(self, concurrency: int) -> list[int]:
        """Requests in flight on each stream."""
        return [concurrency] if self.one_stream else [1] * concurrency


class ShmDriver:
    """System shared memory for inputs and outputs (``shm_worker``): the request goes over
    ``control`` (binary HTTP or gRPC) and carries only the region references."""

    def __init__(self, control: str) -> None:
        self.url_key = control
        self.inner = HttpDriver(binary=True) if control == "http" else GrpcDriver()
        self.mod = self.inner.mod

    def client(self, url: str) -> Any:
        return self.inner.client(url)

    async def infer(self, client: Any, model: str, inputs: list, outputs: list) -> Any:
        return await self.inner.infer(client, model, inputs, outputs)


PROTOCOLS: dict[str, Callable[[], Any]] = {
    "http": lambda: HttpDriver(binary=True),
    "http-json": lambda: HttpDriver(binary=False),
    "grpc": GrpcDriver,
    "grpc-stream": lambda: GrpcStreamDriver(one_stream=True),
    "grpc-streams": lambda: GrpcStreamDriver(one_stream=False),
    "shm-http": lambda: ShmDriver("http"),
    "shm-grpc": lambda: ShmDriver("grpc"),
    # Not in the foundation list; select it with --protocols (see select()).
    "http-aio-default": lambda: HttpDriver(binary=True, accept_encoding=None),
}


UNARY_PROTOCOLS = ("http", "http-json", "grpc", "http-aio-default")
