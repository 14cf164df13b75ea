"""inference.GRPCInferenceService: one thin method per RPC (decode → server call → encode),
and the method table the transport dispatches on (with grpc.health.v1.Health, ``health.py``).

The table is built from the services' descriptors, so every RPC of the service definition is
there: an RPC tritium does not serve answers UNIMPLEMENTED with its name. ModelInfer and
ModelStreamInfer take their request bytes undecoded: ``wire`` parses them, so that a message
protobuf refuses is answered INVALID_ARGUMENT with a clear message and a large one is parsed
in short steps off the event loop.

``TRITONSERVER_SERVER_DELAY_GRPC_RESPONSE_SEC=N`` (Triton's testing hook, read at start by its
grpc_server.cc for its CommonHandler; qa/L0_client_timeout sets it): every answer of an RPC
other than ModelInfer and ModelStreamInfer, errors included, is written N seconds after the
RPC has run, so that a client's deadline expires. The wait is a timer (``asyncio.sleep``),
never a sleep on the loop: unlike Triton's one handler thread, calls are not serialized by it.
"""

from __future__ import annotations

import asyncio
import functools
import os
import time
from typing import Any, Final

from google.protobuf import json_format
from grpc_health.v1 import health_pb2
from tritonclient.grpc import service_pb2 as pb

from ...errors import invalid_arg
from ...api import Door, InferenceCall
from ...server import (
    FinalAnswer,
    InferenceRequest,
    InferenceServer,
    ResponseSender,
    check_load_keys,
    grpc_update,
)
from ...options import delay_count
from ...types import InferenceResponse
from ...transport.grpc.call import ServerCall
from ...transport.grpc.dispatch import Kind, Method
from ...transport.grpc.frames import Pieces
from ...transport.grpc.status import RpcError, StatusCode
from ..tensors import OFFLOAD_BYTES, decode_off_loop
from .codec import decode_infer, decode_message, encode_answer
from .errors import code_of, status_of, triton_status
from .guard import HEALTH_SERVICE, SERVICE
from .health import MAX_WATCHES, MAX_WATCHES_PER_CONNECTION, HealthService
from .metadata import compile_forward_pattern, forwarded_parameters
from .stream import stream_infer
from .traces import RECEIVED, SENT, asked_version, identity, sample

__all__ = ["MAX_WATCHES", "MAX_WATCHES_PER_CONNECTION", "HealthService", "InferenceService"]

_DECOUPLED = "ModelInfer RPC doesn't support models with decoupled transaction policy"
# gRPC ModelInfer's door of the inference call: its refusal of decoupled models, its stamps.
UNARY: Final = Door("grpc", _DECOUPLED, RECEIVED, SENT)
_NOT_YET: frozenset[str] = frozenset()
RESPONSE_DELAY_VARIABLE: Final = "TRITONSERVER_SERVER_DELAY_GRPC_RESPONSE_SEC"
_KINDS = {
    (False, False): Kind.UNARY,
    (False, True): Kind.SERVER_STREAM,
    (True, True): Kind.BIDI,
}


def _raw(data: bytes) -> bytes:
    return data


def _no_repository(request: Any) -> None:
    if request.repository_name:
        raise RpcError(StatusCode.UNIMPLEMENTED, "'repository_name' specification is not supported")


def _repository_value(param: Any) -> Any:
    which = param.WhichOneof("parameter_choice")
    return None if which is None else getattr(param, which)


def _load_value(key: str, param: Any, expected: str) -> Any:
    """A load parameter of the one kind Triton takes for ``key`` (grpc_server.cc: ``config``
    a string_param, a ``file:`` a bytes_param); any other is refused in Triton's words."""
    if param.WhichOneof("parameter_choice") != expected:
        raise invalid_arg(f"invalid value type for load parameter '{key}', expected {expected}.")
    return getattr(param, expected)


def _setting_value(param: Any) -> tuple[str | None, Any]:
    which = param.WhichOneof("parameter_choice")
    return which, None if which is None else getattr(param, which)


def _log_value(value: Any) -> Any:
    kind = pb.LogSettingsResponse.SettingValue
    if isinstance(value, bool):
        return kind(bool_param=value)
    if isinstance(value, int):
        return kind(uint32_param=value)
    return kind(string_param=value)


