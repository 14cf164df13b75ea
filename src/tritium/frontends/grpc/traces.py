"""The gRPC front-end's side of the trace extension: sampling a call's request (ModelInfer on
either path, each message of ModelStreamInfer) with its ``traceparent``/``tracestate``."""

from __future__ import annotations

import time

from ...server import InferenceServer, Trace
from ...types import ClientRequest
from ...transport.grpc.call import ServerCall


def sample(
    server: InferenceServer, client: ClientRequest, call: ServerCall, began: int = 0
) -> Trace | None:
    """A trace of this request when the tracer samples it. GRPC_WAITREAD_* span from
    ``began`` (the handler's start; 0: the message was already read, as on a stream) to
    the decoded message."""
    metadata = call.metadata
    trace = server.tracer.sample(
        client.model_name, metadata.get("traceparent"), metadata.get("tracestate")
    )
    if trace is not None:
        now = time.perf_counter_ns()
        trace.stamp("GRPC_WAITREAD_START", began or now)
        trace.stamp("GRPC_WAITREAD_END", now)
    return trace
