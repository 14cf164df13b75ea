"""LEGACY (removed with grpcio_server.py): access control for grpcio's server.

A ``grpc.aio.ServerInterceptor`` that maps each RPC to its
Triton protocol group, asks the policy, and audits control actions and refusals.

Refusals: Triton's restricted protocol → UNAVAILABLE "This protocol is restricted, expecting
header 'triton-grpc-protocol-<key>'" (Triton's code and text); no or unknown bearer token →
UNAUTHENTICATED; a token without the group → PERMISSION_DENIED; the client's in-flight bound
→ RESOURCE_EXHAUSTED. A ``ModelStreamInfer`` call holds one in-flight slot while it is open
(its own requests are bounded by ``--grpc-stream-inflight-limit``).
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from ...access import AccessControl, AccessPolicy, ApiGroup, RefusalKind, Verdict, grpc_peer
from ...audit import AuditEvent, AuditLog

_SERVICE = "/inference.GRPCInferenceService/"
_HEALTH_SERVICE = "/grpc.health.v1.Health/"
# RPC → (Triton's group, the action name the audit log uses; the same names as HTTP's).
_RPCS: dict[str, tuple[ApiGroup, str]] = {
    "ServerLive": (ApiGroup.HEALTH, "server_health"),
    "ServerReady": (ApiGroup.HEALTH, "server_health"),
    "ModelReady": (ApiGroup.HEALTH, "model_ready"),
    "ServerMetadata": (ApiGroup.METADATA, "server_metadata"),
    "ModelMetadata": (ApiGroup.METADATA, "model_metadata"),
    "ModelInfer": (ApiGroup.INFERENCE, "infer"),
    "ModelStreamInfer": (ApiGroup.INFERENCE, "stream_infer"),
    "ModelConfig": (ApiGroup.MODEL_CONFIG, "model_config"),
    "ModelStatistics": (ApiGroup.STATISTICS, "model_statistics"),
    "RepositoryIndex": (ApiGroup.MODEL_REPOSITORY, "repository_index"),
    "RepositoryModelLoad": (ApiGroup.MODEL_REPOSITORY, "load"),
    "RepositoryModelUnload": (ApiGroup.MODEL_REPOSITORY, "unload"),
    "SystemSharedMemoryStatus": (ApiGroup.SHARED_MEMORY, "system_shm_status"),
    "SystemSharedMemoryRegister": (ApiGroup.SHARED_MEMORY, "system_shm_register"),
    "SystemSharedMemoryUnregister": (ApiGroup.SHARED_MEMORY, "system_shm_unregister"),
    "CudaSharedMemoryStatus": (ApiGroup.SHARED_MEMORY, "cuda_shm_status"),
    "CudaSharedMemoryRegister": (ApiGroup.SHARED_MEMORY, "cuda_shm_register"),
    "CudaSharedMemoryUnregister": (ApiGroup.SHARED_MEMORY, "cuda_shm_unregister"),
    "TraceSetting": (ApiGroup.TRACE, "trace_setting"),
    "LogSettings": (ApiGroup.LOGGING, "log_settings"),
}
# Control actions, audited with their outcome (trace/log settings only when they change).
_CONTROL = frozenset(
    {
        "load",
        "unload",
        "system_shm_register",
        "system_shm_unregister",
        "cuda_shm_register",
        "cuda_shm_unregister",
        "trace_setting",
        "log_settings",
    }
)
_CODE = {
    RefusalKind.RESTRICTED: grpc.StatusCode.UNAVAILABLE,
    RefusalKind.UNAUTHENTICATED: grpc.StatusCode.UNAUTHENTICATED,
    RefusalKind.FORBIDDEN: grpc.StatusCode.PERMISSION_DENIED,
    RefusalKind.TOO_MANY_REQUESTS: grpc.StatusCode.RESOURCE_EXHAUSTED,
}


def rpc_group(method: str) -> tuple[ApiGroup | None, str]:
    """(group, action) of a full method name; group None for a method outside every group."""
    if method.startswith(_HEALTH_SERVICE):
        return ApiGroup.HEALTH, "server_health"
    if method.startswith(_SERVICE):
        return _RPCS.get(method[len(_SERVICE) :], (None, "unknown"))
    return None, "unknown"


def _target(request: Any) -> str:
    """The model or region a request names (empty for none, or "all regions")."""
    for field in ("model_name", "name"):
        value = getattr(request, field, None)
        if isinstance(value, str):
            return value
    return ""


def _is_change(action: str, request: Any) -> bool:
    """Trace/log RPCs only read unless they carry settings; the others always act."""
    if action in ("trace_setting", "log_settings"):
        return len(getattr(request, "settings", ())) > 0
    return True


class _Call:
    """One RPC under the policy: admission, audit and the release of its in-flight slot."""

    __slots__ = ("_guard", "_action", "_group", "_context", "_finished", "verdict", "peer")

    def __init__(self, guard: AccessInterceptor, action: str, group: ApiGroup | None, context: Any):
        self._guard = guard
        self._action = action
        self._group = group
        self._context = context
        self.peer = grpc_peer(context.peer() or "")
        self.verdict = Verdict()
        self._finished = False

    @property
    def audited(self) -> bool:
        """A control action under an audit log: its outcome is recorded."""
        return self._action in _CONTROL and self._guard.audit is not None

    async def admit(self, request: Any) -> None:
        """Aborts the call (raising) when the policy refuses it."""
        metadata = dict(self._context.invocation_metadata() or ())
        self.verdict = self._guard.policy.admit(self._group, metadata.get, self.peer)
        refusal = self.verdict.refusal
        if refusal is not None:
            self.record(request, self._action, "refused", refusal.message, refusal.kind.value)
            await self._context.abort(_CODE[refusal.kind], refusal.message)

    def finish(self, request: Any, error: str | None) -> None:
        """Once per call: release the in-flight slot, audit a control action's outcome."""
        if self._finished:
            return
        self._finished = True
        self._guard.policy.release(self.verdict)
        if not self.audited or not _is_change(self._action, request):
            return
        if error is None:
            self.record(request, self._action, "ok")
        else:
            self.record(request, self._action, "error", error)

    def record(
        self, request: Any, action: str, outcome: str, message: str = "", reason: str = ""
    ) -> None:
        audit = self._guard.audit
        if audit is not None:
            identity = self.verdict.identity
            event = AuditEvent(
                "grpc", self.peer, identity, action, _target(request), outcome, message, reason
            )
            audit.record(event)


