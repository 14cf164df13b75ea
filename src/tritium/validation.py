"""A request's inputs and requested outputs checked against one model version's config
(Triton's InferenceRequest::Normalize): the per-model tables are built once at load
(``repository/model.py``), and a check reads only them and the request's tensors."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Sequence
from typing import Final

from .datatypes import DataType
from .errors import invalid_arg
from .types import RequestedOutput, Tensor

_BATCHING_NOTE: Final = (
    ". NOTE: Setting a non-zero max_batch_size in the model config requires a batch "
    "dimension to be prepended to each input shape. If you want to specify the full "
    "shape including the batch dim in your input dims config, try setting "
    "max_batch_size to zero. See the model configuration docs for more info on "
    "max_batch_size."
)


class InputCheck:
    """What is checked of one input: its datatype, its shape as the client sees it (with the
    batch dimension when the model batches), its ``reshape`` and whether it is optional."""

    __slots__ = ("datatype", "full_dims", "reshape", "optional")

    def __init__(
        self,
        datatype: DataType,
        full_dims: tuple[int, ...],
        reshape: tuple[int, ...] | None,
        optional: bool,
    ) -> None:
        self.datatype = datatype
        self.full_dims = full_dims
        self.reshape = reshape
        self.optional = optional


class Validator:
    """One model version's checks of a request (native fields when compiled: the config's
    own objects are interpreted ones, each field a lookup by name)."""

    __slots__ = ("name", "_inputs", "_outputs", "_max_batch", "_required", "_note")

    def __init__(
        self, name: str, inputs: dict[str, InputCheck], outputs: Collection[str], max_batch: int
    ) -> None:
        self.name = name
        self._inputs = inputs  # in the config's order
        self._outputs = frozenset(outputs)
        self._max_batch = max_batch
        self._required = sum(1 for check in inputs.values() if not check.optional)
        self._note = _BATCHING_NOTE if max_batch > 0 else ""

    def validate(self, tensors: list[Tensor], requested: tuple[RequestedOutput, ...]) -> int:
        """Check the inputs (``reshape`` applied in place: ``tensors`` is the request's own
        list, the client's tensors stay as sent) and the requested outputs. Returns the
        request's batch size (1 for a model without batching)."""
        inputs = self._inputs
        max_batch = self._max_batch
        batch = -1
        seen = 0
        if len(tensors) > len(inputs):  # Triton counts first (InferenceRequest::Normalize)
            self._missing_inputs(tensors)
        for index in range(len(tensors)):
            tensor = tensors[index]
            check = inputs.get(tensor.name)
            if check is None:
                raise invalid_arg(
                    f"unexpected inference input '{tensor.name}' for model '{self.name}'"
                )
            self._check_tensor(tensor, check)
            shape = tensor.shape
            if max_batch:
                if batch == -1:
                    batch = shape[0]
                elif shape[0] != batch:
                    raise invalid_arg(
                        f"input '{tensor.name}' batch size does not match other inputs for "
                        f"'{self.name}'"
                    )
            if check.reshape is not None:
                new_shape = ((shape[0],) if max_batch else ()) + check.reshape
                data = tensor.data.reshape(new_shape)
                tensors[index] = tensor.with_data(data, data.shape)
            if not check.optional:
                seen += 1
        if seen != self._required:
            self._missing_inputs(tensors)
        if batch > max_batch > 0:
            raise invalid_arg(
                f"inference request batch-size must be <= {max_batch} for '{self.name}'"
            )
        if requested:
            self._check_outputs(requested)
        return batch if batch > 0 else 1

    def _check_outputs(self, requested: tuple[RequestedOutput, ...]) -> None:
        outputs = self._outputs
        for output in requested:
            if output.name not in outputs:
                raise invalid_arg(
                    f"unexpected inference output '{output.name}' for model '{self.name}'"
                )
        if len(requested) > len(outputs):  # then one is asked twice (Triton's text)
            dup = _repeated([output.name for output in requested])
            raise invalid_arg(f"output '{dup}' already requested")

    def _check_tensor(self, tensor: Tensor, check: InputCheck) -> None:
        if tensor.datatype is not check.datatype:
            raise invalid_arg(
                f"inference input '{tensor.name}' data-type is '{tensor.datatype.wire}', "
                f"but model '{self.name}' expects '{check.datatype.wire}'"
            )
        shape, full = tensor.shape, check.full_dims
        fits = len(shape) == len(full)
        if fits:
            for index in range(len(full)):
                expected = full[index]
                if expected != -1 and shape[index] != expected:
                    fits = False
                    break
        if not fits:
            raise invalid_arg(
                f"unexpected shape for input '{tensor.name}' for model '{self.name}'. "
                f"Expected {_dims(full)}, got {_dims(shape)}{self._note}"
            )

    def _missing_inputs(self, tensors: list[Tensor]) -> None:
        got = [t.name for t in tensors]
        dup = _repeated(got)
        if dup is not None:
            raise invalid_arg(f"input '{dup}' is specified more than once for model '{self.name}'")
        inputs = self._inputs
        missing = [n for n, check in inputs.items() if not check.optional and n not in got]
        total, required = len(inputs), self._required
        expected = (
            f"expected {required} inputs"
            if total == required
            else f"expected number of inputs between {required} and {total}"
        )
        raise invalid_arg(
            f"{expected} but got {len(got)} inputs for model '{self.name}'. Got input(s) "
            f"{_names(got)}, but missing required input(s) {_names(missing)}. Please provide "
            "all required input(s)."
        )


def _dims(shape: Sequence[int]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


def _repeated(names: list[str]) -> str | None:
    """The first of ``names`` that occurs more than once (None: none does)."""
    counts = Counter(names)
    return next((name for name in names if counts[name] > 1), None)


def _names(names: list[str]) -> str:
    return "[" + ",".join(f"'{n}'" for n in names) + "]"