class InferenceService:
    def __init__(self, server: InferenceServer, pattern: str | None = None) -> None:
        self._server = server
        if pattern is None:
            pattern = server.options.grpc.header_forward_pattern
        self._forward = compile_forward_pattern(pattern)  # Triton's reading: see metadata

    def forwarded(self, call: ServerCall) -> dict[str, str] | None:
        if self._forward is None:
            return None
        return forwarded_parameters(self._forward, list(call.metadata.items())) or None

    async def ServerLive(self, request: Any, call: ServerCall) -> Any:
        return pb.ServerLiveResponse(live=self._server.is_live())

    async def ServerReady(self, request: Any, call: ServerCall) -> Any:
        return pb.ServerReadyResponse(ready=self._server.is_ready())

    async def ModelReady(self, request: Any, call: ServerCall) -> Any:
        ready = await self._server.model_ready(request.name, request.version)
        return pb.ModelReadyResponse(ready=ready)

    async def ServerMetadata(self, request: Any, call: ServerCall) -> Any:
        return pb.ServerMetadataResponse(**self._server.metadata())

    async def ModelMetadata(self, request: Any, call: ServerCall) -> Any:
        meta = self._server.model_metadata(request.name, request.version)
        tensor = pb.ModelMetadataResponse.TensorMetadata
        return pb.ModelMetadataResponse(
            name=meta["name"],
            versions=meta["versions"],
            platform=meta["platform"],
            inputs=[tensor(**t) for t in meta["inputs"]],
            outputs=[tensor(**t) for t in meta["outputs"]],
        )

    async def ModelConfig(self, request: Any, call: ServerCall) -> Any:
        config = self._server.model_config(request.name, request.version)
        return pb.ModelConfigResponse(config=config)

    async def ModelStatistics(self, request: Any, call: ServerCall) -> Any:
        stats = await self._server.statistics_total(request.name, request.version)
        return json_format.ParseDict(stats, pb.ModelStatisticsResponse())

    async def LogSettings(self, request: Any, call: ServerCall) -> Any:
        """The logging extension: read, or change then read (Triton's checks: grpc_update)."""
        settings = self._server.log_settings()
        if request.settings:
            sent = {k: _setting_value(v) for k, v in request.settings.items()}
            settings = await self._server.update_log_settings_total(grpc_update(sent))
        return pb.LogSettingsResponse(settings={k: _log_value(v) for k, v in settings.items()})

    async def SystemSharedMemoryStatus(self, request: Any, call: ServerCall) -> Any:
        regions = self._server.system_shm_status(request.name)
        status = pb.SystemSharedMemoryStatusResponse.RegionStatus
        return pb.SystemSharedMemoryStatusResponse(
            regions={r["name"]: status(**r) for r in regions}
        )

    async def SystemSharedMemoryRegister(self, request: Any, call: ServerCall) -> Any:
        await self._server.register_system_shm_total(
            request.name, request.key, request.offset, request.byte_size
        )
        return pb.SystemSharedMemoryRegisterResponse()

    async def SystemSharedMemoryUnregister(self, request: Any, call: ServerCall) -> Any:
        await self._server.unregister_system_shm_total(request.name)
        return pb.SystemSharedMemoryUnregisterResponse()

    async def CudaSharedMemoryStatus(self, request: Any, call: ServerCall) -> Any:
        self._server.cuda_shm_status(request.name)
        return pb.CudaSharedMemoryStatusResponse()

    async def CudaSharedMemoryRegister(self, request: Any, call: ServerCall) -> Any:
        self._server.register_cuda_shm(request.name)
        return pb.CudaSharedMemoryRegisterResponse()

    async def CudaSharedMemoryUnregister(self, request: Any, call: ServerCall) -> Any:
        self._server.unregister_cuda_shm(request.name)
        return pb.CudaSharedMemoryUnregisterResponse()

    async def RepositoryModelLoad(self, request: Any, call: ServerCall) -> Any:
        _no_repository(request)
        given = request.parameters
        check_load_keys(given)
        files = {
            k: _load_value(k, v, "bytes_param") for k, v in given.items() if k.startswith("file:")
        }
        config = (
            _load_value("config", given["config"], "string_param") if "config" in given else None
        )
        await self._server.load_model(request.model_name, config, files)
        return pb.RepositoryModelLoadResponse()

    async def RepositoryModelUnload(self, request: Any, call: ServerCall) -> Any:
        _no_repository(request)
        dependents = request.parameters.get("unload_dependents")
        await self._server.unload_model(
            request.model_name,
            dependents is not None and _repository_value(dependents) is True,
        )
        return pb.RepositoryModelUnloadResponse()

    async def RepositoryIndex(self, request: Any, call: ServerCall) -> Any:
        _no_repository(request)
        rows = self._server.repository_index(request.ready)
        return pb.RepositoryIndexResponse(
            models=[pb.RepositoryIndexResponse.ModelIndex(**row) for row in rows]
        )

    async def TraceSetting(self, request: Any, call: ServerCall) -> Any:
        """The trace extension: an empty value list clears a model's own value."""
        update = {k: list(v.value) or None for k, v in request.settings.items()}
        shown = await self._server.trace_setting_total(request.model_name, update or None)
        value = pb.TraceSettingResponse.SettingValue
        return pb.TraceSettingResponse(settings={k: value(value=v) for k, v in shown.items()})

    async def ModelInfer(self, request: bytes, call: ServerCall) -> Any:
        """ModelInfer in its task (a large, traced or access-logged request): the call's
        access-log line gets the status code the dispatcher answers."""
        began = time.perf_counter_ns()
        inference_call = self._server.inference.call(UNARY, call.peer, len(request), identity(call))
        try:
            answer = await self._model_infer(request, call, inference_call, began)
        except BaseException as exc:  # the dispatcher answers it: the same code
            code = StatusCode.CANCELLED if isinstance(exc, asyncio.CancelledError) else code_of(exc)
            inference_call.failed(triton_status(code), int(code))
            raise
        inference_call.count(len(answer))
        inference_call.outcome(triton_status(StatusCode.OK), int(StatusCode.OK))
        inference_call.logged()
        return answer

    async def _model_infer(
        self, request: bytes, call: ServerCall, inference_call: InferenceCall, began: int
    ) -> bytes | Pieces:
        forwarded = self.forwarded(call)
        _, client = await decode_off_loop(len(request), decode_message, request, forwarded)
        inference_call.asked(client.model_name, asked_version(client), client.id)
        sample(inference_call, client, call, began)
        response = await self._server.inference.infer(client, inference_call)
        # On this path the transport writes the answer: SEND_* frame its encoding.
        inference_call.responded()
        start = inference_call.clock()
        answer = encode_answer(response)
        inference_call.sent(start, inference_call.clock())
        return answer

    def model_infer_now(self, raw: bytes, call: ServerCall) -> bool:
        """ModelInfer without a task: decode here, submit, answer from the response
        callback. Only for small messages (a large one is decoded off the loop) the
        inference call may start inline (neither traced nor access-logged)."""
        inference = self._server.inference
        if len(raw) >= OFFLOAD_BYTES or not inference.inline():
            return False
        try:
            client = decode_infer(raw, self.forwarded(call))
            request = inference.prepare(client, UNARY)
            inference.submit(request, ResponseSender(_UnaryAnswer(call, request)))
        except Exception as exc:
            code, message = status_of(exc)
            call.finish(code, message)
        return True

    async def ModelStreamInfer(self, call: ServerCall) -> None:
        limit = self._server.options.grpc.stream_inflight
        await stream_infer(self._server, call, limit, self.forwarded(call))


