"""Ragged batching for tensor backends: what Triton's backend library computes for a batch
(backend_input_collector.cc ``BatchInputShape`` / ``ProcessBatchInput``,
backend_output_responder.cc ``ProcessBatchOutput``), pure numpy.

- A ragged input (``allow_ragged_batch``) reaches the model as one 1-D tensor: every
  request's elements, concatenated, without padding.
- A ``batch_input`` is computed from each request's shape of its source input (the batch
  dimension included): element counts, their running sums (with a leading zero), the largest
  count as a shape, or each batch item's shape.
- A ``batch_output`` is cut back into requests in order, each part shaped as the request's
  source input (where the output's dims are -1).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from math import prod

import numpy as np

from ..config.batch_io import (
    ACCUMULATED,
    ACCUMULATED_WITH_ZERO,
    ELEMENT_COUNT,
    ITEM_SHAPE,
    ITEM_SHAPE_FLATTEN,
    MAX_AS_SHAPE,
    BatchInput,
    BatchOutput,
)
from ..config.spec import ModelSpec
from ..errors import invalid_arg
from ..logs.settings import about_model

log = logging.getLogger("tritium")
Shape = tuple[int, ...]


def warn_batch_io(spec: ModelSpec) -> None:
    """Python models see each request with its own inputs: Triton's Python backend computes
    no batch inputs and scatters no batch outputs, and neither does tritium. Said once per
    load rather than silently."""
    if spec.batch_inputs or spec.batch_outputs:
        log.warning(
            "model '%s': batch_input and batch_output have no effect on a Python model (as in "
            "Triton's Python backend): each request keeps its own inputs and outputs; ragged "
            "inputs only let requests of different shapes share a batch",
            spec.name,
            extra=about_model(spec.name),
        )


def merge_ragged(parts: Sequence[np.ndarray]) -> np.ndarray:
    """A ragged input's batch: each request's elements in order, as one 1-D tensor."""
    if len(parts) == 1:
        return parts[0].reshape(-1)
    return np.concatenate([p.reshape(-1) for p in parts])


def batch_input_array(batch_input: BatchInput, shapes: Sequence[Shape]) -> np.ndarray:
    """The tensor of ``batch_input`` for a batch whose requests' source inputs have
    ``shapes`` (batch dimension first)."""
    dtype = batch_input.datatype.dtype
    kind = batch_input.kind
    counts = [prod(shape) for shape in shapes]
    if kind == ELEMENT_COUNT:
        return np.array(counts, dtype=dtype)
    if kind == ACCUMULATED:
        return np.cumsum(counts, dtype=np.int64).astype(dtype)
    if kind == ACCUMULATED_WITH_ZERO:
        return np.concatenate(([0], np.cumsum(counts, dtype=np.int64))).astype(dtype)
    if kind == MAX_AS_SHAPE:  # only the shape carries meaning (Triton leaves it unset)
        return np.zeros(max(counts, default=0), dtype=dtype)
    if kind in (ITEM_SHAPE, ITEM_SHAPE_FLATTEN):
        return _item_shapes(shapes, dtype, flatten=kind == ITEM_SHAPE_FLATTEN)
    raise invalid_arg(f"unexpected batch input kind '{kind}'")


def _item_shapes(shapes: Sequence[Shape], dtype: np.dtype, flatten: bool) -> np.ndarray:
    """One row per batch item (a request of batch size n has n items): its non-batch dims.
    Every source must have the same rank for the rows to form a matrix, as in Triton."""
    ranks = {len(shape) - 1 for shape in shapes}
    if len(ranks) > 1:
        raise invalid_arg("unexpected total byte size for batch input")
    rank = ranks.pop() if ranks else 0
    rows = [shape[1:] for shape in shapes for _ in range(shape[0])]
    array = np.array(rows, dtype=dtype).reshape(len(rows), rank)
    return array.reshape(-1) if flatten else array


def scatter_output(
    batch_output: BatchOutput, array: np.ndarray, shapes: Sequence[Shape]
) -> list[np.ndarray]:
    """Each request's part of a batch output: the output's -1 dims taken from the request's
    source input shape, its elements the next ones of ``array`` in order."""
    flat = array.reshape(-1)
    parts = []
    start = 0
    for shape in shapes:
        dims = tuple(
            shape[i] if d == -1 and i < len(shape) else d for i, d in enumerate(batch_output.dims)
        )
        stop = start + prod(dims)
        if stop > flat.size:
            raise invalid_arg(
                f"batch output '{batch_output.targets[0]}' has {flat.size} elements, fewer "
                "than its requests' source input shapes need"
            )
        parts.append(flat[start:stop].reshape(dims))
        start = stop
    return parts
