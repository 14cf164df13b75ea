"""Normalise and validate a ModelConfig, then freeze it into a ModelSpec.

Everything the request path needs (datatype objects, dims, batch rules, rendered JSON) is
computed here, once, at load time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .dynamic_batching import check_dynamic_batching
from ..extensions.classification import read_labels
from ..types import DataType
from .model_config import (
    BACKEND_DEFAULTS,
    PLATFORM_TO_BACKEND,
    ConfigProblem,
    ModelConfig,
    config_to_json,
)
from .model_config import mc
from .batch_io import BatchInput, BatchOutput, batch_io
from .files import model_file
from .model_metrics import MetricSpec, metric_spec
from .sequence import SequenceConfig, sequence_config

if TYPE_CHECKING:
    from .ensemble import EnsemblePlan

# Default instance count per backend for KIND_CPU groups (Triton core's rule).
_CPU_DEFAULT_COUNT = {"onnxruntime": 2, "tensorflow": 2}
_IMAGE_FORMATS = (mc.ModelInput.FORMAT_NHWC, mc.ModelInput.FORMAT_NCHW)
_FILE_TO_BACKEND = {"model.onnx": "onnxruntime", "model.py": "python", "model.pt": "pytorch"}


@dataclass(frozen=True, slots=True)
class IOSpec:
    name: str
    datatype: DataType
    dims: tuple[int, ...]
    reshape: tuple[int, ...] | None
    optional: bool
    label_filename: str = ""
    allow_ragged: bool = False


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A normalised, validated model configuration (shared by every version of a model)."""

    name: str
    config: ModelConfig
    backend: str
    platform: str  # what metadata reports: config.platform, else config.backend
    max_batch_size: int
    inputs: dict[str, IOSpec]
    outputs: dict[str, IOSpec]
    required_inputs: frozenset[str]
    decoupled: bool
    config_json: dict[str, Any]
    ensemble: EnsemblePlan | None = None  # an ensemble's plan (platform "ensemble")
    sequence: SequenceConfig | None = None  # sequence_batching, validated
    # classification: each output's labels (its label_filename), read once at load
    labels: dict[str, tuple[bytes, ...]] = field(default_factory=dict)
    # Ragged batching (issue 14): batch_input / batch_output, validated (config/batch_io.py).
    batch_inputs: tuple[BatchInput, ...] = ()
    batch_outputs: tuple[BatchOutput, ...] = ()
    # metric_tags and model_metrics, for the version's Prometheus metrics
    metrics: MetricSpec = MetricSpec()

    @property
    def instance_count(self) -> int:
        return sum(group.count for group in self.config.instance_group)


def infer_backend(config: ModelConfig, version_dirs: list[Path]) -> None:
    """Fill backend/platform as Triton core does (AutoCompleteBackendFields): from a known
    platform, from a ``default_model_filename`` naming a backend's file, and from the version
    directory's files only when neither a platform nor a file name is given (an unknown
    platform, say ``onnxruntime`` for ``onnxruntime_onnx``, leaves the backend empty:
    ``normalize`` refuses it as Triton does)."""
    if not config.backend and config.platform:
        config.backend = PLATFORM_TO_BACKEND.get(config.platform, "")
        if not config.backend:
            config.backend = _FILE_TO_BACKEND.get(config.default_model_filename, "")
    if not config.backend and version_dirs and not config.platform:
        first = version_dirs[0]
        filename = config.default_model_filename
        for name, backend in _FILE_TO_BACKEND.items():
            if (first / (filename or name)).exists() and (not filename or filename == name):
                config.backend = backend
                break
        else:
            if filename:
                suffix = filename.rsplit(".", 1)[-1]
                config.backend = {"onnx": "onnxruntime", "py": "python", "pt": "pytorch"}.get(
                    suffix, ""
                )
    if config.backend == "onnxruntime" and not config.platform:
        config.platform = "onnxruntime_onnx"
    if config.backend == "pytorch" and not config.platform:
        config.platform = "pytorch_libtorch"