class _UnaryAnswer(FinalAnswer):
    """The response callback of a fast-path ModelInfer: writes the answer and its status; a
    cancelled call (reset, deadline, connection lost) cancels the request."""

    __slots__ = ("_call",)

    def __init__(self, call: ServerCall, request: InferenceRequest) -> None:
        self.request = request
        self._call = call
        call.on_cancel = request.cancel

    def answer(self, response: InferenceResponse) -> None:
        self._call.on_cancel = None
        if response.error is not None:
            self._fail(response.error)
            return
        try:
            self._call.answer(encode_answer(response))
        except Exception as exc:
            self._fail(exc)

    def _fail(self, error: Exception) -> None:
        code, message = status_of(error)
        self._call.finish(code, message)


def _unimplemented(name: str) -> Any:
    async def method(request: Any, call: ServerCall) -> Any:
        raise RpcError(StatusCode.UNIMPLEMENTED, f"{name} is not implemented by tritium yet")

    return method


async def _delayed(handler: Any, seconds: int, request: Any, call: ServerCall) -> Any:
    """``handler``'s answer (or error), written ``seconds`` after it ran (the testing hook)."""
    try:
        answer = await handler(request, call)
    except Exception:
        await asyncio.sleep(seconds)
        raise
    await asyncio.sleep(seconds)
    return answer


def _table(
    prefix: str, descriptor: Any, module: Any, servicer: Any, delay: int = 0
) -> dict[str, Method]:
    methods = {}
    for method in descriptor.methods:
        name = method.name
        kind = _KINDS[method.client_streaming, method.server_streaming]
        request_type = getattr(module, method.input_type.name)
        raw = name in ("ModelInfer", "ModelStreamInfer")
        handler = getattr(servicer, name, None)
        if handler is None or name in _NOT_YET:
            handler = _unimplemented(name)
        fast = servicer.model_infer_now if name == "ModelInfer" else None
        if delay and not raw and kind is Kind.UNARY:
            handler = functools.partial(_delayed, handler, delay)
        methods[prefix + name] = Method(
            kind,
            handler,
            _raw if raw else request_type.FromString,
            infer=raw,
            fast=fast,
        )
    return methods


def method_table(server: InferenceServer, pattern: str | None = None) -> dict[str, Method]:
    """Every RPC of both services by its path (``pattern``: the header forward pattern, when
    not the server's)."""
    inference = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    health = health_pb2.DESCRIPTOR.services_by_name["Health"]
    delay = delay_count(os.environ.get(RESPONSE_DELAY_VARIABLE))
    return {
        **_table(SERVICE, inference, pb, InferenceService(server, pattern), delay),
        **_table(HEALTH_SERVICE, health, health_pb2, HealthService(server), delay),
    }
