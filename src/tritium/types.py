"""Value objects on the request path: datatypes, tensors, requests and responses."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

from .datatypes import DataType

__all__ = [
    "ClientRequest", "DataType", "InferenceResponse", "RequestFlag", "RequestOptions",
    "RequestedOutput", "ShmRef", "Tensor",
]


@dataclass(frozen=True, slots=True)
class ShmRef:
    """Where a tensor lives: ``byte_size`` bytes at ``offset`` in shared-memory ``region``."""

    region: str
    offset: int
    byte_size: int

    def __reduce__(self) -> tuple[Any, ...]:  # compiled: unpickling cannot set frozen fields
        return (ShmRef, (self.region, self.offset, self.byte_size))


@dataclass(slots=True)
class Tensor:
    """A named tensor. BYTES tensors hold a numpy object array of ``bytes``."""

    name: str
    datatype: DataType
    shape: tuple[int, ...]
    data: np.ndarray
    parameters: dict[str, Any] = field(default_factory=dict)
    shm: ShmRef | None = None  # the data lives in a client's shared-memory region


@dataclass(slots=True)
class RequestedOutput:
    name: str
    parameters: dict[str, Any] = field(default_factory=dict)


class RequestFlag(enum.IntFlag):
    """Triton's request flags (TRITONSERVER_REQUEST_FLAG_*): a sequence's first and last
    request."""

    NONE = 0
    SEQUENCE_START = 1
    SEQUENCE_END = 2


@dataclass(frozen=True, slots=True)
class RequestOptions:
    """What a request's reserved parameters say (priority, timeout, sequence id and flags),
    parsed once by the core with the same rules for every protocol (``parameters.py``)."""

    priority: int = 0
    timeout_us: int = 0  # the request's queue timeout (schedule-policy extension), 0: none
    correlation_id: int | str = 0
    flags: int = 0

    def __reduce__(self) -> tuple[Any, ...]:  # compiled: unpickling cannot set frozen fields
        return (RequestOptions, (self.priority, self.timeout_us, self.correlation_id, self.flags))


_NO_PARAMETERS: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True, eq=False)
class ClientRequest:
    """One inference request as a client sent it, decoded by a front-end's codec: syntax
    only. ``parameters`` are the request's parameters as sent, reserved ones included; the
    core parses them (``InferenceServer.request``). Nothing changes it afterwards: what the
    server does with the request lives in ``request.InferenceRequest``."""

    model_name: str
    model_version: int = -1  # -1: the highest ready version
    id: str = ""
    inputs: tuple[Tensor, ...] = ()
    outputs: tuple[RequestedOutput, ...] = ()
    parameters: Mapping[str, Any] = field(default_factory=lambda: _NO_PARAMETERS)
    uses_shm: bool = False  # an input or requested output names a shared-memory region

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled by its fields (``--workers`` forwards requests): mypyc's own unpickling of a
        compiled frozen dataclass sets the fields, which the frozen ``__setattr__`` refuses."""
        fields = (self.model_name, self.model_version, self.id, self.inputs, self.outputs)
        return (ClientRequest, (*fields, self.parameters, self.uses_shm))


@dataclass(slots=True)
class InferenceResponse:
    model_name: str
    model_version: str
    id: str = ""
    outputs: list[Tensor] = field(default_factory=list)
    parameters: dict[str, Any] = field(default_factory=dict)
    error: Exception | None = None
