"""Triton's raw binary request (binary tensor data extension): an HTTP body that is nothing
but the bytes of a model's one input (``Inference-Header-Content-Length: 0``).

The input's name, datatype and shape come from the model's configuration, as Triton core's
``InferenceRequest::Normalize`` deduces them: the model must have exactly one input; the shape
is batch 1 (for a batching model) plus the input's dims, where at most one dimension may be
variable and is computed from the body's size; a BYTES input must have the shape [1] and the
whole body is its one element.
"""

from __future__ import annotations

from math import prod

import numpy as np

from ..errors import invalid_arg
from ..types import DataType, Tensor


def raw_tensor(
    model: str,
    inputs: list[tuple[str, DataType, tuple[int, ...]]],
    batched: bool,
    body: bytes | bytearray | memoryview,
) -> Tensor:
    """The one input of ``model`` (``inputs``: its configured (name, datatype, dims)) over
    ``body``; INVALID_ARG with Triton's messages when it cannot be deduced."""
    if len(inputs) != 1:
        raise invalid_arg(
            "Raw request must only have 1 input (found 1) to be deduced but got "
            f"{len(inputs)} inputs in '{model}' model configuration"
        )
    name, datatype, dims = inputs[0]
    shape = [1] if batched else []
    variable = [i for i, d in enumerate(dims) if d == -1]
    if len(variable) > 1:
        raise invalid_arg(
            f"The shape of the raw input '{name}' can not be deduced because there are more "
            "than one variable-sized dimension"
        )
    shape += dims
    view = memoryview(body).cast("B")
    if datatype is DataType.BYTES:
        if variable or prod(dims) != 1:
            raise invalid_arg(
                f"For BYTE datatype raw input '{name}', the model must have input shape [1]"
            )
        data = np.empty(1, dtype=object)
        data[0] = bytes(view)
        return Tensor(name, datatype, tuple(shape), data.reshape(shape))
    fixed = prod(d for d in dims if d != -1) * datatype.size
    if variable:
        shape[len(shape) - len(dims) + variable[0]] = len(view) // fixed if fixed else 0
    if prod(shape) * datatype.size != len(view):
        raise invalid_arg(
            f"input byte size mismatch for input '{name}' for model '{model}'. "
            f"Expected {prod(shape) * datatype.size}, got {len(view)}"
        )
    array = np.frombuffer(view, dtype=datatype.dtype).reshape(shape)
    return Tensor(name, datatype, tuple(shape), array)
