"""The configuration checked against the model's own tensors at load, as Triton's tensor
backends check it (onnxruntime_backend ``ValidateInputs`` / ``ValidateOutputs`` with the
backend library's ``CompareDimsSupported``), with Triton's messages: they name the tensor,
the model's shape and the configuration's.

A backend describes what its model declares as ``ModelTensor``s (name, config datatype name,
shape with -1 for a dynamic dimension, or no shape when the framework does not say) and calls
``check_model_io``; ONNX Runtime does now, and a backend that reads a model's signature
(OpenVINO) can with its own tensor list. Pure: no framework is imported here.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from ..config.spec import IOSpec, ModelSpec
from ..errors import internal, invalid_arg
from ..types import DataType

WILDCARD = -1


@dataclass(frozen=True, slots=True)
class ModelTensor:
    """One tensor as the model declares it."""

    name: str
    datatype: str  # the config name (TYPE_FP32); "TYPE_INVALID" when it has none
    shape: tuple[int, ...] | None  # -1: a dynamic dimension; None: the model does not say


def dims_text(shape: Sequence[int]) -> str:
    """Triton's DimsListToString: ``[-1,3,224,224]``."""
    return "[" + ",".join(str(d) for d in shape) + "]"


def expected_input_count(spec: ModelSpec) -> int:
    """How many inputs the model must have: the configured ones that are not optional (an
    optional input may be an initializer), one per batch_input, the sequence controls and
    the implicit states (Triton's ``expected_input_cnt``)."""
    count = sum(1 for io in spec.inputs.values() if not io.optional) + len(spec.batch_inputs)
    sequence = spec.sequence
    if sequence is not None:
        controls = (sequence.start, sequence.end, sequence.ready, sequence.corrid)
        count += sum(1 for c in controls if c is not None) + len(sequence.states)
    return count


def check_model_io(
    spec: ModelSpec,
    inputs: Sequence[ModelTensor],
    outputs: Sequence[ModelTensor],
    supported: Collection[DataType],
    extra_inputs: Sequence[ModelTensor] = (),
) -> None:
    """Fail the load (INVALID_ARG, or INTERNAL for a datatype the framework has no use for)
    where the configuration disagrees with the model: input count, a name the model does not
    have, a datatype, a rank or a fixed dimension. ``extra_inputs``: tensors a request may
    also feed that do not count as inputs (ONNX's overridable initializers)."""
    if len(inputs) != expected_input_count(spec):
        raise invalid_arg(
            f"unable to load model '{spec.name}', configuration expects "
            f"{expected_input_count(spec)} inputs, model provides {len(inputs)}"
        )
    model_inputs = {t.name: t for t in (*inputs, *extra_inputs)}
    for io in spec.inputs.values():
        _check_input(spec, io, model_inputs, supported)
    model_outputs = {t.name: t for t in outputs}
    batch_outputs = {n for b in spec.batch_outputs for n in b.targets}
    for io in spec.outputs.values():
        tensor = _find(io.name, model_outputs, "output")
        _check_datatype(spec, io, tensor, "output", supported)
        if io.name not in batch_outputs:
            _check_shape(spec, io, tensor, exact=True)


def _check_input(
    spec: ModelSpec,
    io: IOSpec,
    model_inputs: Mapping[str, ModelTensor],
    supported: Collection[DataType],
) -> None:
    if io.optional and spec.max_batch_size != 0:
        raise invalid_arg(
            f"unable to load model '{spec.name}', optional input '{io.name}' is not "
            "supported for models that support batching"
        )
    tensor = _find(io.name, model_inputs, "input")
    _check_datatype(spec, io, tensor, "input", supported)
    if io.allow_ragged:
        _check_ragged(spec, io, tensor)
    else:
        _check_shape(spec, io, tensor, exact=False)


def _find(name: str, tensors: Mapping[str, ModelTensor], kind: str) -> ModelTensor:
    tensor = tensors.get(name)
    if tensor is None:
        allowed = ", ".join(sorted(tensors))
        raise invalid_arg(f"unexpected inference {kind} '{name}', allowed {kind}s are: {allowed}")
    return tensor


def _check_datatype(
    spec: ModelSpec, io: IOSpec, tensor: ModelTensor, kind: str, supported: Collection[DataType]
) -> None:
    expected = io.datatype.config_name
    if io.datatype not in supported:
        raise internal(
            f"unsupported datatype {expected} for {kind} '{io.name}' for model '{spec.name}'"
        )
    if tensor.datatype != expected:
        raise invalid_arg(
            f"unable to load model '{spec.name}', configuration expects datatype {expected} "
            f"for {kind} '{io.name}', model provides {tensor.datatype}"
        )


def _check_ragged(spec: ModelSpec, io: IOSpec, tensor: ModelTensor) -> None:
    if io.optional:
        raise invalid_arg(
            f"unable to load model '{spec.name}', configuration expects model provides input "
            f"with shape [-1] for ragged input '{io.name}', which is not supported for "
            "optional input"
        )
    if tensor.shape is not None and tensor.shape != (WILDCARD,):
        raise invalid_arg(
            f"unable to load model '{spec.name}', configuration expects model provides input "
            f"with shape [-1]  for ragged input '{io.name}', model provides "
            f"{dims_text(tensor.shape)}"
        )


def _check_shape(spec: ModelSpec, io: IOSpec, tensor: ModelTensor, exact: bool) -> None:
    """The configured shape (its reshape, where it has one) against the model's."""
    if tensor.shape is None:
        return
    dims = io.reshape if io.reshape is not None else io.dims
    if not tensor.shape:
        if any(d != 1 for d in dims):
            raise invalid_arg(
                f"unable to load model '{spec.name}', scalar tensor '{io.name}', should only "
                "provide 1 in the model configuration when the model doesn't support "
                f"batching. Model configuration provided: {dims_text(dims)}."
            )
        return
    compare_dims(spec.name, io.name, tensor.shape, dims, spec.max_batch_size, exact)


def compare_dims(
    model: str,
    name: str,
    model_shape: tuple[int, ...],
    dims: tuple[int, ...],
    max_batch_size: int,
    exact: bool,
) -> None:
    """Triton's CompareDimsSupported: with batching the model's first dimension must be -1,
    then rank and each dimension must agree (a model's -1 takes any configured value unless
    ``exact``, as for outputs)."""
    prefix = f"model '{model}', tensor '{name}': "
    full = (WILDCARD, *dims) if max_batch_size > 0 else dims
    if max_batch_size > 0 and (not model_shape or model_shape[0] != WILDCARD):
        raise invalid_arg(
            prefix + "for the model to support batching the shape should have at least 1 "
            "dimension and the first dimension must be -1; but shape expected by the model "
            f"is {dims_text(model_shape)}"
        )
    same = len(model_shape) == len(full) and all(
        m == c for m, c in zip(model_shape, full, strict=True) if exact or m != WILDCARD
    )
    if same:
        return
    configured = (
        f"{len(full)} dimensions (an initial batch dimension because max_batch_size > 0 "
        f"followed by the explicit tensor shape, making complete shape {dims_text(full)})"
        if max_batch_size > 0
        else f"{len(dims)} dimensions (shape {dims_text(dims)})"
    )
    raise invalid_arg(
        prefix + f"the model expects {len(model_shape)} dimensions (shape "
        f"{dims_text(model_shape)}) but the model configuration specifies {configured}"
    )
