"""Server side of the Python backend: one stub process per instance, spoken to over a socket."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Any

import orjson
from google.protobuf import json_format

from ...errors import ErrorKind, ServerError, internal, unavailable
from ...repository.config import ModelConfig, config_to_json
from ...repository.spec import ModelSpec
from ...types import InferenceRequest, InferenceResponse
from ..base import LoadContext, ModelInstance, output_tensor, requested_names, send_error
from . import ipc

# pb_utils.TritonError codes → error kinds (Triton's TRITONSERVER_Error_Code order).
_CODE_TO_KIND = [
    ErrorKind.UNKNOWN,
    ErrorKind.INTERNAL,
    ErrorKind.NOT_FOUND,
    ErrorKind.INVALID_ARG,
    ErrorKind.UNAVAILABLE,
    ErrorKind.UNSUPPORTED,
    ErrorKind.ALREADY_EXISTS,
    ErrorKind.CANCELLED,
]
_START_TIMEOUT_S = 60.0


class StubProcess(asyncio.Protocol):
    """One stub process and the framed socket to it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._reader = ipc.FrameReader()
        self._transport: asyncio.Transport | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._call_lock = asyncio.Lock()
        self._reply: asyncio.Future[tuple[bool, Any]] | None = None
        self.on_batch_done: Any = None  # set by PythonInstance
        self.on_response: Any = None
        self.on_death: Any = None
        self.alive = False

    async def start(self) -> None:
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "tritium.backends.python.stub", str(child.fileno())],
                pass_fds=(child.fileno(),),
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        finally:
            child.close()
        loop = asyncio.get_running_loop()
        await loop.create_unix_connection(lambda: self, sock=parent)
        self.alive = True

    # asyncio.Protocol ------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        for kind, body, buffers in self._reader.feed(data):
            if kind == ipc.EXEC_DONE:
                for entry in body:
                    self.on_batch_done(entry, buffers)
            elif kind == ipc.RESPONSE:
                self.on_response(body, buffers)
            elif kind == ipc.REPLY and self._reply is not None and not self._reply.done():
                self._reply.set_result(body)

    def connection_lost(self, exc: Exception | None) -> None:
        was_alive, self.alive = self.alive, False
        reason = f"Stub process '{self.name}' is not healthy."
        if self._reply is not None and not self._reply.done():
            self._reply.set_result(
                (False, f"stub process '{self.name}' exited: {self.exit_status()}")
            )
        if was_alive and self.on_death is not None:
            self.on_death(reason, self.exit_status())

    def exit_status(self) -> str:
        if self._proc is None:
            return "not started"
        try:
            code = self._proc.wait(timeout=0.2)
        except subprocess.TimeoutExpired:
            return "still running"
        if code < 0:
            try:
                return f"killed by signal {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        return f"exit code {code}"

    # calls -----------------------------------------------------------------------------------
    def send(self, kind: int, body: Any, buffers: ipc.Buffers | None = None) -> None:
        assert self._transport is not None
        parts = ipc.join(ipc.encode(kind, body, buffers))
        if len(parts) == 1:
            self._transport.write(parts[0])
        else:
            self._transport.writelines(parts)

    async def call(self, kind: int, body: Any, timeout: float | None = None) -> Any:
        """A request/reply exchange (autocomplete, init, is_ready, finalize)."""
        async with self._call_lock:
            if not self.alive:
                raise unavailable(f"Stub process '{self.name}' is not healthy.")
            self._reply = asyncio.get_running_loop().create_future()
            self.send(kind, body)
            ok, value = await asyncio.wait_for(self._reply, timeout)
            if not ok:
                raise internal(str(value))
            return value

    async def stop(self, timeout: float = 5.0) -> None:
        if self.alive:
            self.alive = False  # a clean exit is not a death
            try:
                async with self._call_lock:
                    self._reply = asyncio.get_running_loop().create_future()
                    self.send(ipc.FINALIZE, None)
                    await asyncio.wait_for(self._reply, timeout)
            except (TimeoutError, ServerError, OSError):
                pass
        if self._transport is not None:
            self._transport.close()
        if self._proc is not None and self._proc.poll() is None:
            try:  # the stub exits by itself once finalize returned and the socket closed
                await asyncio.to_thread(self._proc.wait, timeout)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                await asyncio.to_thread(self._proc.wait)


