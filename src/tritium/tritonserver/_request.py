"""``InferenceRequest`` (Triton's dataclass of one request) and how it becomes tritium's
``ClientRequest``: run in the caller's thread, so converting the inputs never runs on the
server's loop."""

from __future__ import annotations

import asyncio
import queue
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ..datatypes import DataType as _Wire
from ..types import ClientRequest
from ..types import Tensor as _CoreTensor
from ._errors import InvalidArgumentError, UnsupportedError
from ._tensor import DeviceOrMemoryType, Tensor, parse_device_or_memory_type
from ._enums import MemoryType, TO_WIRE

if TYPE_CHECKING:
    from ._model import Model

_FLAG_START = 1  # TRITONSERVER_REQUEST_FLAG_SEQUENCE_START
_FLAG_END = 2  # TRITONSERVER_REQUEST_FLAG_SEQUENCE_END
_PARAMETER_TYPES = (str, int, float, bool)


@dataclass
class InferenceRequest:
    """One inference request (Triton's fields: ``timeout`` in microseconds, ``flags`` the
    sequence flags, ``correlation_id`` the sequence id)."""

    model: Model
    request_id: str | None = None
    flags: int = 0
    correlation_id: int | str | None = None
    priority: int = 0
    timeout: int = 0
    inputs: dict[str, Tensor | Any] = field(default_factory=dict)
    parameters: dict[str, str | int | bool | float] = field(default_factory=dict)
    output_memory_type: DeviceOrMemoryType | None = None
    response_queue: queue.SimpleQueue[Any] | asyncio.Queue[Any] | None = None

    def _client(self) -> ClientRequest:
        """tritium's request (raises InvalidArgumentError for what cannot be sent)."""
        if self.output_memory_type is not None:
            kind, number = parse_device_or_memory_type(self.output_memory_type)
            if kind not in (MemoryType.CPU, MemoryType.CPU_PINNED) or number != 0:
                raise UnsupportedError(
                    f"Memory type {self.output_memory_type} not supported: tritium's outputs "
                    "are in CPU memory"
                )
        inputs = tuple(_input(name, value) for name, value in self.inputs.items())
        return ClientRequest(
            self.model.name,
            self.model.version,
            self.request_id or "",
            inputs,
            parameters=self._parameters(),
        )

    def _parameters(self) -> dict[str, Any]:
        found: dict[str, Any] = {}
        for key, value in self.parameters.items():
            if not isinstance(value, _PARAMETER_TYPES):
                raise InvalidArgumentError(
                    f"Unsupported Value. Can't convert {type(value)} to Request Parameter"
                )
            found[key] = value
        if self.priority:
            found["priority"] = self.priority
        if self.timeout:
            found["timeout"] = self.timeout
        if self.correlation_id is not None:
            found["sequence_id"] = self.correlation_id
        if self.flags & _FLAG_START:
            found["sequence_start"] = True
        if self.flags & _FLAG_END:
            found["sequence_end"] = True
        return found


def _input(name: str, value: Any) -> _CoreTensor:
    """tritium's tensor for one input: a numeric numpy array as it is (no copy). A name
    that is not a str is a TypeError, as in Triton's bindings."""
    if not isinstance(name, str):
        raise TypeError(f"input name must be str, got {name!r}")
    if isinstance(value, np.ndarray) and value.dtype.kind not in "OSUV":
        wire = _Wire.from_numpy(value.dtype)
        if wire is None:
            raise InvalidArgumentError(f"input '{name}': numpy dtype {value.dtype} not supported")
        return _CoreTensor(name, wire, value.shape, np.ascontiguousarray(value))
    tensor = Tensor._from_object(value)
    wire = TO_WIRE.get(tensor.data_type)
    if wire is None:
        raise InvalidArgumentError(f"input '{name}': data type {tensor.data_type!r} not supported")
    shape = tuple(int(d) for d in tensor.shape)
    return _CoreTensor(name, wire, shape, tensor._values())
