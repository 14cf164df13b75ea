"""``sequence_batching`` of a model config, validated once at load into a frozen
``SequenceConfig``: the strategy and its knobs, the control tensors (with their false/true
values ready to hand to a model), and the implicit state with its initial value.

The checks and their messages are Triton core's (model_config_utils.cc
``GetBooleanSequenceControlProperties`` / ``GetTypedSequenceControlProperties``, and the
sequence batch scheduler's ``GenerateInitialStateData``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ServerError
from ..tensor_codec import bytes_array
from ..types import DataType
from .files import folder_file, model_file
from .model_config import ConfigProblem, ModelConfig, mc

_Control = mc.ModelSequenceBatching.Control
START, END, READY, CORRID = (
    _Control.CONTROL_SEQUENCE_START,
    _Control.CONTROL_SEQUENCE_END,
    _Control.CONTROL_SEQUENCE_READY,
    _Control.CONTROL_SEQUENCE_CORRID,
)
_CORRID_TYPES = (
    DataType.UINT64,
    DataType.INT64,
    DataType.UINT32,
    DataType.INT32,
    DataType.BYTES,
)
INITIAL_STATE_FOLDER = "initial_state"
DEFAULT_IDLE_US = 1_000_000


@dataclass(frozen=True, slots=True)
class BoolControl:
    """A START / END / READY control: the tensor name and its false and true values, each a
    one-element array of the control's datatype."""

    name: str
    datatype: DataType
    false: np.ndarray
    true: np.ndarray

    def value(self, on: bool) -> np.ndarray:
        return self.true if on else self.false


@dataclass(frozen=True, slots=True)
class StateSpec:
    """One implicit state: the model reads ``input_name`` and writes ``output_name``; the
    server keeps the value between the requests of a sequence. ``initial`` is the value at
    START, shaped as one request's tensor (batch dimension included when the model batches)."""

    input_name: str
    output_name: str
    datatype: DataType
    dims: tuple[int, ...]
    initial: np.ndarray


@dataclass(frozen=True, slots=True)
class SequenceConfig:
    oldest: bool  # the oldest strategy (else direct)
    max_idle_ns: int
    slots: int  # sequence slots per instance
    batched: bool  # max_batch_size > 0: control and state tensors get a batch dimension
    start: BoolControl | None = None
    end: BoolControl | None = None
    ready: BoolControl | None = None
    corrid: tuple[str, DataType] | None = None
    states: tuple[StateSpec, ...] = ()
    max_queue_delay_ns: int = 0
    minimum_slot_utilization: float = 0.0  # direct
    preferred: tuple[int, ...] = ()  # oldest
    preserve_ordering: bool = False  # oldest
    # iterative_sequence: a request without a correlation ID gets one of the server's (and
    # START); the model may reschedule a request; its release ends its sequence.
    iterative: bool = False

    @property
    def state_outputs(self) -> tuple[str, ...]:
        return tuple(s.output_name for s in self.states)

    @property
    def added_inputs(self) -> frozenset[str]:
        """The inputs the batcher adds to a request before it runs (controls, state)."""
        names = {c.name for c in (self.start, self.end, self.ready) if c is not None}
        if self.corrid is not None:
            names.add(self.corrid[0])
        return frozenset(names | {s.input_name for s in self.states})


def sequence_config(
    config: ModelConfig, problem: ConfigProblem, model_dir: Path | None
) -> SequenceConfig | None:
    """The validated ``sequence_batching`` of a normalised config, or None without one."""
    if not config.HasField("sequence_batching"):
        return None
    sb = config.sequence_batching
    name = config.name
    if config.response_cache.enable:
        raise problem.error(
            "response_cache",
            f"Response Cache does not currently support model {name} with sequence batching "
            "scheduler. Please disable the response cache.",
        )
    oldest = sb.WhichOneof("strategy_choice") == "oldest"
    slots = max(1, config.max_batch_size)
    delay_us, utilization, ordering = 0, 0.0, False
    preferred: tuple[int, ...] = ()
    if oldest:
        if sb.oldest.max_candidate_sequences > 0:
            slots = sb.oldest.max_candidate_sequences
        preferred = tuple(sorted(set(sb.oldest.preferred_batch_size)))
        for size in preferred:
            if size <= 0:
                raise problem.error(
                    "sequence_batching.oldest.preferred_batch_size",
                    f"sequence batching preferred batch size must be positive for {name}",
                )
            if size > config.max_batch_size:
                raise problem.error(
                    "sequence_batching.oldest.preferred_batch_size",
                    f"sequence batching preferred batch size must be <= max batch size for {name}",
                )
        delay_us, ordering = sb.oldest.max_queue_delay_microseconds, sb.oldest.preserve_ordering
    else:
        utilization = sb.direct.minimum_slot_utilization
        if not 0.0 <= utilization <= 1.0:
            raise problem.error(
                "sequence_batching.direct.minimum_slot_utilization",
                f"sequence batching minimum slot utilization must be in range (0.0, 1.0] for "
                f"{name}",
            )
        delay_us = sb.direct.max_queue_delay_microseconds
    batched = config.max_batch_size > 0
    return SequenceConfig(
        oldest=oldest,
        max_idle_ns=(sb.max_sequence_idle_microseconds or DEFAULT_IDLE_US) * 1000,
        slots=slots,
        batched=batched,
        start=_bool_control(sb, START, name, problem),
        end=_bool_control(sb, END, name, problem),
        ready=_bool_control(sb, READY, name, problem),
        corrid=_corrid_control(sb, name, problem),
        states=tuple(_states(sb, batched, problem, model_dir)),
        max_queue_delay_ns=delay_us * 1000,
        minimum_slot_utilization=utilization,
        preferred=preferred,
        preserve_ordering=ordering,
        iterative=sb.iterative_sequence,
    )


