"""Functions bound into the server's own process (``backend: "pytriton"``): the backend of
``tritium.pytriton``'s ``Triton.bind``.

A bound model's folder holds a config.pbtxt like any other (the front-ends answer its
metadata and config as for PyTriton's models) and an empty version folder; what runs is a
Python callable registered here under the folder's path (``register``) by the process that
bound it. A folder of this backend that nobody bound fails its load with the reason.

Each instance runs its executions one after the other on a thread of its own, so a callable
that blocks never holds the event loop; a binding made with ``processes=True`` runs its jobs
in a process of its own per instance instead (a callable that holds the GIL then leaves the
server's threads alone), its requests and answers pickled across. A job answers one
execution with an iterable of response lists: one list for an ordinary model (a dict of
output arrays per request), any number for a decoupled one, each list sent as it comes
(non-final) and the final flag after the last.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..config.spec import ModelSpec
from ..datatypes import DataType
from ..errors import ServerError, internal, unavailable
from ..request import InferenceRequest
from ..types import InferenceResponse, Tensor
from .base import LoadContext, ModelInstance, instance_names, output_tensor, send_error

# One request as a job sees it: its inputs by name, its parameters, the outputs it asked for
# (None: all of them).
Call = tuple[dict[str, np.ndarray], dict[str, Any], list[str] | None]
Answer = list[dict[str, np.ndarray]]
Job = Callable[[list[Call]], Iterable[Answer]]


@dataclass(frozen=True)
class Binding:
    """What ``Triton.bind`` registers for a model folder: one job per instance (each
    picklable where ``processes``)."""

    jobs: tuple[Job, ...]
    processes: bool = False


_BINDINGS: dict[str, Binding] = {}
_LOCK = threading.Lock()


def _key(model_dir: Path) -> str:
    return str(model_dir.resolve())


def register(model_dir: Path, binding: Binding) -> None:
    with _LOCK:
        _BINDINGS[_key(model_dir)] = binding


def unregister(model_dir: Path) -> None:
    with _LOCK:
        _BINDINGS.pop(_key(model_dir), None)


def _process_pool() -> Executor:
    return ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))


def _materialised(job: Job, calls: list[Call]) -> list[Answer]:
    """A job run to its end (in a pool process: a generator does not cross processes)."""
    return list(job(calls))


class BoundBackend:
    async def load(self, ctx: LoadContext) -> tuple[ModelSpec, list[ModelInstance]]:
        with _LOCK:
            binding = _BINDINGS.get(_key(ctx.model_dir))
        if binding is None:
            raise unavailable(
                f"model '{ctx.model_name}' of backend 'pytriton' has no function bound to it: "
                "bind one with tritium.pytriton's Triton.bind in the serving process"
            )
        spec = ctx.finalize(ctx.config)
        names = instance_names(spec, ctx)
        if len(names) > len(binding.jobs):
            raise internal(
                f"model '{ctx.model_name}': {len(names)} instances for "
                f"{len(binding.jobs)} bound callables"
            )
        return spec, [
            BoundInstance(name, spec, ctx.version, binding.jobs[i], binding.processes)
            for i, name in enumerate(names)
        ]


class BoundInstance:
    """One bound callable, run on its thread (and, ``processes``, in its process)."""

    def __init__(self, name: str, spec: ModelSpec, version: int, job: Job, processes: bool):
        self.name = name
        self._spec = spec
        self._version = str(version)
        self._job = job
        self._thread = ThreadPoolExecutor(1, thread_name_prefix=f"tritium-bound-{name}")
        self._process: Executor | None = _process_pool() if processes else None

    async def execute(self, requests: list[InferenceRequest]) -> None:
        loop = asyncio.get_running_loop()
        calls = [_call(request) for request in requests]
        if self._spec.decoupled:
            await loop.run_in_executor(self._thread, self._stream, loop, requests, calls)
            return
        try:
            answers = await loop.run_in_executor(self._thread, self._answers, requests, calls)
        except ServerError as exc:
            for request in requests:
                send_error(request, self._version, exc)
            return
        for request, response in zip(requests, answers, strict=True):
            assert request.sender is not None
            request.sender.send(response, True)

    async def execute_each(self, requests: list[InferenceRequest]) -> None:
        for request in requests:
            await self.execute([request])

    async def is_ready(self) -> bool:
        return True

    async def close(self) -> None:
        self._thread.shutdown(wait=False)
        if self._process is not None:
            await asyncio.to_thread(self._process.shutdown, True, cancel_futures=True)

    # -- on the instance thread ------------------------------------------------------------
    def _run(self, calls: list[Call]) -> Iterable[Answer]:
        if self._process is None:
            return self._job(calls)
        try:
            return self._process.submit(_materialised, self._job, calls).result()
        except BrokenProcessPool:
            # the callable's process died (os._exit, a crash, killed): this execution fails,
            # the next one gets a new process
            self._process.shutdown(wait=False)
            self._process = _process_pool()
            raise internal(
                f"model '{self._spec.name}': the process running its callable exited"
            ) from None

    def _answers(
        self, requests: list[InferenceRequest], calls: list[Call]
    ) -> list[InferenceResponse]:
        """An ordinary model's one answer: a response per request (ServerError: none)."""
        try:
            answers = list(self._run(calls))
        except ServerError:
            raise
        except Exception as exc:
            raise internal(_failure(exc)) from None
        if len(answers) != 1:
            raise internal(
                f"model '{self._spec.name}' is not decoupled: its callable gave "
                f"{len(answers)} answers for one execution (a generator needs "
                "ModelConfig(decoupled=True))"
            )
        return self._responses(requests, calls, answers[0])

    def _stream(
        self,
        loop: asyncio.AbstractEventLoop,
        requests: list[InferenceRequest],
        calls: list[Call],
    ) -> None:
        """A decoupled model: each answer sent as it comes, then the final flag (or the
        error that ends the stream)."""
        try:
            for answer in self._run(calls):
                sent = self._responses(requests, calls, answer)
                loop.call_soon_threadsafe(_send_all, requests, sent, False)
        except Exception as exc:
            error = exc if isinstance(exc, ServerError) else internal(_failure(exc))
            loop.call_soon_threadsafe(_fail_all, requests, self._version, error)
            return
        loop.call_soon_threadsafe(_send_all, requests, None, True)

    def _responses(
        self, requests: list[InferenceRequest], calls: list[Call], answer: Answer
    ) -> list[InferenceResponse]:
        if not isinstance(answer, list) or len(answer) != len(requests):
            count = len(answer) if isinstance(answer, list) else type(answer).__name__
            raise internal(
                f"Number of outputs returned by `{self._spec.name}` inference callable "
                f"({count}) does not match number of requests ({len(requests)})"
            )
        return [
            InferenceResponse(
                request.model_name,
                self._version,
                request.id,
                self._tensors(outputs, call[2]),
            )
            for request, call, outputs in zip(requests, calls, answer, strict=True)
        ]

    def _tensors(self, outputs: dict[str, np.ndarray], wanted: list[str] | None) -> list[Tensor]:
        tensors = []
        for name, io in self._spec.outputs.items():
            if (wanted is not None and name not in wanted) or name not in outputs:
                continue
            tensors.append(output_tensor(self._spec, name, _cast(outputs[name], io.datatype)))
        return tensors


def _call(request: InferenceRequest) -> Call:
    inputs = {tensor.name: tensor.data for tensor in request.inputs}
    wanted = [output.name for output in request.outputs] if request.outputs else None
    return inputs, dict(request.parameters), wanted


def _cast(array: np.ndarray, datatype: DataType) -> np.ndarray:
    """An output as its configured type (PyTriton casts to the config's dtype); strings as
    the object array of bytes that BYTES tensors hold."""
    if datatype is DataType.BYTES:
        if array.dtype == object:
            return array
        flat = [v if isinstance(v, bytes) else str(v).encode() for v in array.reshape(-1)]
        out = np.empty(len(flat), dtype=object)
        out[:] = flat
        return out.reshape(array.shape)
    if array.dtype != datatype.dtype:
        return array.astype(datatype.dtype)
    return array


def _failure(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _send_all(
    requests: list[InferenceRequest], responses: list[InferenceResponse] | None, final: bool
) -> None:
    for i, request in enumerate(requests):
        assert request.sender is not None
        request.sender.send(None if responses is None else responses[i], final)


def _fail_all(requests: list[InferenceRequest], version: str, error: Exception) -> None:
    for request in requests:
        send_error(request, version, error)
