"""OpenTelemetry mode (``--trace-config mode=opentelemetry``): traces exported as spans over
OTLP/HTTP through the OpenTelemetry SDK, shaped as Triton's opentelemetry mode shapes them.

Per traced request: an ``InferRequest`` span (the front-end's events: HTTP_RECV_*/
GRPC_WAITREAD_*, INFER_RESPONSE_COMPLETE, HTTP_SEND_*/GRPC_SEND_*), under the client's span
when it sent a W3C ``traceparent``; a span named after the model (REQUEST_START, QUEUE_START,
REQUEST_END; attributes ``triton.model_name``, ``triton.model_version``, ``triton.trace_id``,
``triton.trace_parent_id``, ``triton.request_id``); and under it a ``compute`` span
(COMPUTE_START, COMPUTE_INPUT_END, COMPUTE_OUTPUT_START, COMPUTE_END). An ensemble step's or a
BLS call's model span is a child of its parent request's model span. Spans are built when the
trace completes, from its recorded timestamps (monotonic, mapped to wall-clock time once), so
the request path records the same stamps in both modes. The SDK is imported only here, and
this module only in this mode; its BatchSpanProcessor exports on its own thread.
"""

from __future__ import annotations

import os
import time
from typing import Any

from .trace import Trace, TraceGroup

DEFAULT_URL = "http://localhost:4318/v1/traces"
SERVICE_NAME = "triton-inference-server"
TRACER_NAME = "triton-server"
# Batch span processor settings, their environment variables and Triton's defaults.
BSP = {
    "bsp_max_queue_size": ("OTEL_BSP_MAX_QUEUE_SIZE", "2048"),
    "bsp_schedule_delay": ("OTEL_BSP_SCHEDULE_DELAY", "5000"),
    "bsp_max_export_batch_size": ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "512"),
}
SETTINGS = ("url", "resource", *BSP)
MISSING_SDK = (
    "--trace-config mode=opentelemetry needs the OpenTelemetry SDK and its OTLP/HTTP "
    "exporter (pip install opentelemetry-sdk opentelemetry-exporter-otlp-proto-http): "
)

_REQUEST = frozenset(("REQUEST_START", "QUEUE_START", "REQUEST_END"))
_COMPUTE = frozenset(("COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "COMPUTE_END"))


def otel_settings(pairs: tuple[tuple[str, str], ...]) -> list[tuple[str, str]]:
    """The ``opentelemetry,<k>=<v>`` settings checked, with the batch span processor's
    defaults (from OTEL_BSP_* or Triton's values) after those given. Raises ValueError."""
    settings = []
    for key, value in pairs:
        if key not in SETTINGS:
            known = ", ".join(SETTINGS)
            raise ValueError(f"unknown opentelemetry setting '{key}' (known: {known})")
        if key == "resource" and "=" not in value:
            raise ValueError(f"opentelemetry resource must be <key>=<value>, got '{value}'")
        if key in BSP:
            value = str(_uint32(key, value))
        settings.append((key, value))
    given = {key for key, _ in pairs}
    for key, (env, default) in BSP.items():
        if key not in given:
            settings.append((key, str(_uint32(env, os.environ.get(env, default)))))
    return settings


def _uint32(name: str, text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{name}: expected an unsigned integer, got '{text}'") from None
    if not 0 <= value < 1 << 32:
        raise ValueError(f"{name}: expected an unsigned integer, got '{text}'")
    return value


class OtelExporter:
    def __init__(self, pairs: tuple[tuple[str, str], ...]) -> None:
        try:
            from opentelemetry import trace as otel_trace
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
            from opentelemetry.trace.propagation.tracecontext import (
                TraceContextTextMapPropagator,
            )
        except ImportError as exc:
            raise RuntimeError(MISSING_SDK + str(exc)) from None
        self._settings = otel_settings(pairs)
        config = dict(self._settings)
        attributes = {"service.name": SERVICE_NAME}
        for key, value in self._settings:
            if key == "resource":
                name, _, text = value.partition("=")
                attributes[name] = text
        self._provider = TracerProvider(resource=Resource.create(attributes))
        processor = BatchSpanProcessor(
            OTLPSpanExporter(endpoint=config.get("url", DEFAULT_URL)),
            max_queue_size=int(config["bsp_max_queue_size"]),
            schedule_delay_millis=float(config["bsp_schedule_delay"]),
            max_export_batch_size=int(config["bsp_max_export_batch_size"]),
        )
        self._provider.add_span_processor(processor)
        self._tracer = self._provider.get_tracer(TRACER_NAME)
        self._api = otel_trace
        self._propagator = TraceContextTextMapPropagator()
        # Stamps are monotonic; spans want wall-clock time (Triton's time_offset_).
        self._offset = time.time_ns() - time.perf_counter_ns()

    def settings(self) -> list[tuple[str, str]]:
        return list(self._settings)

    def extract(self, traceparent: str, tracestate: str | None) -> Any:
        """The client's context from its W3C headers; None when they are not valid."""
        carrier = {"traceparent": traceparent}
        if tracestate:
            carrier["tracestate"] = tracestate
        context = self._propagator.extract(carrier)
        if not self._api.get_current_span(context).get_span_context().is_valid:
            return None
        return context

    def export(self, group: TraceGroup) -> None:
        """The group's spans, handed to the batch span processor."""
        if not group.traces:
            return
        root = group.traces[0]
        front = [(n, ns) for n, ns in root.stamps if n not in _REQUEST and n not in _COMPUTE]
        times = [ns for trace in group.traces for _, ns in trace.stamps]
        if not times:
            return
        top = self._span("InferRequest", group.context, min(times), front)
        parents: dict[int, Any] = {0: self._api.set_span_in_context(top)}
        for trace in group.traces:
            if trace.model_name:
                self._model_spans(trace, parents)
        top.end(end_time=max(times) + self._offset)

    def _model_spans(self, trace: Trace, parents: dict[int, Any]) -> None:
        stamps = sorted(trace.stamps, key=lambda stamp: stamp[1])
        request = [(n, ns) for n, ns in stamps if n in _REQUEST]
        compute = [(n, ns) for n, ns in stamps if n in _COMPUTE]
        if not request:
            return
        parent = parents.get(trace.parent_id, parents[0])
        span = self._span(trace.model_name, parent, request[0][1], request)
        span.set_attributes(
            {
                "triton.model_name": trace.model_name,
                "triton.model_version": trace.model_version,
                "triton.trace_id": trace.id,
                "triton.trace_parent_id": trace.parent_id,
            }
        )
        if trace.request_id:
            span.set_attribute("triton.request_id", trace.request_id)
        context = self._api.set_span_in_context(span)
        parents[trace.id] = context
        if compute:
            inner = self._span("compute", context, compute[0][1], compute)
            inner.end(end_time=compute[-1][1] + self._offset)
        span.end(end_time=request[-1][1] + self._offset)

    def _span(self, name: str, parent: Any, start_ns: int, events: list[tuple[str, int]]) -> Any:
        kind = self._api.SpanKind.SERVER
        span = self._tracer.start_span(name, parent, kind, start_time=start_ns + self._offset)
        for event, ns in events:
            span.add_event(event, timestamp=ns + self._offset)
        return span

    def close(self) -> None:
        """Export what is still queued, then stop the processor's thread."""
        self._provider.shutdown()
