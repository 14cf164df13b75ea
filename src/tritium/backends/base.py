"""The backend protocol: load a model version into instances; an instance executes requests.

An instance answers every request through ``request.sender`` (one final response for
ordinary models, 0..N for decoupled ones).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol

import numpy as np

from ..config.confine import client_path
from ..errors import internal
from ..config.model_config import ModelConfig
from ..config.spec import ModelSpec
from ..request import InferenceRequest
from ..types import DataType, InferenceResponse, Tensor


@dataclass(slots=True)
class LoadContext:
    """What a backend gets to load one version of one model."""

    model_name: str
    version: int
    model_dir: Path
    version_dir: Path
    config: ModelConfig  # as read from disk; auto-complete may fill it in
    auto_complete: bool
    finalize: Callable[[ModelConfig], ModelSpec]  # normalise + validate → frozen spec
    on_failure: Callable[[str], None]  # an instance died: the model must stop reporting ready
    # An ensemble's composing models: (name, version) -> spec, or ServerError saying why not.
    composing: Callable[[str, int], ModelSpec] | None = None
    # The instances that had died are serving again (a restarted stub): READY again.
    on_recovered: Callable[[], None] | None = None
    # The config came with a load request (a client's): every path it names must lead to
    # something inside the model's directory (config/confine.py).
    confined: bool = False
    # An instance-group update (repository/instance_update.py): create only these of the
    # config's instances (None: all of them).
    only: frozenset[str] | None = None

    def model_file(self, default: str) -> Path:
        name: str = self.config.default_model_filename
        if not name:
            return self.version_dir / default
        if self.confined:
            return client_path(self.model_dir, self.version_dir, "default_model_filename", name)
        return self.version_dir / name


def instance_names(spec: ModelSpec, ctx: LoadContext) -> list[str]:
    """The instances a load creates, in the config's order: each group's ``<name>_<i>``
    (Triton's names), or only those of them an instance-group update adds."""
    names = [f"{g.name}_{i}" for g in spec.config.instance_group for i in range(g.count)]
    return names if ctx.only is None else [n for n in names if n in ctx.only]


class ModelInstance(Protocol):
    name: str

    async def execute(self, requests: list[InferenceRequest]) -> None:
        """One execution over ``requests`` (a batch)."""

    async def execute_each(self, requests: list[InferenceRequest]) -> None:
        """One execution per request, in order (requests that queued up meanwhile)."""

    async def is_ready(self) -> bool: ...

    async def close(self) -> None: ...


class InlineInstance(Protocol):
    """An instance that can also answer a request synchronously on the event loop when that
    is cheaper than scheduling it (see OnnxInstance). The scheduler asks ``cheap`` and, if
    so, calls ``run_now``, which answers through the request's sender; statistics stay the
    scheduler's."""

    def cheap(self, requests: list[InferenceRequest]) -> bool: ...

    def run_now(self, request: InferenceRequest) -> None: ...


def is_inline(instance: object) -> bool:
    """Whether ``instance`` is an ``InlineInstance`` (has both methods): what
    ``@runtime_checkable`` would check, which mypyc refuses on a compiled Protocol."""
    return callable(getattr(instance, "cheap", None)) and callable(
        getattr(instance, "run_now", None)
    )


class StartedInstance(Protocol):
    """An instance that can also start executions without a task (see PythonInstance): the
    scheduler of an idle one calls ``start`` instead of awaiting ``execute_each`` in a task
    of its own, which at one request in flight is a good part of the round trip. ``start``
    sends one execution per request and calls ``done`` once, on the loop, when all are
    answered; it returns False, with nothing sent, when the executions have to wait (the
    scheduler then awaits ``execute_each``), and raises, with nothing sent, for requests it
    cannot send."""

    def start(self, requests: list[InferenceRequest], done: Callable[[], None]) -> bool: ...


def is_started(instance: object) -> bool:
    """Whether ``instance`` is a ``StartedInstance`` (has ``start``): what
    ``@runtime_checkable`` would check, which mypyc refuses on a compiled Protocol."""
    return callable(getattr(instance, "start", None))


class BatchStartedInstance(Protocol):
    """An instance that can start one execution of a dynamic batch without a task (see
    PythonInstance): the dynamic batcher calls ``start_batch`` instead of awaiting
    ``execute`` in a task of its own (a task, its coroutines and a future per batch).
    ``done`` is called once, on the loop, when the execution is answered (or failed); it
    returns False, with nothing sent, when the execution has to wait (the batcher then
    awaits ``execute``), and raises, with nothing sent, for requests it cannot send."""

    def start_batch(self, requests: list[InferenceRequest], done: Callable[[], None]) -> bool: ...


def starts_batches(instance: object) -> bool:
    """Whether ``instance`` is a ``BatchStartedInstance`` (has ``start_batch``)."""
    return callable(getattr(instance, "start_batch", None))


class Backend(Protocol):
    async def load(self, ctx: LoadContext) -> tuple[ModelSpec, list[ModelInstance]]: ...


def requested_names(spec: ModelSpec, request: InferenceRequest) -> list[str]:
    """The outputs to compute: the requested ones, or every configured output; plus those
    the server itself needs (``extra_outputs``: a sequence's implicit state)."""
    names = [o.name for o in request.outputs] if request.outputs else list(spec.outputs)
    if request.extra_outputs:
        names.extend(n for n in request.extra_outputs if n not in names)
    return names


# DataType.from_numpy's numeric answers, read here from compiled code (datatypes.py is not
# compiled: its classmethod runs interpreted, twice per response of two outputs).
_NUMERIC: Final[dict[np.dtype, DataType]] = {}


def output_tensor(spec: ModelSpec, name: str, array: np.ndarray) -> Tensor:
    """Wrap a backend's numpy output as a Tensor: the datatype from its dtype, and the shape
    clients see (config ``dims``) where the config gives the output a ``reshape``."""
    dtype = array.dtype
    datatype = _NUMERIC.get(dtype)
    if datatype is None:
        datatype = DataType.from_numpy(dtype)
        if datatype is not None and dtype.kind not in "OSU":  # few: numeric dtypes only
            _NUMERIC[dtype] = datatype
    if datatype is None:
        raise internal(f"output '{name}' has unsupported numpy dtype {array.dtype}")
    io = spec.outputs.get(name)
    if io is not None and io.reshape is not None:
        batch = array.shape[:1] if spec.max_batch_size and array.ndim else ()
        array = array.reshape(batch + io.dims)
    return Tensor(name, datatype, array.shape, array)


def send_error(request: InferenceRequest, version: str, error: Exception) -> None:
    assert request.sender is not None
    request.sender.send(
        InferenceResponse(request.model_name, version, request.id, error=error), True
    )
