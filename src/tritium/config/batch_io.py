"""``batch_input`` and ``batch_output`` (ragged batching): validated at load into frozen
value objects, with Triton core's checks and messages (model_config_utils.cc
``ValidateBatchIO``). What they compute for a batch is ``backends/ragged.py``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..types import DataType
from .model_config import ConfigProblem, ModelConfig, mc

ELEMENT_COUNT = "BATCH_ELEMENT_COUNT"
ACCUMULATED = "BATCH_ACCUMULATED_ELEMENT_COUNT"
ACCUMULATED_WITH_ZERO = "BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO"
MAX_AS_SHAPE = "BATCH_MAX_ELEMENT_COUNT_AS_SHAPE"
ITEM_SHAPE = "BATCH_ITEM_SHAPE"
ITEM_SHAPE_FLATTEN = "BATCH_ITEM_SHAPE_FLATTEN"


@dataclass(frozen=True, slots=True)
class BatchInput:
    """A tensor the server computes for each batch and gives the model as extra inputs."""

    kind: str  # one of the names above
    targets: tuple[str, ...]
    datatype: DataType  # FP32 or INT32
    source: str


@dataclass(frozen=True, slots=True)
class BatchOutput:
    """BATCH_SCATTER_WITH_INPUT_SHAPE: each request gets its part of ``targets`` with the
    shape of its ``source`` input (the output's -1 dims taken from it)."""

    targets: tuple[str, ...]
    source: str
    dims: tuple[int, ...]  # the output's config dims, batch dimension included when batching


def batch_io(
    config: ModelConfig, problem: ConfigProblem
) -> tuple[tuple[BatchInput, ...], tuple[BatchOutput, ...]]:
    """The config's batch inputs and outputs, checked as Triton checks them."""
    inputs = {io.name for io in config.input}
    outputs = {io.name: io for io in config.output}
    suffix = f" for {config.name}"
    batch_inputs = []
    for entry in config.batch_input:
        kind = mc.BatchInput.Kind.Name(entry.kind)
        if len(entry.source_input) != 1:
            raise problem.error(
                "batch_input.source_input",
                f"batch input kind '{kind}' expects 1 source input, got "
                f"{len(entry.source_input)}{suffix}",
            )
        if entry.data_type not in (mc.TYPE_INT32, mc.TYPE_FP32):
            raise problem.error(
                "batch_input.data_type",
                f"batch input data type must be TYPE_INT32 or TYPE_FP32{suffix}",
            )
        _known_source(entry.source_input[0], inputs, "batch_input", problem, suffix)
        datatype = DataType.INT32 if entry.data_type == mc.TYPE_INT32 else DataType.FP32
        targets = tuple(entry.target_name)
        batch_inputs.append(BatchInput(kind, targets, datatype, entry.source_input[0]))
    return tuple(batch_inputs), _batch_outputs(config, problem, inputs, outputs)


def _batch_outputs(
    config: ModelConfig, problem: ConfigProblem, inputs: set[str], outputs: dict[str, Any]
) -> tuple[BatchOutput, ...]:
    suffix = f" for {config.name}"
    batch_outputs = []
    for entry in config.batch_output:
        kind = mc.BatchOutput.Kind.Name(entry.kind)
        if len(entry.source_input) != 1:
            raise problem.error(
                "batch_output.source_input",
                f"batch output kind '{kind}' expects 1 source input, got "
                f"{len(entry.source_input)}{suffix}",
            )
        _known_source(entry.source_input[0], inputs, "batch_output", problem, suffix)
        for index, target in enumerate(entry.target_name):
            if target not in outputs:
                raise problem.error(
                    "batch_output.target_name",
                    f"unknown target output name '{target}'{suffix}",
                )
            if target in entry.target_name[:index]:
                raise problem.error(
                    "batch_output.target_name",
                    f"target output name '{target}' can only be specified once{suffix}",
                )
        if not entry.target_name:
            raise problem.error(
                "batch_output.target_name", f"batch output must name a target output{suffix}"
            )
        output = outputs[entry.target_name[0]]
        dims = tuple(output.reshape.shape if output.HasField("reshape") else output.dims)
        if config.max_batch_size:
            dims = (-1, *dims)
        batch_outputs.append(BatchOutput(tuple(entry.target_name), entry.source_input[0], dims))
    return tuple(batch_outputs)


def _known_source(
    name: str, inputs: set[str], field: str, problem: ConfigProblem, suffix: str
) -> None:
    if name not in inputs:
        raise problem.error(f"{field}.source_input", f"unknown source input name '{name}'{suffix}")
