"""Value objects on the request path: datatypes, tensors, requests and responses."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

from .datatypes import BY_WIRE, DataType  # re-exported: front-ends import types, not datatypes

__all__ = [
    "BY_WIRE", "ClientRequest", "DataType", "InferenceResponse", "RequestFlag", "RequestOptions",
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

    # The dataclass's own __init__ would be interpreted code even in the compiled build (mypyc
    # leaves the generated methods to the dataclasses module): written out, it is compiled.
    # Hence __reduce__: a compiled class with its own __init__ unpickles through it.
    def __init__(
        self,
        name: str,
        datatype: DataType,
        shape: tuple[int, ...],
        data: np.ndarray,
        parameters: dict[str, Any] | None = None,
        shm: ShmRef | None = None,
    ) -> None:
        self.name = name
        self.datatype = datatype
        self.shape = shape
        self.data = data
        self.parameters = {} if parameters is None else parameters
        self.shm = shm

    def __reduce__(self) -> tuple[Any, ...]:
        fields = (self.name, self.datatype, self.shape, self.data, self.parameters, self.shm)
        return (Tensor, fields)


@dataclass(slots=True)
class RequestedOutput:
    name: str
    parameters: dict[str, Any] = field(default_factory=dict)

    def __init__(self, name: str, parameters: dict[str, Any] | None = None) -> None:
        self.name = name  # compiled, as Tensor's
        self.parameters = {} if parameters is None else parameters

    def __reduce__(self) -> tuple[Any, ...]:
        return (RequestedOutput, (self.name, self.parameters))


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

    def __init__(  # noqa: PLR0913  # the dataclass's fields
        self,
        model_name: str,
        model_version: int = -1,
        id: str = "",
        inputs: tuple[Tensor, ...] = (),
        outputs: tuple[RequestedOutput, ...] = (),
        parameters: Mapping[str, Any] | None = None,
        uses_shm: bool = False,
    ) -> None:
        # Compiled, as Tensor's (the frozen dataclass's own sets each field through
        # object.__setattr__, interpreted): compiled code stores the fields directly, and the
        # class still refuses any later assignment (FrozenInstanceError). Pure Python runs
        # _frozen_init instead (below), since there these stores meet that refusal.
        self.model_name = model_name  # type: ignore[misc]
        self.model_version = model_version  # type: ignore[misc]
        self.id = id  # type: ignore[misc]
        self.inputs = inputs  # type: ignore[misc]
        self.outputs = outputs  # type: ignore[misc]
        self.parameters = _NO_PARAMETERS if parameters is None else parameters  # type: ignore[misc]
        self.uses_shm = uses_shm  # type: ignore[misc]

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled by its fields (``--workers`` forwards requests): mypyc's own unpickling of a
        compiled frozen dataclass sets the fields, which the frozen ``__setattr__`` refuses."""
        fields = (self.model_name, self.model_version, self.id, self.inputs, self.outputs)
        return (ClientRequest, (*fields, self.parameters, self.uses_shm))


def _frozen_init(  # noqa: PLR0913  # the dataclass's fields
    self: ClientRequest,
    model_name: str,
    model_version: int = -1,
    id: str = "",
    inputs: tuple[Tensor, ...] = (),
    outputs: tuple[RequestedOutput, ...] = (),
    parameters: Mapping[str, Any] | None = None,
    uses_shm: bool = False,
) -> None:
    """``ClientRequest.__init__`` of the pure-Python build (the frozen class's ``__setattr__``
    refuses plain stores there)."""
    put = object.__setattr__
    put(self, "model_name", model_name)
    put(self, "model_version", model_version)
    put(self, "id", id)
    put(self, "inputs", inputs)
    put(self, "outputs", outputs)
    put(self, "parameters", _NO_PARAMETERS if parameters is None else parameters)
    put(self, "uses_shm", uses_shm)


if __file__.endswith(".py"):  # this module runs interpreted (a compiled class cannot be patched)
    setattr(ClientRequest, "__init__", _frozen_init)  # noqa: B010  # mypy refuses the assignment


@dataclass(slots=True)
class InferenceResponse:
    model_name: str
    model_version: str
    id: str = ""
    outputs: list[Tensor] = field(default_factory=list)
    parameters: dict[str, Any] = field(default_factory=dict)
    error: Exception | None = None

    def __init__(
        self,
        model_name: str,
        model_version: str,
        id: str = "",
        outputs: list[Tensor] | None = None,
        parameters: dict[str, Any] | None = None,
        error: Exception | None = None,
    ) -> None:
        self.model_name = model_name  # compiled, as Tensor's
        self.model_version = model_version
        self.id = id
        self.outputs = [] if outputs is None else outputs
        self.parameters = {} if parameters is None else parameters
        self.error = error

    def __reduce__(self) -> tuple[Any, ...]:
        fields = (self.model_name, self.model_version, self.id, self.outputs, self.parameters)
        return (InferenceResponse, (*fields, self.error))
