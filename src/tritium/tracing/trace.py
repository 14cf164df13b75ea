"""One sampled request's trace, and the group of traces it spawns.

A front-end samples a trace for a request (``TraceManager.sample``); the request's lifecycle
(``request.py:TracedRequest``) stamps its timestamps into it; an ensemble step or a BLS call
made under a traced request gets a child trace (``Trace.child``) with ``parent_id`` set, as
Triton's core does. The group (the root trace and its children) is written or exported once
every holder has let go of it: the front-end once the response is sent, each request once it
is finished. Timestamps are ``time.perf_counter_ns`` values (a monotonic clock, as Triton's
steady clock).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..types import DataType, Tensor
from .settings import TraceLevel, TraceSetting


class TraceGroup:
    """A root trace and its children, written or exported together when the last holder
    releases it (Triton writes a trace when its last reference goes)."""

    __slots__ = ("setting", "level", "traces", "context", "_open", "_done", "_new_id")

    def __init__(
        self,
        setting: TraceSetting,
        new_id: Callable[[], int],
        done: Callable[[TraceGroup], None],
        context: Any = None,
    ) -> None:
        self.setting = setting
        self.level = setting.values.level
        self.traces: list[Trace] = []
        self.context = context  # a propagated OpenTelemetry context (opentelemetry mode)
        self._open = 1  # the front-end's hold, let go by the root trace's end()
        self._done = done
        self._new_id = new_id

    @property
    def timestamps(self) -> bool:
        return bool(self.level & TraceLevel.TIMESTAMPS)

    @property
    def tensors(self) -> bool:
        return bool(self.level & TraceLevel.TENSORS)

    def new_trace(self, parent_id: int) -> Trace:
        trace = Trace(self, self._new_id(), parent_id)
        self.traces.append(trace)
        return trace

    def hold(self) -> None:
        """A request of the group entered the server's lifecycle (it is queued)."""
        self._open += 1

    def release(self) -> None:
        self._open -= 1
        if self._open == 0:
            self._done(self)


class Trace:
    """One request's trace (TRITONSERVER_InferenceTrace): its id, its parent's (0: none),
    the model it ran, its timestamps and, at level TENSORS, its tensors."""

    __slots__ = (
        "group",
        "id",
        "parent_id",
        "model_name",
        "model_version",
        "request_id",
        "stamps",
        "activities",
    )

    def __init__(self, group: TraceGroup, trace_id: int, parent_id: int) -> None:
        self.group = group
        self.id = trace_id
        self.parent_id = parent_id
        self.model_name = ""
        self.model_version = 0
        self.request_id = ""
        self.stamps: list[tuple[str, int]] = []
        self.activities: list[dict[str, Any]] = []

    def stamp(self, name: str, ns: int) -> None:
        if self.group.level & TraceLevel.TIMESTAMPS:
            self.stamps.append((name, ns))

    def tensor(self, activity: str, tensor: Tensor) -> None:
        """A tensor activity (QUEUE_INPUT, BACKEND_OUTPUT) at level TENSORS."""
        if self.group.level & TraceLevel.TENSORS:
            self.activities.append(
                {"id": self.id, "activity": activity, "tensor": tensor_entry(tensor)}
            )

    def child(self) -> Trace:
        """The trace of a request made for this one (an ensemble step, a BLS call)."""
        return self.group.new_trace(self.id)

    def end(self) -> None:
        """The front-end is done with its root trace (the response is sent, or failed):
        called once per sampled trace."""
        self.group.release()

    def stamp_of(self, name: str) -> int | None:
        for stamp, ns in self.stamps:
            if stamp == name:
                return ns
        return None


def triton_entries(group: TraceGroup) -> list[dict[str, Any]]:
    """The group in Triton's trace-file format: per trace, its header (model name and
    version, request id, parent id), one object per timestamp, then its tensor activities."""
    entries: list[dict[str, Any]] = []
    for trace in group.traces:
        if trace.model_name:
            header: dict[str, Any] = {
                "id": trace.id,
                "model_name": trace.model_name,
                "model_version": trace.model_version,
            }
            if trace.request_id:
                header["request_id"] = trace.request_id
            if trace.parent_id:
                header["parent_id"] = trace.parent_id
            entries.append(header)
        for name, ns in trace.stamps:
            entries.append({"id": trace.id, "timestamps": [{"name": name, "ns": ns}]})
        entries.extend(trace.activities)
    return entries


def tensor_entry(tensor: Tensor) -> dict[str, str]:
    """A tensor as Triton's TENSORS trace writes it: its values comma-separated (BYTES
    elements quoted; FP16 and BF16 left empty, as Triton does), its shape, its datatype."""
    return {
        "name": tensor.name,
        "data": _data(tensor),
        "shape": ",".join(str(d) for d in tensor.shape),
        "dtype": tensor.datatype.wire,
    }


def _data(tensor: Tensor) -> str:
    kind = tensor.datatype
    if kind in (DataType.FP16, DataType.BF16):
        return ""
    flat = np.asarray(tensor.data).reshape(-1)
    if kind is DataType.BYTES:
        return ",".join('"' + _text(v) + '"' for v in flat)
    if kind is DataType.BOOL:
        return ",".join("1" if v else "0" for v in flat)
    if kind in (DataType.FP32, DataType.FP64):
        return ",".join(f"{v:g}" for v in flat.tolist())
    return ",".join(str(v) for v in flat.tolist())


def _text(value: Any) -> str:
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "replace")
    return str(value)
