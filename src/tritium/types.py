"""Value objects on the request path: datatypes, tensors, requests and responses."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

import numpy as np

from .datatypes import BY_WIRE, DataType  # re-exported: front-ends import types, not datatypes

__all__ = [
    "BY_WIRE",
    "ClientRequest",
    "DataType",
    "InferenceResponse",
    "RequestFlag",
    "RequestOptions",
    "RequestedOutput",
    "ShmRef",
    "Tensor",
]


@dataclass(frozen=True, slots=True)
class ShmRef:
    """Where a tensor lives: ``byte_size`` bytes at ``offset`` in shared-memory ``region``."""

    region: str
    offset: int
    byte_size: int

    def __reduce__(self) -> tuple[Any, ...]:  # pickled by its fields: docs/compiled-code.md
        return (ShmRef, (self.region, self.offset, self.byte_size))


class Tensor:
    """A named tensor. BYTES tensors hold a numpy object array of ``bytes``."""

    __slots__ = ("name", "datatype", "shape", "data", "parameters", "shm")

    def __init__(
        self,
        name: str,
        datatype: DataType,
        shape: tuple[int, ...],
        data: np.ndarray,
        parameters: dict[str, Any] | None = None,
        shm: ShmRef | None = None,  # the data lives in a client's shared-memory region
    ) -> None:
        self.name = name
        self.datatype = datatype
        self.shape = shape
        self.data = data
        self.parameters: dict[str, Any] = {} if parameters is None else parameters
        self.shm = shm

    def with_data(self, data: np.ndarray, shape: tuple[int, ...] | None = None) -> Tensor:
        """The same tensor over ``data`` (of ``shape``; None: this tensor's)."""
        shape = self.shape if shape is None else shape
        return Tensor(self.name, self.datatype, shape, data, self.parameters, self.shm)

    def __reduce__(self) -> tuple[Any, ...]:  # pickled by its fields: docs/compiled-code.md
        fields = (self.name, self.datatype, self.shape, self.data, self.parameters, self.shm)
        return (Tensor, fields)

    def __repr__(self) -> str:
        return f"Tensor({self.name!r}, {self.datatype.wire}, {self.shape})"


class RequestedOutput:
    __slots__ = ("name", "parameters")

    def __init__(self, name: str, parameters: dict[str, Any] | None = None) -> None:
        self.name = name
        self.parameters: dict[str, Any] = {} if parameters is None else parameters

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RequestedOutput):
            return NotImplemented
        return self.name == other.name and self.parameters == other.parameters

    def __reduce__(self) -> tuple[Any, ...]:
        return (RequestedOutput, (self.name, self.parameters))

    def __repr__(self) -> str:
        return f"RequestedOutput({self.name!r}, {self.parameters!r})"


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

    def __reduce__(self) -> tuple[Any, ...]:  # pickled by its fields: docs/compiled-code.md
        return (RequestOptions, (self.priority, self.timeout_us, self.correlation_id, self.flags))


_NO_PARAMETERS: Mapping[str, Any] = MappingProxyType({})


class ClientRequest:
    """One inference request as a client sent it, decoded by a front-end's codec: syntax
    only. ``parameters`` are the request's parameters as sent, reserved ones included; the
    core parses them (``InferenceServer.request``). Nothing changes it afterwards (its fields
    are ``Final``): what the server does with the request lives in ``request.InferenceRequest``."""

    __slots__ = ("model_name", "model_version", "id", "inputs", "outputs", "parameters", "uses_shm")

    def __init__(  # noqa: PLR0913  # its fields
        self,
        model_name: str,
        model_version: int = -1,  # -1: the highest ready version
        id: str = "",
        inputs: tuple[Tensor, ...] = (),
        outputs: tuple[RequestedOutput, ...] = (),
        parameters: Mapping[str, Any] | None = None,
        uses_shm: bool = False,  # an input or requested output names a shared-memory region
    ) -> None:
        self.model_name: Final = model_name
        self.model_version: Final = model_version
        self.id: Final = id
        self.inputs: Final = inputs
        self.outputs: Final = outputs
        self.parameters: Final = _NO_PARAMETERS if parameters is None else parameters
        self.uses_shm: Final = uses_shm

    def with_parameters(self, parameters: Mapping[str, Any]) -> ClientRequest:
        """The same request with ``parameters`` instead of its own."""
        fields = (self.model_name, self.model_version, self.id, self.inputs, self.outputs)
        return ClientRequest(*fields, parameters, self.uses_shm)

    def __reduce__(self) -> tuple[Any, ...]:  # pickled by its fields (--workers forwards it)
        fields = (self.model_name, self.model_version, self.id, self.inputs, self.outputs)
        return (ClientRequest, (*fields, self.parameters, self.uses_shm))


class InferenceResponse:
    __slots__ = ("model_name", "model_version", "id", "outputs", "parameters", "error")

    def __init__(
        self,
        model_name: str,
        model_version: str,
        id: str = "",
        outputs: list[Tensor] | None = None,
        parameters: dict[str, Any] | None = None,
        error: Exception | None = None,
    ) -> None:
        self.model_name = model_name
        self.model_version = model_version
        self.id = id
        self.outputs: list[Tensor] = [] if outputs is None else outputs
        self.parameters: dict[str, Any] = {} if parameters is None else parameters
        self.error = error

    def __reduce__(self) -> tuple[Any, ...]:
        fields = (self.model_name, self.model_version, self.id, self.outputs, self.parameters)
        return (InferenceResponse, (*fields, self.error))