class PythonInstance:
    """A ModelInstance backed by a stub process."""

    def __init__(self, spec: ModelSpec, version: int, name: str, stub: StubProcess) -> None:
        self.name = name
        self._spec = spec
        self._version = str(version)
        self._stub = stub
        self._batches: dict[
            int, tuple[asyncio.Future[None], list[InferenceRequest], list[bool]]
        ] = {}
        self._ids = itertools.count()
        self._sent_ns = 0  # when the last EXECUTE frame left (statistics: compute_infer)
        self._input_ns = 0
        stub.on_batch_done = self._batch_done
        stub.on_response = self._response

    async def execute(self, requests: list[InferenceRequest]) -> None:
        await self._send_executions([requests])

    async def execute_each(self, requests: list[InferenceRequest]) -> None:
        """One ``execute`` call per request, all sent in one frame and answered in one."""
        await self._send_executions([[r] for r in requests])

    async def _send_executions(self, batches: list[list[InferenceRequest]]) -> None:
        if not self._stub.alive:
            error = internal(
                f"Failed to process the request(s) for model instance '{self.name}', "
                f"message: Stub process '{self.name}' is not healthy."
            )
            for batch in batches:
                for request in batch:
                    send_error(request, self._version, error)
            return
        loop = asyncio.get_running_loop()
        buffers: ipc.Buffers = []
        executions = []
        futures = []
        started = time.perf_counter_ns()
        for requests in batches:
            batch_id = next(self._ids)
            future = loop.create_future()
            self._batches[batch_id] = (future, requests, [False] * len(requests))
            executions.append((batch_id, [self._wire(r, buffers) for r in requests]))
            futures.append(future)
            for index, request in enumerate(requests):
                request.on_cancel = self._canceller(batch_id, index)
        self._stub.send(ipc.EXECUTE, executions, buffers)
        self._sent_ns = time.perf_counter_ns()
        self._input_ns = (self._sent_ns - started) // len(batches)
        for future in futures:
            await future

    def _wire(self, request: InferenceRequest, buffers: ipc.Buffers) -> tuple:
        params = orjson.dumps(request.parameters).decode() if request.parameters else "{}"
        return (
            request.id,
            request.correlation_id,
            request.flags,
            [(t.name, ipc.pack_array(t.data, buffers)) for t in request.inputs],
            requested_names(self._spec, request),
            params,
        )

    def _canceller(self, batch_id: int, index: int) -> Any:
        def cancel() -> None:
            if self._stub.alive and batch_id in self._batches:
                self._stub.send(ipc.CANCEL, (batch_id, index))

        return cancel

    def _make_response(
        self, request: InferenceRequest, payload: tuple | None, buffers: ipc.Buffers
    ) -> InferenceResponse:
        response = InferenceResponse(request.model_name, self._version, request.id)
        if payload is None:
            response.error = internal(
                f"Failed to process the request(s) for model instance '{self.name}', "
                "message: the model returned no response for the request"
            )
            return response
        tensors, message, extra = payload
        if message is not None:
            kind = (
                _CODE_TO_KIND[extra] if isinstance(extra, int) and extra < 8 else ErrorKind.INTERNAL
            )
            response.error = ServerError(kind, message)
            return response
        wanted = set(requested_names(self._spec, request))
        try:
            response.outputs = [
                output_tensor(self._spec, n, ipc.unpack_array(t, buffers))
                for n, t in tensors
                if n in wanted
            ]
        except ServerError as exc:
            response.error = exc
        if extra:
            response.parameters = json.loads(extra)
        return response

    def _batch_done(self, body: tuple, buffers: ipc.Buffers) -> None:
        """``execute`` returned. Its requests are answered now, except a decoupled model's,
        whose responses may keep coming from the model's threads until each one's final flag;
        the batch stays routable until then."""
        batch_id, error, wired = body
        future, requests, finished = self._batches[batch_id]
        arrived = time.perf_counter_ns()
        infer_ns = arrived - self._sent_ns
        self._sent_ns = arrived  # the next execution of a group ran after this one
        if error is not None:
            failure = internal(
                f"Failed to process the request(s) for model instance '{self.name}', "
                f"message: {error}"
            )
            self._answer_unfinished(
                requests, finished, lambda r: send_error(r, self._version, failure)
            )
        elif wired is not None:
            self._answer_each(requests, wired, buffers, infer_ns)
            finished[:] = [True] * len(requests)
        elif not self._spec.decoupled:  # execute returned None: senders must have answered
            self._answer_unfinished(
                requests,
                finished,
                lambda r: r.sender.send(self._make_response(r, None, buffers), True),
            )
        for request in requests:  # decoupled requests still answering, failed ones
            if request.timing is None:
                request.timing = (self._input_ns, infer_ns, 0)
        if all(finished):
            del self._batches[batch_id]
        if not future.done():
            future.set_result(None)

    def _answer_each(
        self, requests: list[InferenceRequest], wired: list, buffers: ipc.Buffers, infer_ns: int
    ) -> None:
        for request, payload in zip(requests, wired, strict=True):
            began = time.perf_counter_ns()
            response = self._make_response(request, payload, buffers)
            request.timing = (self._input_ns, infer_ns, time.perf_counter_ns() - began)
            assert request.sender is not None
            request.sender.send(response, True)

    @staticmethod
    def _answer_unfinished(
        requests: list[InferenceRequest], finished: list[bool], answer: Any
    ) -> None:
        for i, request in enumerate(requests):
            if not finished[i]:
                finished[i] = True
                answer(request)

    def _response(self, body: tuple, buffers: ipc.Buffers) -> None:
        batch_id, index, payload, final = body
        entry = self._batches.get(batch_id)
        if entry is None or entry[2][index]:
            return  # the request already completed (or failed): nothing more goes out
        future, requests, finished = entry
        request = requests[index]
        response = None if payload is None else self._make_response(request, payload, buffers)
        if final:
            finished[index] = True
            if future.done() and all(finished):
                del self._batches[batch_id]
        assert request.sender is not None
        request.sender.send(response, final)

    def fail_all(self, reason: str) -> None:
        error = internal(
            f"Failed to process the request(s) for model instance '{self.name}', message: {reason}"
        )
        for batch_id in list(self._batches):
            future, requests, finished = self._batches.pop(batch_id)
            for i, request in enumerate(requests):
                if not finished[i]:
                    send_error(request, self._version, error)
            if not future.done():
                future.set_result(None)

    async def is_ready(self) -> bool:
        if not self._stub.alive:
            return False
        try:
            return bool(await self._stub.call(ipc.IS_READY, None, timeout=5.0))
        except (TimeoutError, ServerError):
            return False

    async def close(self) -> None:
        await self._stub.stop()


