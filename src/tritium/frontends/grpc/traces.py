"""What the gRPC front-end tells the inference call about a request (ModelInfer on either
path, each message of ModelStreamInfer): its trace context (``traceparent``/``tracestate``
metadata), the names of its stamps, who sent it and what it names."""

from __future__ import annotations

from typing import Final

from ...api import InferenceCall
from ...types import ClientRequest
from ...transport.grpc.call import ServerCall

# gRPC's trace stamps around reading a request and writing its answer (Triton's names).
RECEIVED: Final = ("GRPC_WAITREAD_START", "GRPC_WAITREAD_END")
SENT: Final = ("GRPC_SEND_START", "GRPC_SEND_END")


def sample(
    inference: InferenceCall, client: ClientRequest, call: ServerCall, began: int = 0
) -> None:
    """Let the inference call sample this request for tracing. GRPC_WAITREAD_* span from
    ``began`` (the handler's start; 0: the message was already read, as on a stream) to the
    decoded message."""
    metadata = call.metadata
    parent, state = metadata.get("traceparent"), metadata.get("tracestate")
    inference.sample(client.model_name, parent, state, (began, 0))


def identity(call: ServerCall) -> tuple[str | None, str | None]:
    """Who the access guard admitted (for the access log), if one did."""
    guard = call.guard
    return (None, None) if guard is None else (guard.identity, guard.key)


def asked_version(client: ClientRequest) -> str:
    """The version a request names, as the access log shows it ("" for the latest)."""
    return str(client.model_version) if client.model_version > 0 else ""
