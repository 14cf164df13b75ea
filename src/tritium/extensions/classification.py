"""The classification extension: a requested output answered as its top-N classes.

A client asks for it per output (HTTP ``"parameters": {"classification": N}``, gRPC's
``classification`` int64 parameter, tritonclient's ``class_count``). As Triton's front-ends do
(server ``src/classification.cc``, ``http_server.cc``, ``grpc/infer_handler.h``), the model
answers as usual and the output is replaced, before encoding, by a BYTES tensor of
``"<score>:<index>"`` strings, ``":<label>"`` appended when the output has a ``label_filename``
and the label is not empty: shape ``[batch, min(N, classes)]`` for a batching model,
``[min(N, classes)]`` otherwise, highest score first (ties: lower index first). Scores print as
C++'s ``std::to_string``: ``%f`` for floats, plain integers for integer types. FP16, BF16,
BOOL and BYTES outputs cannot be classified (Triton's error). The cache and shared memory see
the model's own outputs; classification only changes what the client receives.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import invalid_arg
from ..types import DataType, InferenceResponse, RequestedOutput, Tensor

PARAMETER = "classification"

# Triton's bound on the classes of one batch element (kMaxClassificationElements).
MAX_ELEMENTS = 1_000_000

_INTEGERS = frozenset(
    {
        DataType.UINT8,
        DataType.UINT16,
        DataType.UINT32,
        DataType.UINT64,
        DataType.INT8,
        DataType.INT16,
        DataType.INT32,
        DataType.INT64,
    }
)
_FLOATS = frozenset({DataType.FP32, DataType.FP64})


@dataclass(frozen=True, slots=True)
class Classifier:
    """What one request asked: the class count per output name, with the model's labels and
    whether its outputs carry a batch dimension."""

    counts: Mapping[str, int]
    labels: Mapping[str, tuple[bytes, ...]]
    batched: bool

    def apply(self, response: InferenceResponse) -> None:
        """Replace the classified outputs of ``response`` in place (its list only: tensors are
        not changed, so a cached copy keeps the model's outputs). Raises ServerError."""
        outputs = response.outputs
        for index, tensor in enumerate(outputs):
            count = self.counts.get(tensor.name)
            if count is not None:
                outputs[index] = classify(
                    tensor, count, self.labels.get(tensor.name, ()), self.batched
                )


def classifier_for(
    outputs: Iterable[RequestedOutput], labels: Mapping[str, tuple[bytes, ...]], batched: bool
) -> Classifier | None:
    """The request's classifier, or None when no output asks for classes. The front-ends
    check the parameter's wire form; a count of 0 means "not requested" (tritonclient's
    ``class_count=0``)."""
    counts: dict[str, int] = {}
    for output in outputs:
        value = output.parameters.get(PARAMETER)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise invalid_arg(
                f"invalid value for '{PARAMETER}' parameter of output '{output.name}', "
                "expected a non-negative integer"
            )
        if value:
            counts[output.name] = value
    return Classifier(counts, labels, batched) if counts else None


def classify(tensor: Tensor, count: int, labels: tuple[bytes, ...], batched: bool) -> Tensor:
    """One output tensor as its top-``count`` classes per batch element."""
    datatype = tensor.datatype
    if datatype not in _INTEGERS and datatype not in _FLOATS:
        raise invalid_arg(
            f"class result not available for output due to unsupported type '{datatype.wire}'"
        )
    shape = tensor.shape
    batch = shape[0] if batched and shape else 0
    rows = np.asarray(tensor.data).reshape(max(batch, 1), -1)
    if rows.shape[1] > MAX_ELEMENTS:
        raise invalid_arg("classification output tensor too large")
    kept = min(count, rows.shape[1])
    text = str if datatype in _INTEGERS else _float_text
    strings = [_row(row, kept, labels, text) for row in rows]
    data = np.empty(len(strings) * kept, dtype=object)
    data[:] = [s for row in strings for s in row]
    return Tensor(tensor.name, DataType.BYTES, (batch, kept) if batch else (kept,), data)


def _row(row: np.ndarray, kept: int, labels: tuple[bytes, ...], text: type | object) -> list[bytes]:
    """The ``kept`` highest entries of one batch element, highest first, ties by index."""
    last = row.shape[0] - 1
    order = last - np.argsort(row[::-1], kind="stable")[::-1][:kept]
    out = []
    for index in order.tolist():
        entry = f"{text(row[index].item())}:{index}".encode()  # type: ignore[operator]
        label = labels[index] if index < len(labels) else b""
        out.append(entry + b":" + label if label else entry)
    return out


def _float_text(value: float) -> str:
    """C++'s ``std::to_string`` of a float or double: ``%f``."""
    return f"{value:f}"


# ---------------------------------------------------------------------------- label files


def read_labels(path: Path) -> tuple[bytes, ...]:
    """A label file as Triton reads it (LabelProvider::AddLabels): one label per line,
    bytes kept as they are (a ``\\r`` too), no entry after a final newline."""
    lines = path.read_bytes().split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return tuple(lines)
