"""LEGACY (issue 12, removed once the h2 transport passes everything): grpcio's grpc.aio
server, kept selectable (--grpc-transport=grpcio) for the side-by-side benchmark only.

inference.GRPCInferenceService: one thin method per RPC (decode → server call → encode).

grpc.aio on the server's one event loop (uvloop), so a call never changes threads. Measured
here with tritonclient's asyncio client at concurrency 16, `simple`: 3,200 infer/s on
grpc.aio against 1,800 for grpcio's synchronous server, whose thread-pool handlers must hop
onto the loop and back (two GIL hand-overs per call)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from google.protobuf import json_format
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from ...access import AccessControl
from ...errors import ServerError
from ...options import ServerOptions
from ...server import InferenceServer
from ..tensors import decode_off_loop
from .grpcio_access import AccessInterceptor
from .codec import decode_message, encode_response
from .errors import CODE, status_message
from .stream import model_stream_infer  # noqa: F401 (legacy)

log = logging.getLogger("tritium")

_DECOUPLED = "ModelInfer RPC doesn't support models with decoupled transaction policy"
_NOT_YET = (
    "TraceSetting",
    "LogSettings",
)


def _mapped(method: Callable[[Any, Any], Awaitable[Any]]) -> Callable[[Any, Any], Awaitable[Any]]:
    """The one place a unary RPC's error becomes a gRPC status: a ServerError by its kind
    (``errors.CODE``), anything else INTERNAL (a bug, logged); the server goes on."""

    async def call(request: Any, context: Any) -> Any:
        try:
            return await method(request, context)
        except ServerError as exc:
            await context.abort(grpc.StatusCode[CODE[exc.kind].name], status_message(exc.message))
        except grpc.aio.AbortError:
            raise
        except Exception as exc:
            log.exception("unhandled error in gRPC handler")
            await context.abort(
                grpc.StatusCode.INTERNAL, status_message(f"{type(exc).__name__}: {exc}")
            )

    return call


# tritonclient's generated servicer is untyped (Any); it is kept as the base for the UNIMPLEMENTED
# answer it gives any RPC a newer service definition adds.
class InferenceService(service_pb2_grpc.GRPCInferenceServiceServicer):  # type: ignore[misc]
    def __init__(self, server: InferenceServer) -> None:
        self._server = server

    async def ServerLive(self, request: Any, context: Any) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=self._server.is_live())

    async def ServerReady(self, request: Any, context: Any) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=self._server.is_ready())

    async def ModelReady(self, request: Any, context: Any) -> pb.ModelReadyResponse:
        ready = await self._server.model_ready(request.name, request.version)
        return pb.ModelReadyResponse(ready=ready)

    async def ServerMetadata(self, request: Any, context: Any) -> pb.ServerMetadataResponse:
        return pb.ServerMetadataResponse(**self._server.metadata())

    async def ModelMetadata(self, request: Any, context: Any) -> pb.ModelMetadataResponse:
        meta = self._server.model_metadata(request.name, request.version)
        return pb.ModelMetadataResponse(
            name=meta["name"],
            versions=meta["versions"],
            platform=meta["platform"],
            inputs=[pb.ModelMetadataResponse.TensorMetadata(**t) for t in meta["inputs"]],
            outputs=[pb.ModelMetadataResponse.TensorMetadata(**t) for t in meta["outputs"]],
        )

    async def ModelConfig(self, request: Any, context: Any) -> pb.ModelConfigResponse:
        config = self._server.model_config(request.name, request.version)
        return pb.ModelConfigResponse(config=config)

    async def ModelStatistics(self, request: Any, context: Any) -> pb.ModelStatisticsResponse:
        stats = self._server.statistics(request.name, request.version)
        return json_format.ParseDict(stats, pb.ModelStatisticsResponse())

    async def SystemSharedMemoryStatus(self, request: Any, context: Any) -> Any:
        regions = self._server.system_shm_status(request.name)
        status = pb.SystemSharedMemoryStatusResponse.RegionStatus
        return pb.SystemSharedMemoryStatusResponse(
            regions={r["name"]: status(**r) for r in regions}
        )

    async def SystemSharedMemoryRegister(self, request: Any, context: Any) -> Any:
        self._server.register_system_shm(
            request.name, request.key, request.offset, request.byte_size
        )
        return pb.SystemSharedMemoryRegisterResponse()

    async def SystemSharedMemoryUnregister(self, request: Any, context: Any) -> Any:
        self._server.unregister_system_shm(request.name)
        return pb.SystemSharedMemoryUnregisterResponse()

    async def CudaSharedMemoryStatus(self, request: Any, context: Any) -> Any:
        self._server.cuda_shm_status(request.name)
        return pb.CudaSharedMemoryStatusResponse()

    async def CudaSharedMemoryRegister(self, request: Any, context: Any) -> Any:
        self._server.register_cuda_shm(request.name)
        return pb.CudaSharedMemoryRegisterResponse()

    async def CudaSharedMemoryUnregister(self, request: Any, context: Any) -> Any:
        self._server.unregister_cuda_shm(request.name)
        return pb.CudaSharedMemoryUnregisterResponse()

    async def RepositoryModelLoad(self, request: Any, context: Any) -> Any:
        if request.repository_name:
            return await context.abort(
                grpc.StatusCode.UNIMPLEMENTED, "'repository_name' specification is not supported"
            )
        params = {k: _repository_value(v) for k, v in request.parameters.items()}
        files = {k: v for k, v in params.items() if k.startswith("file:")}
        config = params.get("config")
        await self._server.load_model(
            request.model_name, None if config is None else str(config), files
        )
        return pb.RepositoryModelLoadResponse()

    async def RepositoryModelUnload(self, request: Any, context: Any) -> Any:
        if request.repository_name:
            return await context.abort(
                grpc.StatusCode.UNIMPLEMENTED, "'repository_name' specification is not supported"
            )
        dependents = request.parameters.get("unload_dependents")
        await self._server.unload_model(
            request.model_name,
            dependents is not None and _repository_value(dependents) is True,
        )
        return pb.RepositoryModelUnloadResponse()

    async def RepositoryIndex(self, request: Any, context: Any) -> pb.RepositoryIndexResponse:
        if request.repository_name:
            return await context.abort(
                grpc.StatusCode.UNIMPLEMENTED,
                "'repository_name' specification is not supported",
            )
        rows = self._server.repository_index(request.ready)
        return pb.RepositoryIndexResponse(
            models=[pb.RepositoryIndexResponse.ModelIndex(**row) for row in rows]
        )

    async def ModelInfer(self, request: bytes, context: Any) -> pb.ModelInferResponse:
        _, inference = await decode_off_loop(len(request), decode_message, request)
        response = await self._server.infer(inference, _DECOUPLED)
        return encode_response(response)

    async def ModelStreamInfer(self, request_iterator: Any, context: Any) -> Any:
        limit = self._server.options.grpc_stream_inflight
        async for message in model_stream_infer(self._server, request_iterator, context, limit):
            yield message


def _repository_value(param: Any) -> Any:
    which = param.WhichOneof("parameter_choice")
    return None if which is None else getattr(param, which)


def _not_implemented(name: str) -> Any:
    async def method(self: Any, request: Any, context: Any) -> Any:
        await context.abort(
            grpc.StatusCode.UNIMPLEMENTED, f"{name} is not implemented by tritium yet"
        )

    method.__name__ = name
    return method


for _name in _NOT_YET:
    setattr(InferenceService, _name, _not_implemented(_name))


class HealthService(health_pb2_grpc.HealthServicer):
    """grpc.health.v1: SERVING when the server is ready."""

    def __init__(self, server: InferenceServer) -> None:
        self._server = server

    async def Check(self, request: Any, context: Any) -> health_pb2.HealthCheckResponse:
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if self._server.is_ready()
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        return health_pb2.HealthCheckResponse(status=status)


def channel_options(options: ServerOptions) -> list[tuple[str, int]]:
    """grpc core arguments from the server options (Triton's flags and defaults). A received
    message is bounded by ``--http-max-input-size`` (Triton sets no cap): grpc core checks the
    bound after ``grpc-encoding`` decompression too, answering RESOURCE_EXHAUSTED."""
    result = [
        ("grpc.max_send_message_length", -1),
        ("grpc.max_receive_message_length", options.http_max_input_size),
        ("grpc.keepalive_time_ms", options.grpc_keepalive_time_ms),
        ("grpc.keepalive_timeout_ms", options.grpc_keepalive_timeout_ms),
        ("grpc.keepalive_permit_without_calls", int(options.grpc_keepalive_permit_without_calls)),
        ("grpc.http2.max_pings_without_data", options.grpc_http2_max_pings_without_data),
        (
            "grpc.http2.min_ping_interval_without_data_ms",
            options.grpc_http2_min_recv_ping_interval_without_data_ms,
        ),
        ("grpc.http2.max_ping_strikes", options.grpc_http2_max_ping_strikes),
        ("grpc.so_reuseport", 0),
    ]
    if options.grpc_max_concurrent_streams > 0:
        result.append(("grpc.max_concurrent_streams", options.grpc_max_concurrent_streams))
    return result


_SERVICE = "inference.GRPCInferenceService"
_RAW_REQUESTS = ("ModelInfer", "ModelStreamInfer")
_MAKERS = {
    (False, False): grpc.unary_unary_rpc_method_handler,
    (False, True): grpc.unary_stream_rpc_method_handler,
    (True, False): grpc.stream_unary_rpc_method_handler,
    (True, True): grpc.stream_stream_rpc_method_handler,
}


def _inference_handlers(servicer: InferenceService) -> dict[str, grpc.RpcMethodHandler[Any, Any]]:
    """The generated service's handlers, except that ModelInfer and ModelStreamInfer get their
    request bytes undecoded: ``wire`` parses them, so a message protobuf refuses is answered
    INVALID_ARGUMENT with a clear message (grpcio answers UNKNOWN "Unexpected <class
    DecodeError>") and a large one is parsed in short steps off the event loop."""
    handlers = {}
    for method in pb.DESCRIPTOR.services_by_name["GRPCInferenceService"].methods:
        request = getattr(pb, method.input_type.name)
        response = getattr(pb, method.output_type.name)
        make = _MAKERS[method.client_streaming, method.server_streaming]
        behaviour = getattr(servicer, method.name)
        if not method.server_streaming:
            behaviour = _mapped(behaviour)
        handlers[method.name] = make(
            behaviour,
            request_deserializer=None if method.name in _RAW_REQUESTS else request.FromString,
            response_serializer=response.SerializeToString,
        )
    return handlers


def build_grpc_server(
    server: InferenceServer, access: AccessControl | None = None
) -> grpc.aio.Server:
    interceptors = []
    if access is not None and access.guards_grpc:
        interceptors.append(AccessInterceptor(access))  # only then: it costs every call
    grpc_server = grpc.aio.server(
        options=channel_options(server.options), interceptors=interceptors
    )
    handlers = _inference_handlers(InferenceService(server))
    generic = grpc.method_handlers_generic_handler(_SERVICE, handlers)
    grpc_server.add_generic_rpc_handlers((generic,))
    grpc_server.add_registered_method_handlers(_SERVICE, handlers)
    health_pb2_grpc.add_HealthServicer_to_server(HealthService(server), grpc_server)
    return grpc_server