def _controls_of(sb: Any, kind: int, name: str, problem: ConfigProblem) -> tuple[str, Any] | None:
    """The (tensor name, Control) of ``kind``, with Triton's checks of the whole list."""
    seen_tensors: set[str] = set()
    found: tuple[str, Any] | None = None
    kind_name = _Control.Kind.Name(kind)
    for control_input in sb.control_input:
        if not control_input.name:
            raise problem.error(
                "sequence_batching.control_input",
                f"sequence batching control tensor must have a name for {name}",
            )
        if control_input.name in seen_tensors:
            raise problem.error(
                "sequence_batching.control_input",
                f"sequence batching control tensor '{control_input.name}' is specified for "
                f"multiple control kinds for {name}",
                f'"{control_input.name}"',
            )
        seen_tensors.add(control_input.name)
        for control in control_input.control:
            if control.kind != kind:
                continue
            if found is not None:
                raise problem.error(
                    "sequence_batching.control_input",
                    f"sequence batching specifies multiple {kind_name} tensors for {name}",
                    kind_name,
                )
            found = (control_input.name, control)
    return found


def _bool_control(sb: Any, kind: int, name: str, problem: ConfigProblem) -> BoolControl | None:
    found = _controls_of(sb, kind, name, problem)
    if found is None:
        return None
    tensor, control = found
    kind_name = _Control.Kind.Name(kind)
    given = [
        (field, list(getattr(control, field)), datatype)
        for field, datatype in (
            ("int32_false_true", DataType.INT32),
            ("fp32_false_true", DataType.FP32),
            ("bool_false_true", DataType.BOOL),
        )
        if len(getattr(control, field))
    ]
    where = "sequence_batching.control_input"
    if not given:
        raise problem.error(
            where,
            "sequence batching must specify either 'int32_false_true', 'fp32_false_true' or "
            f"'bool_false_true' for {kind_name} for {name}",
            kind_name,
        )
    if len(given) > 1:
        raise problem.error(
            where,
            "sequence batching specifies more than one from 'int32_false_true', "
            f"'fp32_false_true' and 'bool_false_true' for {kind_name} for {name}",
            kind_name,
        )
    field, values, datatype = given[0]
    if len(values) != 2:
        raise problem.error(
            where,
            f"sequence batching control '{field}' must have exactly 2 entries for {kind_name} "
            f"for {name}",
            kind_name,
        )
    false, true = (np.array([v], dtype=datatype.dtype) for v in values)
    false.flags.writeable = true.flags.writeable = False
    return BoolControl(tensor, datatype, false, true)


def _corrid_control(sb: Any, name: str, problem: ConfigProblem) -> tuple[str, DataType] | None:
    found = _controls_of(sb, CORRID, name, problem)
    if found is None:
        return None
    tensor, control = found
    if control.int32_false_true or control.fp32_false_true or control.bool_false_true:
        raise problem.error(
            "sequence_batching.control_input",
            "sequence batching must not specify either 'int32_false_true', 'fp32_false_true' "
            f"or 'bool_false_true' for CONTROL_SEQUENCE_CORRID for {name}",
            "CONTROL_SEQUENCE_CORRID",
        )
    datatype = DataType.from_config(mc.DataType.Name(control.data_type))
    if datatype not in _CORRID_TYPES:
        raise problem.error(
            "sequence_batching.control_input",
            f"unexpected data type for control CONTROL_SEQUENCE_CORRID for {name}. Allowed "
            "data types are TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 and TYPE_STRING",
            "CONTROL_SEQUENCE_CORRID",
        )
    assert datatype is not None
    return tensor, datatype


