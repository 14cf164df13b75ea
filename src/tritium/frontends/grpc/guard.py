"""Access control for gRPC calls: each RPC's Triton protocol group, the policy's verdict, and
the audit of control actions and refusals.

Refusals: Triton's restricted protocol → UNAVAILABLE "This protocol is restricted, expecting
header 'triton-grpc-protocol-<key>'" (Triton's code and text); no or unknown bearer token →
UNAUTHENTICATED; a token without the group → PERMISSION_DENIED; the client's in-flight bound
→ RESOURCE_EXHAUSTED. A ``ModelStreamInfer`` call holds no in-flight slot itself: each request
on it holds one until its final response (``CallGuard.hold``), and one over the bound is
answered in the stream, which goes on.
"""

from __future__ import annotations

from typing import Any

from ...access.policy import AccessControl, AccessPolicy, ApiGroup, RefusalKind, Verdict
from ...access.audit import AuditEvent, AuditLog
from ...transport.grpc.status import RpcError, StatusCode

SERVICE = "/inference.GRPCInferenceService/"
HEALTH_SERVICE = "/grpc.health.v1.Health/"
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
    RefusalKind.RESTRICTED: StatusCode.UNAVAILABLE,
    RefusalKind.UNAUTHENTICATED: StatusCode.UNAUTHENTICATED,
    RefusalKind.FORBIDDEN: StatusCode.PERMISSION_DENIED,
    RefusalKind.TOO_MANY_REQUESTS: StatusCode.RESOURCE_EXHAUSTED,
}


def refusal_code(kind: RefusalKind) -> StatusCode:
    """The gRPC status of a refusal (a stream's request answers it in the stream)."""
    return _CODE[kind]


def rpc_group(method: str) -> tuple[ApiGroup | None, str]:
    """(group, action) of a full method name; group None for a method outside every group."""
    if method.startswith(HEALTH_SERVICE):
        return ApiGroup.HEALTH, "server_health"
    if method.startswith(SERVICE):
        return _RPCS.get(method[len(SERVICE) :], (None, "unknown"))
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


class CallGuard:
    """One RPC under the policy: admission, audit and the release of its in-flight slot."""

    __slots__ = ("_guard", "_action", "_group", "_peer", "_finished", "_verdict")

    def __init__(self, guard: RpcGuard, method: str, peer: str) -> None:
        self._guard = guard
        self._group, self._action = rpc_group(method)
        self._peer = peer
        self._verdict = Verdict()
        self._finished = False

    @property
    def identity(self) -> str | None:
        """The admitted call's bearer token name (for the access log)."""
        return self._verdict.identity

    @property
    def key(self) -> str | None:
        """The restricted-protocol header that admitted the call (its name)."""
        return self._verdict.key

    def admit(self, metadata: dict[str, str], request: Any) -> None:
        """Raises RpcError when the policy refuses the call (and audits the refusal)."""
        hold = self._action != "stream_infer"  # a stream's requests hold their own slots
        self._verdict = self._guard.policy.admit(self._group, metadata.get, self._peer, hold)
        refusal = self._verdict.refusal
        if refusal is not None:
            self._finished = True
            self._record(request, "refused", refusal.message, refusal.kind.value)
            raise RpcError(_CODE[refusal.kind], refusal.message)

    def hold(self, request: Any) -> Verdict:
        """The in-flight slot of one request on an admitted stream (``request``: its message,
        for the audit): a refusal is audited; a held slot goes back with ``release``."""
        verdict = self._guard.policy.hold(self._peer)
        refusal = verdict.refusal
        if refusal is not None:
            self._record(request, "refused", refusal.message, refusal.kind.value)
        return verdict

    def release(self, verdict: Verdict) -> None:
        self._guard.policy.release(verdict)

    def finish(self, request: Any, error: str | None) -> None:
        """Once per call, before its status goes out: release the slot, audit the outcome."""
        if self._finished:
            return
        self._finished = True
        self._guard.policy.release(self._verdict)
        if self._action not in _CONTROL or not _is_change(self._action, request):
            return
        if error is None:
            self._record(request, "ok")
        else:
            self._record(request, "error", error)

    def _record(self, request: Any, outcome: str, message: str = "", reason: str = "") -> None:
        audit = self._guard.audit
        if audit is not None:
            event = AuditEvent(
                "grpc",
                self._peer,
                self._verdict.identity,
                self._action,
                _target(request),
                outcome,
                message,
                reason,
            )
            audit.record(event)


class RpcGuard:
    """The server's access control for gRPC; ``call`` starts one call's guard."""

    def __init__(self, access: AccessControl) -> None:
        self.policy: AccessPolicy = access.grpc
        self.audit: AuditLog | None = access.audit

    def call(self, method: str, peer: str) -> CallGuard:
        return CallGuard(self, method, peer)