class PythonBackend:
    async def load(self, ctx: LoadContext) -> tuple[ModelSpec, list[ModelInstance]]:
        path = ctx.model_file("model.py")
        if not path.is_file():
            raise internal(f"unable to find '{path.name}' in '{ctx.version_dir}'")
        stubs: list[StubProcess] = [StubProcess(f"{ctx.model_name}_0_0")]
        try:
            await stubs[0].start()
            config = ctx.config
            if ctx.auto_complete:
                completed = await stubs[0].call(
                    ipc.AUTOCOMPLETE,
                    {"path": str(path), "config": config_to_json(config)},
                    timeout=_START_TIMEOUT_S,
                )
                if completed is not None:
                    config = json_format.ParseDict(completed, ModelConfig())
            spec = ctx.finalize(config)
            names = [
                f"{group.name}_{i}"
                for group in spec.config.instance_group
                for i in range(group.count)
            ]
            stubs[0].name = names[0]
            for name in names[1:]:
                stubs.append(StubProcess(name))
            await asyncio.gather(*(s.start() for s in stubs[1:]))
            await asyncio.gather(*(self._init(ctx, spec, s, path) for s in stubs))
        except BaseException:
            await asyncio.gather(*(s.stop(timeout=1.0) for s in stubs), return_exceptions=True)
            raise
        instances = [PythonInstance(spec, ctx.version, s.name, s) for s in stubs]
        for instance, stub in zip(instances, stubs, strict=True):
            stub.on_death = _death_handler(ctx, instance)
        return spec, list(instances)

    async def _init(self, ctx: LoadContext, spec: ModelSpec, stub: StubProcess, path: Any) -> None:
        args = {
            "model_config": json.dumps(spec.config_json),
            "model_instance_kind": "CPU",
            "model_instance_name": stub.name,
            "model_instance_device_id": "0",
            "model_repository": str(ctx.model_dir),
            "model_version": str(ctx.version),
            "model_name": ctx.model_name,
        }
        await stub.call(ipc.INIT, {"path": str(path), "args": args}, timeout=_START_TIMEOUT_S)


def _death_handler(ctx: LoadContext, instance: PythonInstance) -> Any:
    def on_death(reason: str, status: str) -> None:
        instance.fail_all(reason)
        ctx.on_failure(f"stub process of instance '{instance.name}' died ({status})")

    return on_death