def _states(
    sb: Any, batched: bool, problem: ConfigProblem, model_dir: Path | None
) -> list[StateSpec]:
    states: list[StateSpec] = []
    inputs: set[str] = set()
    outputs: set[str] = set()
    for state in sb.state:
        where = "sequence_batching.state"
        if not state.input_name or not state.output_name:
            raise problem.error(where, "a state must name its 'input_name' and 'output_name'")
        if state.input_name in inputs:
            raise problem.error(
                where, f"State input name '{state.input_name}' specified more than once."
            )
        if state.output_name in outputs:
            raise problem.error(
                where, f"State output name '{state.output_name}' specified more than once."
            )
        inputs.add(state.input_name)
        outputs.add(state.output_name)
        if state.use_growable_memory:
            raise problem.error(
                f"{where}.use_growable_memory",
                "'use_growable_memory' can only work with KIND_GPU model instances right now. "
                "Please either change the instance type to KIND_GPU or set "
                f"'use_growable_memory' to false for state input '{state.input_name}'.",
            )
        datatype = DataType.from_config(mc.DataType.Name(state.data_type))
        if datatype is None:
            raise problem.error(
                f"{where}.data_type", f"state '{state.input_name}' must specify 'data_type'"
            )
        dims = tuple(state.dims)
        initial = _initial_state(state, datatype, dims, batched, problem, model_dir)
        states.append(StateSpec(state.input_name, state.output_name, datatype, dims, initial))
    return states


def _initial_state(
    state: Any,
    datatype: DataType,
    dims: tuple[int, ...],
    batched: bool,
    problem: ConfigProblem,
    model_dir: Path | None,
) -> np.ndarray:
    """The state's value at START: ``initial_state`` (zeros or a data file), else zeros with
    every variable dimension taken as 1 (Triton's first-request shape)."""
    batch = (1,) if batched else ()
    where = "sequence_batching.state.initial_state"
    name = state.input_name
    if len(state.initial_state) > 1:
        raise problem.error(
            where,
            f"initial_state field for state input '{name}' must contain exactly one or zero "
            f"element. Found '{len(state.initial_state)}' elements.",
        )
    if not state.initial_state:
        return _zeros(datatype, batch + tuple(1 if d == -1 else d for d in dims))
    initial = state.initial_state[0]
    if initial.data_type != state.data_type:
        raise problem.error(
            where,
            f"The data type used for 'initial_state' field of state '{name}' does not match "
            "the state data type.",
        )
    if not initial.name:
        raise problem.error(
            where,
            f"Field 'name' must be set when using initial_state for state input '{name}'.",
        )
    shape = tuple(initial.dims)
    if len(shape) != len(dims):
        raise problem.error(
            where,
            "Number of dimensions in 'initial_state' doesn't match the size of 'state' "
            f"dimensions for state input '{name}'. {len(shape)} != {len(dims)}",
        )
    for got, want in zip(shape, dims, strict=True):
        if got == -1:
            raise problem.error(
                where,
                f"'initial_state' field for state input name '{name}' contains variable "
                "dimensions.",
            )
        if want != -1 and got != want:
            raise problem.error(
                where,
                f"'initial_state' dim for input name '{name}' doesn't match 'state' dim "
                f"description. {got} != {want}",
            )
    choice = initial.WhichOneof("state_data")
    if choice == "zero_data":
        return _zeros(datatype, batch + shape)
    if choice == "data_file":
        return _from_file(initial.data_file, datatype, batch + shape, name, problem, model_dir)
    raise problem.error(
        where, f"initial_state setting expects state'{name}' to have state_data set"
    )


def _zeros(datatype: DataType, shape: tuple[int, ...]) -> np.ndarray:
    if datatype is DataType.BYTES:
        array = np.full(shape, b"", dtype=object)
    else:
        array = np.zeros(shape, dtype=datatype.dtype)
    array.flags.writeable = False
    return array


def _from_file(
    filename: str,
    datatype: DataType,
    shape: tuple[int, ...],
    name: str,
    problem: ConfigProblem,
    model_dir: Path | None,
) -> np.ndarray:
    """Raw little-endian element bytes from ``<model dir>/initial_state/<file>``; a name
    that would leave that folder is refused."""
    where = "sequence_batching.state.initial_state.data_file"
    if model_dir is None:
        raise problem.error(where, "a data_file needs the model's directory")
    path = folder_file(model_dir, INITIAL_STATE_FOLDER, filename)
    if path is None or path.parent != model_file(model_dir, INITIAL_STATE_FOLDER):
        folder = model_dir / INITIAL_STATE_FOLDER
        raise problem.error(
            where,
            f"data_file '{filename}' must name a file directly inside '{folder}' (after "
            "following links, inside the model's directory)",
        )
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise problem.error(where, f"unable to read '{path}': {exc.strerror}") from None
    count = int(np.prod(shape))
    if datatype is DataType.BYTES:
        try:  # Triton's BYTES layout: each element a u32 LE length, then its bytes
            array = bytes_array(data, name, count).reshape(shape)
        except ServerError as exc:
            raise problem.error(where, f"'{path}': {exc.message}") from None
    else:
        needed = count * datatype.size
        if len(data) < needed:
            raise problem.error(
                where,
                f"initial_state setting expects {needed} bytes, but the data provided from "
                f"{filename}only has {len(data)} bytes.",
            )
        array = np.frombuffer(data[:needed], dtype=datatype.dtype).reshape(shape).copy()
    array.flags.writeable = False
    return array
