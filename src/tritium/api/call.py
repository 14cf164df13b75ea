"""What surrounds one inference as a front-end serves it: its trace (sampling, the front-end's
stamps, the end) and its access-log line (begun, filled in, put once).

A front-end describes itself once (``Door``: its protocol, its refusal of decoupled models,
the names of its receive and send stamps) and asks ``Inference.call`` for an
``InferenceCall`` per request; from then on it only reports what its transport saw (when
the bytes were read and written, how many, which status went out) and the call decides what
is stamped and logged. Nothing here knows a transport.
"""

from __future__ import annotations

import time
from typing import Final

from ..logs.access_log import AccessEntry, AccessLog
from ..request import ResponseCallback
from ..tracing import Trace, TraceManager
from ..types import InferenceResponse

# Triton's stamp for the model's final response being handed to the front-end.
RESPONSE_COMPLETE: Final = "INFER_RESPONSE_COMPLETE"


class Door:
    """One front-end's constants: its protocol in the access log (``http``, ``grpc``), its
    message refusing a decoupled model (None: it takes them, as streams do), and the names of
    its trace stamps around reading the request and writing the answer."""

    __slots__ = ("protocol", "decoupled_error", "received", "sent")

    def __init__(
        self,
        protocol: str,
        decoupled_error: str | None,
        received: tuple[str, str],
        sent: tuple[str, str],
    ) -> None:
        self.protocol: Final = protocol
        self.decoupled_error: Final = decoupled_error
        self.received: Final = received
        self.sent: Final = sent


class InferenceCall:
    """One inference's trace (when the tracer samples it) and access-log line (when the log
    is on), owned here so that every front-end stamps and logs the same way. Each method is
    a no-op for what is off, so a front-end calls them unconditionally."""

    __slots__ = ("door", "trace", "entry", "_tracer", "_log")

    def __init__(
        self, door: Door, tracer: TraceManager, log: AccessLog | None, entry: AccessEntry | None
    ) -> None:
        self.door = door
        self.trace: Trace | None = None
        self.entry = entry  # None: the access log is off
        self._tracer = tracer
        self._log = log

    # -- tracing -------------------------------------------------------------------------------
    def sample(
        self,
        model: str,
        traceparent: str | None,
        tracestate: str | None,
        received: tuple[int, int] | None,
    ) -> None:
        """Trace this request when the tracer samples it (W3C ``traceparent``/``tracestate``
        from the client), stamping the door's receive times (``received``: start and end of
        reading it; 0 is now; None: not stamped)."""
        if not self._tracer.active:
            return
        trace = self._tracer.sample(model, traceparent, tracestate)
        if trace is not None and received is not None:
            now = time.perf_counter_ns()
            start, end = self.door.received
            trace.stamp(start, received[0] or now)
            trace.stamp(end, received[1] or now)
        self.trace = trace

    def responded(self) -> None:
        """The final response reached the front-end (INFER_RESPONSE_COMPLETE)."""
        if self.trace is not None:
            self.trace.stamp(RESPONSE_COMPLETE, time.perf_counter_ns())

    def sent(self, start: int, end: int) -> None:
        """The answer was written between ``start`` and ``end`` (0: nothing was written):
        the door's send stamps, then the trace ends."""
        trace, self.trace = self.trace, None
        if trace is None:
            return
        if start:
            names = self.door.sent
            trace.stamp(names[0], start)
            trace.stamp(names[1], end)
        trace.end()

    def clock(self) -> int:
        """perf_counter_ns while traced (the times a front-end passes to ``sent``), else 0."""
        return time.perf_counter_ns() if self.trace is not None else 0

    def traced(self, callback: ResponseCallback) -> ResponseCallback:
        """``callback`` for a request whose callback writes its responses (a stream): the
        final one's writing is stamped (INFER_RESPONSE_COMPLETE, the door's send stamps),
        then the trace ends. ``callback`` itself when not traced."""
        if self.trace is None:
            return callback

        def on_response(response: InferenceResponse | None, final: bool) -> None:
            if not final:
                callback(response, final)
                return
            self.responded()
            start = time.perf_counter_ns()
            callback(response, final)
            self.sent(start, time.perf_counter_ns())

        return on_response

    # -- the access log ------------------------------------------------------------------------
    def asked(self, model: str, version: str, request_id: str | None = None) -> None:
        """The model, version and id the request names (the line keeps them until the server
        resolves the request)."""
        entry = self.entry
        if entry is not None:
            entry.model, entry.version = model, version
            if request_id is not None:
                entry.request_id = request_id

    def count(self, sent: int) -> None:
        """``sent`` more bytes of answer went out."""
        if self.entry is not None:
            self.entry.bytes_out += sent

    def outcome(self, status: str, code: int | None) -> None:
        """The status the line shows (Triton's: SUCCESS or an error kind) and the
        transport's code."""
        if self.entry is not None:
            self.entry.outcome(status, code)

    def first_error(self, status: str) -> None:
        """A response of a stream failed: the line takes the first such error's status."""
        entry = self.entry
        if entry is not None and entry.status == "SUCCESS":
            entry.outcome(status, entry.code)

    def logged(self) -> None:
        """The answer is out: the access-log line is written (once)."""
        entry, self.entry = self.entry, None
        if entry is not None and self._log is not None:
            entry.ended()
            self._log.put(entry)

    def failed(self, status: str, code: int | None) -> None:
        """The call ended with an error before or instead of its answer: the trace ends and
        the line is written with ``status`` and ``code``."""
        self.sent(0, 0)
        self.outcome(status, code)
        self.logged()
