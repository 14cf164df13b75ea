"""The decision table for every field of Triton's ``ModelConfig`` (and for the ``parameters``
keys that need one): pure data, applied by ``config/fields.py``. Changing what tritium does with
a field starts here; docs/model_config.md is generated from this table."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Decision(enum.Enum):
    IMPLEMENTED = "implemented"
    GPU_ONLY = "accepted with a warning (no effect without a GPU)"
    NO_EFFECT = "accepted with a warning (no effect)"
    REFUSED = "refused"


@dataclass(frozen=True, slots=True)
class FieldRule:
    decision: Decision
    reason: str


_I, _G, _R = Decision.IMPLEMENTED, Decision.GPU_ONLY, Decision.REFUSED
_W = Decision.NO_EFFECT
_SECTION = "a section: its fields decide"


def _same(rule: tuple[Decision, str], *paths: str) -> dict[str, tuple[Decision, str]]:
    return dict.fromkeys(paths, rule)


def _tree(root: str, rule: tuple[Decision, str], *below: str) -> dict[str, tuple[Decision, str]]:
    """``root`` and the fields under it, all with one decision."""
    return _same(rule, root, *(f"{root}.{path}" for path in below))


_NO_GPU = "no effect without a GPU (as in Triton on a CPU-only server)"
_QUEUE_POLICY = (
    "timeout_action",
    "default_timeout_microseconds",
    "allow_timeout_override",
    "max_queue_size",
)
_ACCELERATOR = ("name", "parameters")
_GRAPH_SPEC = (
    "batch_size",
    "input",
    "input.dim",
    "graph_lower_bound",
    "graph_lower_bound.batch_size",
    "graph_lower_bound.input",
    "graph_lower_bound.input.dim",
)

_TABLE: dict[str, tuple[Decision, str]] = {
    "name": (_I, "must match the model's directory name"),
    "platform": (
        _I,
        "selects the backend (onnxruntime_onnx, pytorch_libtorch, ensemble) and is reported; an "
        "unknown one without a backend is refused (Triton's 'unexpected platform type')",
    ),
    "backend": (
        _I,
        "onnxruntime, pytorch (TorchScript), openvino, python and ensemble are served; another "
        "fails the load",
    ),
    "runtime": (
        _R,
        "choosing a backend library ('runtime') is not supported by tritium: it serves its own "
        "onnxruntime, pytorch and python backends; the PyTorch 2 Python runtime (backend "
        'pytorch with runtime "model.py") is not served: export the module to TorchScript '
        "(model.pt), or serve it as a Python model",
    ),
    **_tree(
        "version_policy",
        (_I, "latest / all / specific choose the versions served"),
        "latest",
        "latest.num_versions",
        "all",
        "specific",
        "specific.versions",
    ),
    "max_batch_size": (_I, "batch dimension, request validation and batch limits"),
    "input": (_I, "inputs are validated against the configuration"),
    **_same(
        (_I, "checked on every request"),
        "input.name",
        "input.data_type",
        "input.dims",
        "input.optional",
    ),
    **_same((_I, "the model sees the reshaped tensor"), "input.reshape", "input.reshape.shape"),
    "input.allow_ragged_batch": (_I, "the dynamic batcher batches differently shaped requests"),
    "input.format": (
        _I,
        "validated (FORMAT_NHWC/NCHW need 3 dims) and reported to clients, as in Triton",
    ),
    "input.is_shape_tensor": (_R, "shape tensors are only supported for TensorRT platform"),
    "input.is_non_linear_format_io": (
        _R,
        "Non-linear IO format is only supported for the TensorRT platform",
    ),
    "output": (_I, "outputs are validated and returned as configured"),
    **_same((_I, "the model's outputs are checked against them"), "output.name", "output.dims"),
    "output.data_type": (_I, "the model's outputs are checked against it"),
    **_same((_I, "clients see the configured dims"), "output.reshape", "output.reshape.shape"),
    "output.label_filename": (
        _I,
        "read from the model directory at load (a missing file fails the load); the "
        'classification extension appends the labels to its "score:index" strings',
    ),
    "output.is_shape_tensor": (_R, "shape tensors are only supported for TensorRT platform"),
    "output.is_non_linear_format_io": (
        _R,
        "Non-linear IO format is only supported for the TensorRT platform",
    ),
    **_tree(
        "batch_input",
        (
            _I,
            "onnxruntime: the server computes each kind for the batch and feeds it to the "
            "model; Python models get none (a warning; Triton's Python backend has none either)",
        ),
        "kind",
        "target_name",
        "data_type",
        "source_input",
    ),
    **_tree(
        "batch_output",
        (
            _I,
            "onnxruntime: BATCH_SCATTER_WITH_INPUT_SHAPE cuts the output back per request by "
            "its source input's shape; no effect on Python models (a warning, as in Triton)",
        ),
        "target_name",
        "kind",
        "source_input",
    ),
    "optimization": (_I, _SECTION),
    **_tree(
        "optimization.graph",
        (
            _I,
            "onnxruntime: the session's graph optimisation level, as Triton's ORT backend "
            "(-1 basic, 1 extended, 2 disabled, otherwise all); other backends have no graph",
        ),
        "level",
    ),
    "optimization.priority": (_G, f"CUDA stream priority (TensorRT); {_NO_GPU}"),
    **_tree(
        "optimization.cuda",
        (_G, f"CUDA graphs and streams; {_NO_GPU}"),
        "graphs",
        "busy_wait_events",
        "output_copy_stream",
        "graph_spec",
        *(f"graph_spec.{path}" for path in _GRAPH_SPEC),
    ),
    "optimization.execution_accelerators": (_I, _SECTION),
    **_tree(
        "optimization.execution_accelerators.gpu_execution_accelerator",
        (_G, f"GPU execution accelerators (TensorRT, CUDA); {_NO_GPU}"),
        *_ACCELERATOR,
    ),
    **_tree(
        "optimization.execution_accelerators.cpu_execution_accelerator",
        (
            _R,
            "CPU execution accelerators (OpenVINO) are not supported by tritium: it runs ONNX "
            "Runtime's default CPU execution provider",
        ),
        *_ACCELERATOR,
    ),
    **_same(
        (_G, f"pinned host memory speeds up copies to and from a GPU; {_NO_GPU}"),
        "optimization.input_pinned_memory",
        "optimization.input_pinned_memory.enable",
        "optimization.output_pinned_memory",
        "optimization.output_pinned_memory.enable",
    ),
    "optimization.gather_kernel_buffer_threshold": (
        _G,
        f"a CUDA gather kernel (TensorRT backend only); {_NO_GPU}",
    ),
    "optimization.eager_batching": (_G, f"recognised only by the TensorRT backend; {_NO_GPU}"),
    **_tree(
        "dynamic_batching",
        (
            _I,
            "the dynamic batcher (scheduling/batch_policy.py); refused at load where Triton "
            "refuses it (config/dynamic_batching.py)",
        ),
        "preferred_batch_size",
        "max_queue_delay_microseconds",
        "preserve_ordering",
        "priority_levels",
        "default_priority_level",
        "default_queue_policy",
        *(f"default_queue_policy.{path}" for path in _QUEUE_POLICY),
        "priority_queue_policy",
        *(f"priority_queue_policy.{path}" for path in _QUEUE_POLICY),
    ),
    **_tree(
        "sequence_batching",
        (_I, "the sequence batcher (direct and oldest strategies, controls, implicit state)"),
        "direct",
        "direct.max_queue_delay_microseconds",
        "direct.minimum_slot_utilization",
        "oldest",
        "oldest.max_candidate_sequences",
        "oldest.preferred_batch_size",
        "oldest.max_queue_delay_microseconds",
        "oldest.preserve_ordering",
        "max_sequence_idle_microseconds",
        "control_input",
        "control_input.name",
        "control_input.control",
        "control_input.control.kind",
        "control_input.control.int32_false_true",
        "control_input.control.fp32_false_true",
        "control_input.control.bool_false_true",
        "control_input.control.data_type",
        "state",
        "state.input_name",
        "state.output_name",
        "state.data_type",
        "state.dims",
        "state.initial_state",
        "state.initial_state.data_type",
        "state.initial_state.dims",
        "state.initial_state.zero_data",
        "state.initial_state.data_file",
        "state.initial_state.name",
    ),
    "sequence_batching.state.use_same_buffer_for_input_output": (
        _I,
        "a buffer-sharing hint: tritium keeps each sequence's state in a buffer of its own and "
        "carries over what the model produced, as Triton does on CPU",
    ),
    "sequence_batching.state.use_growable_memory": (
        _R,
        "'use_growable_memory' can only work with KIND_GPU model instances (Triton's rule)",
    ),
    "sequence_batching.iterative_sequence": (
        _I,
        "a request without a correlation ID starts a sequence of its own; the model may "
        "reschedule it (TRITONSERVER_REQUEST_RELEASE_RESCHEDULE) to run again in it",
    ),
    **_tree(
        "ensemble_scheduling",
        (_I, "the ensemble scheduler walks the steps"),
        "step",
        "step.model_name",
        "step.model_version",
        "step.input_map",
        "step.output_map",
        "max_inflight_requests",
    ),
    "ensemble_scheduling.step.model_namespace": (
        _R,
        "reserved by Triton for internal use (with --model-namespacing an ensemble step "
        "already looks in its own namespace first)",
    ),
    "instance_group": (_I, "one model instance per count"),
    "instance_group.name": (_I, "names the instances"),
    "instance_group.kind": (_I, "KIND_CPU, KIND_AUTO (CPU) and KIND_MODEL; KIND_GPU fails"),
    "instance_group.count": (_I, "the number of instances"),
    **_tree(
        "instance_group.rate_limiter",
        (
            _I,
            "with --rate-limit=execution_count an instance executes only while it holds these "
            "resources (per device, or global), waiting instances in priority order; with "
            "--rate-limit=off (the default) it has no effect, as in Triton",
        ),
        "resources",
        "resources.name",
        "resources.global",
        "resources.count",
        "priority",
    ),
    "instance_group.gpus": (
        _R,
        "GPU ids need a KIND_GPU instance group and this server has no GPU (Triton refuses "
        "gpus on a KIND_CPU group too)",
    ),
    **_tree(
        "instance_group.secondary_devices",
        (_G, f"secondary devices are NVDLA engines for TensorRT; {_NO_GPU}"),
        "kind",
        "device_id",
    ),
    "instance_group.profile": (
        _R,
        "the profile field is only supported for TensorRT models (Triton's rule)",
    ),
    "instance_group.passive": (
        _R,
        "passive instances (loaded but never scheduled) are not supported by tritium yet",
    ),
    "instance_group.host_policy": (
        _R,
        "host policies (--host-policy: NUMA node and CPU cores per instance) are not supported "
        "by tritium",
    ),
    "default_model_filename": (_I, "the model file loaded from each version directory"),
    "cc_model_filenames": (
        _G,
        "picks a model file by the GPU's CUDA compute capability; without a GPU "
        "default_model_filename is loaded, as in Triton",
    ),
    "metric_tags": (
        _I,
        "each tag is a label '_<key>' on the model's Prometheus metrics (the key must be a "
        "valid label name)",
    ),
    **_tree(
        "parameters",
        (
            _I,
            "given to the model (Python: args['model_config']); onnxruntime reads the keys "
            "Triton's ORT backend reads; per-key decisions in the parameters table",
        ),
        "string_value",
    ),
    **_tree(
        "model_warmup",
        (
            _I,
            "run on every instance before the version is READY (zero_data, random_data, "
            "input_data_file from <model>/warmup/); a failing sample fails the load",
        ),
        "name",
        "batch_size",
        "inputs",
        "inputs.data_type",
        "inputs.dims",
        "inputs.zero_data",
        "inputs.random_data",
        "inputs.input_data_file",
        "count",
    ),
    **_tree(
        "model_operations",
        (_R, "custom operation libraries (model_operations) are not supported by tritium yet"),
        "op_library_filename",
    ),
    **_tree(
        "model_transaction_policy",
        (_I, "decoupled models send 0..N responses per request"),
        "decoupled",
    ),
    **_tree(
        "model_repository_agents",
        (_R, "repository agents (e.g. checksum) are not supported by tritium"),
        "agents",
        "agents.name",
        "agents.parameters",
    ),
    **_tree(
        "response_cache",
        (_I, "the response cache (with --cache-config)"),
        "enable",
    ),
    **_tree(
        "model_metrics",
        (
            _I,
            "the buckets of nv_inference_first_response_histogram_ms (the only family Triton "
            "lets a model customise; another family fails the load)",
        ),
        "metric_control",
        "metric_control.metric_identifier",
        "metric_control.metric_identifier.family",
        "metric_control.histogram_options",
        "metric_control.histogram_options.buckets",
    ),
}

FIELDS: dict[str, FieldRule] = {path: FieldRule(*rule) for path, rule in _TABLE.items()}

_TORCH_POOLS = (
    "torch's pools are per process: the first model that sets it decides, a later different "
    "value is logged and not applied (as in Triton)"
)
_PT2_NAME = (
    "the pytorch_backend README's name (PyTorch 2 runtime) for {0}, accepted as its alias; "
    "{0} wins if both are given"
)
# Triton's PyTorch backend parameters (backends/pytorch.py:TorchOptions reads them).
_PYTORCH_PARAMETERS = {
    ("pytorch", key): FieldRule(decision, reason)
    for key, decision, reason in (
        ("DISABLE_OPTIMIZED_EXECUTION", _I, "the TorchScript graph executor's optimisation off"),
        ("INFERENCE_MODE", _I, "forward() under torch.inference_mode (default true), else no_grad"),
        ("ENABLE_JIT_EXECUTOR", _I, "the profiling executor on or off, before each forward()"),
        ("ENABLE_JIT_PROFILING", _I, "the JIT profiling mode on or off, before each forward()"),
        ("ENABLE_TENSOR_FUSER", _I, "the TensorExpr fuser on or off, before each forward()"),
        ("ENABLE_WEIGHT_SHARING", _I, "the model's instances share one loaded module"),
        ("INTRA_OP_THREAD_COUNT", _I, f"torch.set_num_threads; {_TORCH_POOLS}"),
        ("INTER_OP_THREAD_COUNT", _I, f"torch.set_num_interop_threads; {_TORCH_POOLS}"),
        ("DISABLE_CUDNN", _G, f"cuDNN is a GPU library; {_NO_GPU}"),
        ("ENABLE_CACHE_CLEANING", _G, f"empties the CUDA cache after each execution; {_NO_GPU}"),
        ("NUM_THREADS", _I, _PT2_NAME.format("INTRA_OP_THREAD_COUNT")),
        ("NUM_INTEROP_THREADS", _I, _PT2_NAME.format("INTER_OP_THREAD_COUNT")),
        (
            "TORCH_COMPILE_OPTIONAL_PARAMETERS",
            _W,
            "torch.compile options of the PyTorch 2 runtime; a TorchScript model is not "
            "compiled by torch.compile (Triton's libtorch backend loads it and ignores it too)",
        ),
    )
}

# Triton's OpenVINO backend parameters (backends/openvino.py:OpenVinoOptions reads them).
_OPENVINO_PARAMETERS = {
    ("openvino", key): FieldRule(_I, reason)
    for key, reason in (
        (
            "NUM_STREAMS",
            "the compiled model's streams (AUTO, NUMA or a number); default one per "
            "instance, so the instances run side by side",
        ),
        ("PERFORMANCE_HINT", "LATENCY, THROUGHPUT or CUMULATIVE_THROUGHPUT, given to OpenVINO"),
        (
            "INFERENCE_NUM_THREADS",
            "OpenVINO's inference threads; default one per instance "
            "unless NUM_STREAMS or PERFORMANCE_HINT is set",
        ),
        (
            "COMPILATION_NUM_THREADS",
            "given to OpenVINO, whose CPU plugin (2026) refuses it: "
            "the load fails saying so, as in Triton",
        ),
        ("HINT_BF16", "YES: bfloat16 inference precision"),
        (
            "SKIP_OV_DYNAMIC_BATCHSIZE",
            "YES: the batch dimension is fixed at max_batch_size "
            "(a smaller batch fails unless ENABLE_BATCH_PADDING); otherwise it is dynamic",
        ),
        ("ENABLE_BATCH_PADDING", "YES: each batch is padded with zeros to max_batch_size"),
        ("RESHAPE_IO_LAYERS", "YES: the inputs take the configured dims (-1: dynamic)"),
        ("CPU_EXTENSION_PATH", "a library of custom CPU layers, added to OpenVINO's core"),
        ("TARGET_DEVICE", "the OpenVINO device the model is compiled for (default CPU)"),
        (
            "INFERENCE_PRECISION_HINT",
            "F32, BF16 or F16 (tritium's addition): OpenVINO's CPU "
            "plugin computes in bfloat16 by default where the CPU has it; F32 keeps float32",
        ),
        ("CACHE_DIR", "OpenVINO's compiled-model cache directory (tritium's addition)"),
    )
}

# Per-backend decisions on ``parameters`` keys (any other key is given to the model as is, as
# in Triton: a Python model reads them all; Triton's ORT backend ignores the ones it does not
# know).
PARAMETERS: dict[tuple[str, str], FieldRule] = {
    ("python", "EXECUTION_ENV_PATH"): FieldRule(
        _I,
        "the stubs run under that environment's interpreter: a conda-pack .tar.gz unpacked "
        "once per content into --python-env-cache-dir, or an environment directory (conda or "
        "venv) used in place; $$TRITON_MODEL_DIRECTORY is replaced by the model's directory",
    ),
    ("python", "FORCE_CPU_ONLY_INPUT_TENSORS"): FieldRule(
        _G, f"input tensors are always in CPU memory; {_NO_GPU}"
    ),
    **{
        ("onnxruntime", key): FieldRule(_G, f"a CUDA execution provider option; {_NO_GPU}")
        for key in (
            "cudnn_conv_algo_search",
            "gpu_mem_limit",
            "arena_extend_strategy",
            "do_copy_in_default_stream",
            "cudnn_conv_use_max_workspace",
        )
    },
    ("onnxruntime", "memory.enable_memory_arena_shrinkage"): FieldRule(
        _R, "memory.enable_memory_arena_shrinkage is not supported by tritium yet"
    ),
    **_PYTORCH_PARAMETERS,
    **_OPENVINO_PARAMETERS,
    # tritium's own (Triton's backends leave the key alone): backends/inline_policy.py
    **{
        (backend, "TRITIUM_EXECUTION"): FieldRule(
            _I,
            "tritium's addition: auto (default), thread or inline: whether a small request "
            "may run on the event loop (thread: never); a model whose cost depends on input "
            "values never does; TRITIUM_EXECUTION in the environment sets the default",
        )
        for backend in ("onnxruntime", "pytorch", "openvino")
    },
}