def normalize(config: ModelConfig, model_name: str, problem: ConfigProblem) -> None:
    """Apply Triton core's normalisation (NormalizeModelConfig) in place."""
    if config.name and config.name != model_name:
        raise problem.error(
            "name",
            f"model name '{config.name}' does not match the directory name '{model_name}'",
        )
    config.name = model_name
    if not config.backend and not config.platform:
        raise problem.error(
            "backend", "unable to determine the backend: set 'backend' or 'platform'"
        )
    if not config.backend and config.platform != "ensemble":  # Triton's ValidateModelConfig
        raise problem.error(
            "platform", f"unexpected platform type '{config.platform}' for {model_name}"
        )
    defaults = BACKEND_DEFAULTS.get(config.backend)
    if defaults and not config.default_model_filename:
        config.default_model_filename = defaults[1]
    if not config.HasField("version_policy"):
        config.version_policy.latest.num_versions = 1
    if config.HasField("dynamic_batching") and not config.dynamic_batching.preferred_batch_size:
        if config.max_batch_size > 0:
            config.dynamic_batching.preferred_batch_size.append(config.max_batch_size)
    if (
        config.HasField("sequence_batching")
        and config.sequence_batching.max_sequence_idle_microseconds == 0
    ):
        config.sequence_batching.max_sequence_idle_microseconds = 1_000_000
    _normalize_pinned_memory(config)
    _normalize_instance_groups(config, problem)


def _normalize_pinned_memory(config: ModelConfig) -> None:
    """Triton (NormalizeModelConfig): pinned memory on where the config does not say, and
    nothing added to an ensemble; what the user wrote (``enable: false``) is kept."""
    if config.HasField("ensemble_scheduling"):
        return
    optimization = config.optimization
    if not optimization.HasField("input_pinned_memory"):
        optimization.input_pinned_memory.enable = True
    if not optimization.HasField("output_pinned_memory"):
        optimization.output_pinned_memory.enable = True


def _normalize_instance_groups(config: ModelConfig, problem: ConfigProblem) -> None:
    if config.backend == "ensemble" or config.platform == "ensemble":
        return
    if not config.instance_group:
        config.instance_group.add()
    for index, group in enumerate(config.instance_group):
        if not group.name:
            group.name = f"{config.name}_{index}"
        if group.kind == mc.ModelInstanceGroup.KIND_AUTO:
            group.kind = mc.ModelInstanceGroup.KIND_CPU
        if group.kind == mc.ModelInstanceGroup.KIND_GPU:
            raise problem.error(
                "instance_group",
                f"instance group {group.name} of model {config.name} specifies KIND_GPU, "
                "but no GPUs are available on this server",
                anchor="KIND_GPU",
            )
        if group.count == 0:
            group.count = _CPU_DEFAULT_COUNT.get(config.backend, 1)
        if group.count < 0:
            raise problem.error("instance_group", "count must be >= 1", anchor="count")


