"""Tracing (Triton's trace extension): settings, sampling, the trace file, OpenTelemetry.

The core records timestamps only in ``request.py:TracedRequest``'s transitions (and the
front-ends their receive/send times) into a ``Trace``; ``TraceManager`` decides which requests
are traced and where finished traces go."""

from .manager import TraceConfig, TraceManager
from .settings import TraceLevel, TraceMode, TraceUpdate, TraceValues, parse_update
from .trace import Trace, TraceGroup

__all__ = [
    "Trace",
    "TraceConfig",
    "TraceGroup",
    "TraceLevel",
    "TraceManager",
    "TraceMode",
    "TraceUpdate",
    "TraceValues",
    "parse_update",
]
