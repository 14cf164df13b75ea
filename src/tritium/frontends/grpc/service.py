"""inference.GRPCInferenceService: one thin method per RPC (decode → server call → encode),
and the method table the transport dispatches on (with grpc.health.v1.Health, ``health.py``).

The table is built from the services' descriptors, so every RPC of the service definition is
there: an RPC tritium does not serve answers UNIMPLEMENTED with its name. ModelInfer and
ModelStreamInfer take their request bytes undecoded: ``wire`` parses them, so that a message
protobuf refuses is answered INVALID_ARGUMENT with a clear message and a large one is parsed
in short steps off the event loop.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from google.protobuf import json_format
from grpc_health.v1 import health_pb2
from tritonclient.grpc import service_pb2 as pb

from ...errors import invalid_arg, unsupported
from ...server import (
    AccessEntry,
    AccessLog,
    FinalAnswer,
    InferenceRequest,
    InferenceServer,
    ResponseSender,
    Trace,
    check_load_keys,
    grpc_update,
)
from ...types import ClientRequest, InferenceResponse
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
from .traces import sample

__all__ = ["MAX_WATCHES", "MAX_WATCHES_PER_CONNECTION", "HealthService", "InferenceService"]

_DECOUPLED = "ModelInfer RPC doesn't support models with decoupled transaction policy"
_NOT_YET: frozenset[str] = frozenset()
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
    def __init__(self, server: InferenceServer) -> None:
        self._server = server
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
        access_log = self._server.access_log
        if access_log is None:
            return await self._model_infer(request, call)
        entry = _entry(call, len(request))
        try:
            answer = await self._model_infer(request, call, entry)
        except BaseException as exc:  # the dispatcher answers it: the same code
            code = StatusCode.CANCELLED if isinstance(exc, asyncio.CancelledError) else code_of(exc)
            _logged(access_log, entry, code)
            raise
        entry.bytes_out = len(answer)
        _logged(access_log, entry, StatusCode.OK)
        return answer

    async def _model_infer(
        self, request: bytes, call: ServerCall, access: AccessEntry | None = None
    ) -> bytes | Pieces:
        forwarded = self.forwarded(call)
        began = time.perf_counter_ns() if self._server.tracer.active else 0
        _, inference = await decode_off_loop(len(request), decode_message, request, forwarded)
        if access is not None:
            _asked(access, inference)
        trace = sample(self._server, inference, call, began) if began else None
        try:
            response = await self._server.infer(inference, _DECOUPLED, trace, access)
            if trace is None:
                return encode_answer(response)
            # On this path the transport writes the answer: SEND_* frame its encoding.
            trace.stamp("INFER_RESPONSE_COMPLETE", time.perf_counter_ns())
            trace.stamp("GRPC_SEND_START", time.perf_counter_ns())
            answer = encode_answer(response)
            trace.stamp("GRPC_SEND_END", time.perf_counter_ns())
            return answer
        finally:
            if trace is not None:
                trace.end()

    def model_infer_now(self, raw: bytes, call: ServerCall) -> bool:
        """ModelInfer without a task: decode here, submit, answer from the response
        callback. Only for small messages (a large one is decoded off the loop)."""
        if len(raw) >= OFFLOAD_BYTES:
            return False
        server = self._server
        began = time.perf_counter_ns() if server.tracer.active else 0
        trace = None
        access_log = server.access_log
        entry = None if access_log is None else _entry(call, len(raw))
        try:
            client = decode_infer(raw, self.forwarded(call))
            if began:
                trace = sample(server, client, call, began)
            if entry is not None:
                _asked(entry, client)
            request = server.request(client, None, trace, entry)
            if request.decoupled:
                raise unsupported(_DECOUPLED)
            answer = _UnaryAnswer(call, request, trace)
            if entry is not None and access_log is not None:
                answer.access = (access_log, entry)
            server.submit(request, ResponseSender(answer))
        except Exception as exc:
            if trace is not None:
                trace.end()
            code, message = status_of(exc)
            call.finish(code, message)
            if entry is not None and access_log is not None:
                _logged(access_log, entry, code)
        return True

    async def ModelStreamInfer(self, call: ServerCall) -> None:
        limit = self._server.options.grpc.stream_inflight
        await stream_infer(self._server, call, limit, self.forwarded(call))


def _entry(call: ServerCall, bytes_in: int) -> AccessEntry:
    """A ModelInfer call's access-log line (who the access guard admitted, if one did)."""
    guard = call.guard
    if guard is None:
        return AccessEntry.begin("grpc", call.peer, bytes_in)
    return AccessEntry.begin("grpc", call.peer, bytes_in, guard.identity, guard.key)


def _asked(entry: AccessEntry, client: ClientRequest) -> None:
    """The model and version the request names (until the server resolves them)."""
    entry.model, entry.request_id = client.model_name, client.id
    entry.version = str(client.model_version) if client.model_version > 0 else ""


def _logged(access_log: AccessLog, entry: AccessEntry, code: StatusCode) -> None:
    entry.outcome(triton_status(code), int(code))
    entry.ended()
    access_log.put(entry)


class _UnaryAnswer(FinalAnswer):
    """The response callback of a fast-path ModelInfer: writes the answer and its status
    (stamping INFER_RESPONSE_COMPLETE and GRPC_SEND_* when traced); a cancelled call
    (reset, deadline, connection lost) cancels the request. ``access``: its access-log line,
    put once the answer or the error status is written."""

    __slots__ = ("_call", "_trace", "access")

    def __init__(
        self, call: ServerCall, request: InferenceRequest, trace: Trace | None = None
    ) -> None:
        self.request = request
        self._call = call
        self._trace = trace
        self.access: tuple[AccessLog, AccessEntry] | None = None
        call.on_cancel = request.cancel

    def answer(self, response: InferenceResponse) -> None:
        trace = self._trace
        self._call.on_cancel = None
        if trace is not None:
            trace.stamp("INFER_RESPONSE_COMPLETE", time.perf_counter_ns())
        if response.error is not None:
            code = self._fail(response.error)
        else:
            if trace is not None:
                trace.stamp("GRPC_SEND_START", time.perf_counter_ns())
            code = self._write(response)
            if trace is not None:
                trace.stamp("GRPC_SEND_END", time.perf_counter_ns())
        if trace is not None:
            trace.end()
        if self.access is not None:
            _logged(*self.access, code)

    def _fail(self, error: Exception) -> StatusCode:
        code, message = status_of(error)
        self._call.finish(code, message)
        return code

    def _write(self, response: InferenceResponse) -> StatusCode:
        try:
            answer = encode_answer(response)
            self._call.answer(answer)
        except Exception as exc:
            return self._fail(exc)
        if self.access is not None:
            self.access[1].bytes_out = len(answer)
        return StatusCode.OK


def _unimplemented(name: str) -> Any:
    async def method(request: Any, call: ServerCall) -> Any:
        raise RpcError(StatusCode.UNIMPLEMENTED, f"{name} is not implemented by tritium yet")

    return method


def _table(prefix: str, descriptor: Any, module: Any, servicer: Any) -> dict[str, Method]:
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
        methods[prefix + name] = Method(
            kind,
            handler,
            _raw if raw else request_type.FromString,
            infer=raw,
            fast=fast,
        )
    return methods


def method_table(server: InferenceServer) -> dict[str, Method]:
    """Every RPC of both services by its path."""
    inference = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    health = health_pb2.DESCRIPTOR.services_by_name["Health"]
    return {
        **_table(SERVICE, inference, pb, InferenceService(server)),
        **_table(HEALTH_SERVICE, health, health_pb2, HealthService(server)),
    }