def _io_specs(entries: Any, kind: str, problem: ConfigProblem) -> dict[str, IOSpec]:
    specs: dict[str, IOSpec] = {}
    for entry in entries:
        if not entry.name:
            raise problem.error(kind, f"model {kind} must specify 'name'")
        anchor = f'"{entry.name}"'
        if entry.name in specs:
            raise problem.error(kind, f"duplicate {kind} name '{entry.name}'", anchor)
        if entry.data_type not in mc.DataType.values():  # text format takes any number
            raise problem.error(
                f"{kind}.data_type",
                f"{kind} '{entry.name}' has an unknown data_type {entry.data_type}",
                anchor,
            )
        datatype = DataType.from_config(mc.DataType.Name(entry.data_type))
        if datatype is None:
            raise problem.error(
                f"{kind}.data_type", f"{kind} '{entry.name}' must specify 'data_type'", anchor
            )
        dims = tuple(entry.dims)
        if not dims and not entry.HasField("reshape"):
            raise problem.error(
                f"{kind}.dims", f"{kind} '{entry.name}' must specify 'dims'", anchor
            )
        if any(d < -1 or d == 0 for d in dims):
            raise problem.error(
                f"{kind}.dims",
                f"{kind} '{entry.name}' dimension must be integer >= 1, or -1 to indicate a "
                f"variable-size dimension, got {list(dims)}",
                anchor,
            )
        if getattr(entry, "format", 0) in _IMAGE_FORMATS and len(dims) != 3:
            raise problem.error(f"{kind}.format", f"model {kind} NHWC/NCHW require 3 dims", anchor)
        reshape = tuple(entry.reshape.shape) if entry.HasField("reshape") else None
        if reshape is not None and -1 not in dims and -1 not in reshape:
            if _count(dims) != _count(reshape):
                raise problem.error(
                    f"{kind}.reshape",
                    f"{kind} '{entry.name}' has different size for dims and reshape",
                    anchor,
                )
        specs[entry.name] = IOSpec(
            name=entry.name,
            datatype=datatype,
            dims=dims,
            reshape=reshape,
            optional=bool(getattr(entry, "optional", False)),
            label_filename=getattr(entry, "label_filename", ""),
            allow_ragged=bool(getattr(entry, "allow_ragged_batch", False)),
        )
    return specs


def _count(dims: tuple[int, ...]) -> int:
    total = 1
    for d in dims:
        total *= d
    return total


def build_spec(
    config: ModelConfig, problem: ConfigProblem, model_dir: Path | None = None
) -> ModelSpec:
    """Validate a normalised config and freeze it (``model_dir``: where files the config
    names, such as an initial state's data file, are read from)."""
    if config.max_batch_size < 0:
        raise problem.error("max_batch_size", "must be >= 0")
    policy = config.version_policy
    if policy.HasField("latest") and policy.latest.num_versions < 1:
        raise problem.error("version_policy", "latest.num_versions must be >= 1")
    if policy.HasField("specific") and not policy.specific.versions:
        raise problem.error("version_policy", "specific.versions must list at least one version")
    check_dynamic_batching(config, problem)
    inputs = _io_specs(config.input, "input", problem)
    outputs = _io_specs(config.output, "output", problem)
    batch_inputs, batch_outputs = batch_io(config, problem)
    return ModelSpec(
        name=config.name,
        config=config,
        backend=config.backend,
        platform=config.platform or config.backend,
        max_batch_size=config.max_batch_size,
        inputs=inputs,
        outputs=outputs,
        required_inputs=frozenset(n for n, s in inputs.items() if not s.optional),
        decoupled=config.model_transaction_policy.decoupled,
        config_json=config_to_json(config),
        sequence=sequence_config(config, problem, model_dir),
        labels=_labels(outputs, problem, model_dir),
        batch_inputs=batch_inputs,
        batch_outputs=batch_outputs,
        metrics=metric_spec(config, problem),
    )


def _labels(
    outputs: dict[str, IOSpec], problem: ConfigProblem, model_dir: Path | None
) -> dict[str, tuple[bytes, ...]]:
    """The label files of the outputs that name one, read from the model's directory as
    Triton does at load (a missing file fails the load; a path outside the directory too)."""
    labels: dict[str, tuple[bytes, ...]] = {}
    for spec in outputs.values():
        if not spec.label_filename or model_dir is None:
            continue
        path = model_dir / spec.label_filename
        where = "output.label_filename"
        inside = model_file(model_dir, spec.label_filename)
        if inside is None:
            raise problem.error(
                where,
                f"label file path '{path}' for output '{spec.name}' is outside model directory",
                spec.label_filename,
            )
        try:
            labels[spec.name] = read_labels(inside)  # the file checked, links followed
        except OSError as exc:
            raise problem.error(
                where,
                f"failed to open text file for read {path}: {exc.strerror or exc}",
                spec.label_filename,
            ) from None
    return labels