class _AuditedContext:
    """A control RPC's servicer context whose ``abort`` records the outcome first: grpc.aio
    sends the status inside ``abort()``, before the handler's exception comes back to us, and
    the audit line must exist by the time the client learns the outcome."""

    def __init__(self, context: Any, call: _Call, request: Any) -> None:
        self._context = context
        self._call = call
        self._request = request

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)

    async def abort(self, code: Any, details: str = "", *args: Any, **kwargs: Any) -> Any:
        self._call.finish(self._request, details or str(code))
        await self._context.abort(code, details, *args, **kwargs)


def _is_async(handler: Any) -> bool:
    behavior = (
        handler.unary_unary or handler.stream_stream or handler.unary_stream or handler.stream_unary
    )
    return inspect.iscoroutinefunction(behavior) or inspect.isasyncgenfunction(behavior)


class AccessInterceptor(grpc.aio.ServerInterceptor):
    """Wraps every handler so the check runs with the request and the peer at hand."""

    def __init__(self, access: AccessControl) -> None:
        self.policy: AccessPolicy = access.grpc
        self.audit: AuditLog | None = access.audit

    async def intercept_service(
        self, continuation: Callable[[Any], Awaitable[Any]], details: Any
    ) -> Any:
        handler = await continuation(details)
        if handler is None:
            return None
        group, action = rpc_group(details.method)
        if not _is_async(handler):
            return handler  # grpc's generated "Method not implemented!" stubs
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                self._unary(handler.unary_unary, action, group),
                handler.request_deserializer,
                handler.response_serializer,
            )
        if handler.stream_stream is not None:
            return grpc.stream_stream_rpc_method_handler(
                self._streamed(handler.stream_stream, action, group, False),
                handler.request_deserializer,
                handler.response_serializer,
            )
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                self._streamed(handler.unary_stream, action, group, True),
                handler.request_deserializer,
                handler.response_serializer,
            )
        return handler  # client streaming: no such RPC in these services

    def _unary(self, inner: Any, action: str, group: ApiGroup | None) -> Any:
        async def behavior(request: Any, context: Any) -> Any:
            call = _Call(self, action, group, context)
            await call.admit(request)
            seen = _AuditedContext(context, call, request) if call.audited else context
            try:
                response = await inner(request, seen)
            except BaseException as exc:
                call.finish(request, f"{type(exc).__name__}: {exc}")
                raise
            call.finish(request, None)
            return response

        return behavior

    def _streamed(
        self, inner: Any, action: str, group: ApiGroup | None, unary_request: bool
    ) -> Any:
        """A server-streaming RPC's behaviour, admitted first and finished when its stream
        ends; ``unary_request``: the request is one message (Watch), else an iterator."""

        async def behavior(request: Any, context: Any) -> AsyncIterator[Any]:
            call = _Call(self, action, group, context)
            first = request if unary_request else None
            await call.admit(first)
            try:
                async for message in inner(request, context):
                    yield message
            finally:
                call.finish(first, None)

        return behavior
