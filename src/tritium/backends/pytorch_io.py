"""How a TorchScript model's ``forward()`` takes the configured tensors, decided at load from
its schema as Triton's PyTorch backend decides (``ValidateInputs``, ``ValidateOutputs``,
``GetNamingConvention``), with its messages. Pure: the schema comes in as (argument name,
type kind) pairs, so this module imports no torch.

Inputs are bound, for the whole configuration:

- by **forward argument name** when every configured input is one of ``forward()``'s
  argument names;
- else by **index**, ``<name>__<index>`` (``INPUT__0``), when every name ends that way;
- else in **configuration order** (a warning when a name has ``__`` but no integer index).

A ``forward()`` with one ``Dict[str, Tensor]`` argument takes every input in that dictionary,
keyed by its configured name. Outputs are bound by index (``OUTPUT__0``) when every name ends
``__<index>``, else in configuration order. Sequence controls and implicit states must follow
``<name>__<index>``; batch inputs come after the configured inputs.

What forward() returns is checked against the configuration per execution
(``check_output_shape``): a model is code, and its outputs' shapes are what it decides.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from ..config.spec import IOSpec, ModelSpec
from ..errors import internal, invalid_arg
from ..logs.settings import about_model
from ..types import DataType

log = logging.getLogger("tritium")
DELIMITER = "__"

# The datatypes Triton's PyTorch backend maps to torch (ModelConfigDataTypeToTorchType), plus
# BYTES as List[str].
TENSOR_TYPES = frozenset(
    {
        DataType.BOOL,
        DataType.UINT8,
        DataType.INT8,
        DataType.INT16,
        DataType.INT32,
        DataType.INT64,
        DataType.FP16,
        DataType.FP32,
        DataType.FP64,
    }
)
SUPPORTED_TYPES = TENSOR_TYPES | {DataType.BYTES}


@dataclass(frozen=True, slots=True)
class Binding:
    """Where each tensor goes: ``inputs`` maps a tensor name to its forward() position (or,
    for a dictionary input, is the set of keys); ``outputs`` maps a name to its position in
    what forward() returns."""

    dict_input: bool
    argument_count: int
    inputs: dict[str, int]
    outputs: dict[str, int]


def _index(name: str) -> int | None:
    """The ``<index>`` of ``<name>__<index>`` (after the first ``__``), or None."""
    at = name.find(DELIMITER)
    if at < 0:
        return None
    digits = name[at + len(DELIMITER) :]
    if not digits.isdigit() and digits:
        return None
    return int(digits) if digits else 0  # Triton reads an empty index as 0 (atoi)


def bind(spec: ModelSpec, arguments: Sequence[tuple[str, str]]) -> Binding:
    """The binding of ``spec`` to a forward() whose arguments (``self`` left out) are
    ``arguments``: (name, type kind: "TensorType", "ListType", "DictType", ...)."""
    expected = _expected_inputs(spec)
    dict_input = len(arguments) == 1 and arguments[0][1] == "DictType"
    names = [name for name, _ in arguments]
    if not dict_input:
        _check_argument_types(spec, arguments, expected)
    if not spec.inputs:
        raise internal("model configuration must contain at least one input, none were specified.")
    inputs = _bind_inputs(spec, names, dict_input)
    for io in spec.inputs.values():
        _check_type(spec, io, "input")
    outputs = _bind_outputs(spec)
    return Binding(dict_input, len(arguments), inputs, outputs)


def _expected_inputs(spec: ModelSpec) -> int:
    count = len(spec.inputs) + len(spec.batch_inputs)
    sequence = spec.sequence
    if sequence is not None:
        controls = (sequence.start, sequence.end, sequence.ready, sequence.corrid)
        count += sum(1 for c in controls if c is not None) + len(sequence.states)
    return count


def _check_argument_types(
    spec: ModelSpec, arguments: Sequence[tuple[str, str]], expected: int
) -> None:
    if any(kind == "DictType" for _, kind in arguments[1:]):
        raise internal(
            "Multiple inputs of kind DictType were detected. Only a single input of type "
            "Dict(str, Tensor) is supported."
        )
    for name, kind in arguments:
        if kind not in ("TensorType", "ListType"):
            raise internal(
                f"An input of type '{kind}' was detected in the model ('{name}'). Only a "
                "single input of type Dict(str, Tensor) or input(s) of type Tensor are "
                "supported."
            )
    if len(arguments) != expected:
        raise invalid_arg(
            f"unable to load model '{spec.name}', configuration expects {expected} inputs, "
            f"model provides {len(arguments)}"
        )


def _bind_inputs(spec: ModelSpec, arguments: list[str], dict_input: bool) -> dict[str, int]:
    configured = list(spec.inputs)
    sequence = spec.sequence
    states = [s.input_name for s in sequence.states] if sequence is not None else []
    if dict_input:
        keys = [*configured, *states]
        return {name: 0 for name in keys} | _batch_targets(spec, len(configured))
    by_argument = all(name in arguments for name in configured)
    by_index = not by_argument and all(_index(n) is not None for n in configured)
    if not by_argument and not by_index and any(DELIMITER in n for n in configured):
        log.warning(
            "input '%s' or previous input(s) are neither an input argument to the model '%s' "
            "nor do they follow the <name>__<index> naming convention. Falling back to "
            "enforcing strict ordering from model configuration.",
            next(n for n in configured if DELIMITER in n and _index(n) is None),
            spec.name,
            extra=about_model(spec.name),
        )
    if states and not by_index:
        raise invalid_arg(
            f"PyTorch model '{spec.name}' is using sequence batching with state but not all "
            "inputs and outputs follow the <name>__<index> naming convention. "
        )
    inputs: dict[str, int] = {}
    for position, name in enumerate(configured):
        if by_argument:
            inputs[name] = arguments.index(name)
        else:
            index = _index(name) if by_index else position
            inputs[name] = position if index is None else index
    for name in (*states, *_control_names(spec)):
        inputs[name] = _indexed(spec, name, "input")
    inputs.update(_batch_targets(spec, len(configured)))
    _check_positions(spec, inputs, len(arguments))
    return inputs


def _control_names(spec: ModelSpec) -> list[str]:
    sequence = spec.sequence
    if sequence is None:
        return []
    names = [c.name for c in (sequence.start, sequence.end, sequence.ready) if c is not None]
    if sequence.corrid is not None:
        names.append(sequence.corrid[0])
    return names


def _indexed(spec: ModelSpec, name: str, kind: str) -> int:
    index = _index(name)
    if index is None:
        if kind == "state":
            raise invalid_arg(
                f"PyTorch model '{spec.name}' is using sequence batching with state but state "
                f"'{name}' does not follow the <name>__<index> naming convention. "
            )
        raise internal(f"{kind} '{name}' does not follow <name>__<index> naming convention.")
    return index


def _batch_targets(spec: ModelSpec, first: int) -> dict[str, int]:
    targets = [t for batch_input in spec.batch_inputs for t in batch_input.targets]
    return {name: first + i for i, name in enumerate(targets)}


def _check_positions(spec: ModelSpec, inputs: dict[str, int], count: int) -> None:
    """Each tensor at its own forward() argument (Triton does not check: a wrong index
    would write past its argument list)."""
    taken: dict[int, str] = {}
    for name, index in inputs.items():
        if index >= count:
            raise invalid_arg(
                f"unable to load model '{spec.name}', input '{name}' is forward() argument "
                f"{index}, but the model takes {count} inputs"
            )
        if index in taken:
            raise invalid_arg(
                f"unable to load model '{spec.name}', inputs '{taken[index]}' and '{name}' "
                f"are both forward() argument {index}"
            )
        taken[index] = name


def _bind_outputs(spec: ModelSpec) -> dict[str, int]:
    if not spec.outputs:
        raise internal("model configuration must contain at least one output, none were specified.")
    configured = list(spec.outputs)
    by_index = all(_index(n) is not None for n in configured)
    if not by_index and any(DELIMITER in n for n in configured):
        log.warning(
            "output '%s' or previous output(s) of the model '%s' do not follow the "
            "<name>__<index> naming convention. Falling back to enforcing strict ordering "
            "from model configuration.",
            next(n for n in configured if DELIMITER in n and _index(n) is None),
            spec.name,
            extra=about_model(spec.name),
        )
    outputs: dict[str, int] = {}
    for position, name in enumerate(configured):
        index = _index(name) if by_index else position
        outputs[name] = position if index is None else index
        _check_type(spec, spec.outputs[name], "output")
    sequence = spec.sequence
    for state in sequence.states if sequence is not None else ():
        outputs[state.output_name] = _indexed(spec, state.output_name, "state")
    return outputs


def _check_type(spec: ModelSpec, io: IOSpec, kind: str) -> None:
    if io.datatype not in SUPPORTED_TYPES:
        raise internal(
            f"unsupported datatype {io.datatype.config_name} for {kind} '{io.name}' for "
            f"model '{spec.name}'"
        )
    dims = io.reshape if io.reshape is not None else io.dims
    if io.datatype is DataType.BYTES and len(dims) + (spec.max_batch_size > 0) > 1:
        raise internal(
            f"Triton only supports 1 dimensional List of String as {kind} for '{io.name}' "
            f"for model '{spec.name}'"
        )


def check_output_shape(spec: ModelSpec, name: str, shape: tuple[int, ...], batch: int) -> None:
    """Output ``name`` as forward() returned it against its configured dims (its reshape where
    given), after the batch dimension of ``batch`` rows when max_batch_size > 0; -1 matches
    any size. A model that returns another shape fails the execution, in Triton's words for a
    shape that does not fit (an output of 1,000 elements configured [4] is not sent)."""
    io = spec.outputs.get(name)
    if io is None:
        return  # a state output: the sequence batcher checks it
    dims = io.reshape if io.reshape is not None else io.dims
    expected = ((batch,) if spec.max_batch_size > 0 else ()) + dims
    if len(shape) == len(expected) and all(
        e in (-1, s) for e, s in zip(expected, shape, strict=True)
    ):
        return
    raise internal(
        f"unexpected shape for output '{name}' for model '{spec.name}'. "
        f"Expected {_dims(expected)}, got {_dims(shape)}"
    )


def _dims(shape: Sequence[int]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"
