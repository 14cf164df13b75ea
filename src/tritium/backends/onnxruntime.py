"""ONNX Runtime backend (CPU execution provider): one session per instance, each run on the
instance's own thread so the event loop never blocks (a small, static model may run on the
loop: backends/inline_policy.py; one whose cost depends on input values never does:
backends/data_dependence.py)."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from ..errors import internal, invalid_arg
from ..logs.settings import about_model
from ..config.model_config import ModelConfig, mc
from ..config.spec import ModelSpec
from ..request import InferenceRequest
from ..types import DataType, InferenceResponse, Tensor
from .model_io_check import ModelTensor, check_model_io
from .base import LoadContext, ModelInstance, instance_names, output_tensor, requested_names
from .ragged import batch_input_array, merge_ragged, scatter_output
from .data_dependence import onnx_reason, variable_inputs
from .inline_policy import ModelExecution, execution_mode
from .threaded import ThreadedInstance, union

log = logging.getLogger("tritium")

_ONNX_TO_CONFIG = {
    "tensor(bool)": "TYPE_BOOL",
    "tensor(uint8)": "TYPE_UINT8",
    "tensor(uint16)": "TYPE_UINT16",
    "tensor(uint32)": "TYPE_UINT32",
    "tensor(uint64)": "TYPE_UINT64",
    "tensor(int8)": "TYPE_INT8",
    "tensor(int16)": "TYPE_INT16",
    "tensor(int32)": "TYPE_INT32",
    "tensor(int64)": "TYPE_INT64",
    "tensor(float16)": "TYPE_FP16",
    "tensor(float)": "TYPE_FP32",
    "tensor(double)": "TYPE_FP64",
    "tensor(bfloat16)": "TYPE_BF16",
    "tensor(string)": "TYPE_STRING",
}
DEFAULT_MAX_BATCH_SIZE = 4


def _session_options(config: ModelConfig) -> ort.SessionOptions:
    params = {k: v.string_value for k, v in config.parameters.items()}
    options = ort.SessionOptions()
    # One intra-op thread per instance unless configured: instances are the parallelism, and
    # spinning thread pools fight the server for the CPU.
    options.intra_op_num_threads = int(params.get("intra_op_thread_count", "1") or 1)
    options.inter_op_num_threads = int(params.get("inter_op_thread_count", "1") or 1)
    if params.get("execution_mode", "0") == "1":
        options.execution_mode = ort.ExecutionMode.ORT_PARALLEL
    levels = ort.GraphOptimizationLevel
    options.graph_optimization_level = {  # Triton's ORT backend: any other level is "all"
        -1: levels.ORT_ENABLE_BASIC,
        1: levels.ORT_ENABLE_EXTENDED,
        2: levels.ORT_DISABLE_ALL,
    }.get(config.optimization.graph.level, levels.ORT_ENABLE_ALL)
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    _memory_options(options, params)
    options.log_severity_level = 3
    return options


# parameters key → SessionOptions attribute (booleans, as Triton's ORT backend reads them)
_MEMORY_FLAGS = {
    "enable_mem_arena": "enable_cpu_mem_arena",
    "enable_mem_pattern": "enable_mem_pattern",
}
_INITIALIZERS_KEY = "session.use_device_allocator_for_initializers"


def _memory_options(options: ort.SessionOptions, params: dict[str, str]) -> None:
    """The memory parameters Triton's ORT backend honours on CPU (see config/fields.py for
    the GPU-only ones)."""
    for key, attribute in _MEMORY_FLAGS.items():
        if key in params:
            setattr(options, attribute, _parse_bool(key, params[key]))
    if _INITIALIZERS_KEY in params:
        options.add_session_config_entry(_INITIALIZERS_KEY, params[_INITIALIZERS_KEY])


def _parse_bool(key: str, text: str) -> bool:
    value = text.strip().lower()
    if value in ("true", "on", "1"):
        return True
    if value in ("false", "off", "0"):
        return False
    raise invalid_arg(f"parameter '{key}' must be true or false, got '{text}'")


def _create_session(path: Path, config: ModelConfig) -> ort.InferenceSession:
    if path.is_dir():
        path = path / "model.onnx"
    if not path.is_file():
        raise internal(f"unable to find '{path.name}' in '{path.parent}'")
    try:
        return ort.InferenceSession(
            str(path), _session_options(config), providers=["CPUExecutionProvider"]
        )
    except Exception as exc:  # onnxruntime raises its own exception types
        raise internal(f"onnxruntime failed to load '{path}': {exc}") from None


def auto_complete(
    config: ModelConfig,
    session: ort.InferenceSession,
    default_max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
) -> None:
    """Fill inputs, outputs and max_batch_size from the model, as Triton's ORT backend does."""
    if config.input and config.output:
        return
    ins, outs = session.get_inputs(), session.get_outputs()

    def batched(arg: Any) -> bool:
        return len(arg.shape) >= 1 and not isinstance(arg.shape[0], int)

    can_batch = all(batched(a) for a in ins + outs)
    if config.max_batch_size > 0 and not can_batch:
        raise invalid_arg(
            f"autofill failed for model '{config.name}': model does not support batching "
            "while non-zero max_batch_size is specified"
        )
    if can_batch and config.max_batch_size == 0 and default_max_batch_size > 0:
        config.max_batch_size = default_max_batch_size
        log.warning(
            "autofilled max_batch_size to %d for model '%s' which supports batching",
            default_max_batch_size,
            config.name,
            extra=about_model(config.name),
        )
    if (
        can_batch
        and config.max_batch_size > 1
        and not config.HasField("dynamic_batching")
        and not config.HasField("sequence_batching")
    ):
        config.dynamic_batching.SetInParent()
    skip = 1 if config.max_batch_size > 0 else 0
    for args, target in ((ins, config.input), (outs, config.output)):
        if len(target):
            continue
        for arg in args:
            entry = target.add()
            entry.name = arg.name
            entry.data_type = mc.DataType.Value(_ONNX_TO_CONFIG.get(arg.type, "TYPE_INVALID"))
            dims = [d if isinstance(d, int) and d >= 0 else -1 for d in arg.shape[skip:]]
            if dims:
                entry.dims.extend(dims)
            else:
                entry.dims.append(1)
                if skip:
                    entry.reshape.SetInParent()


def _model_tensors(args: Any) -> list[ModelTensor]:
    """ORT's view of a session's inputs or outputs: a symbolic or unknown dimension is -1."""
    return [
        ModelTensor(
            arg.name,
            _ONNX_TO_CONFIG.get(arg.type, "TYPE_INVALID"),
            tuple(d if isinstance(d, int) and d >= 0 else -1 for d in arg.shape),
        )
        for arg in args
    ]


# The config datatypes ONNX Runtime takes (every TYPE_* but TYPE_INVALID).
_SUPPORTED = frozenset(
    dt for dt in map(DataType.from_config, _ONNX_TO_CONFIG.values()) if dt is not None
)


def check_against_session(spec: ModelSpec, session: ort.InferenceSession) -> None:
    """The configuration against the ONNX model (Triton's ORT backend checks at load)."""
    check_model_io(
        spec,
        _model_tensors(session.get_inputs()),
        _model_tensors(session.get_outputs()),
        _SUPPORTED,
        extra_inputs=_model_tensors(session.get_overridable_initializers()),
    )


class OnnxInstance(ThreadedInstance):
    """One ORT session with its own thread; the event loop hands it work and is called back."""

    failure = "onnxruntime execute failure"

    def __init__(
        self, name: str, spec: ModelSpec, version: int, session: Any, execution: ModelExecution
    ) -> None:
        self._spec = spec
        self._session = session
        # Ragged batching: inputs fed as 1-D concatenations, batch inputs, batch outputs.
        self._ragged = frozenset(n for n, io in spec.inputs.items() if io.allow_ragged)
        self._plain = not (self._ragged or spec.batch_inputs or spec.batch_outputs)
        super().__init__(name, version, "ort", execution)

    def _run(self, requests: list[InferenceRequest]) -> list[InferenceResponse]:
        """One session run for a batch: inputs concatenated along the batch dimension,
        outputs split back per request (each output's datatype and shape worked out once per
        batch, not once per request)."""
        t0 = time.perf_counter_ns()
        wanted = [requested_names(self._spec, r) for r in requests]
        names = wanted[0] if len(wanted) == 1 else union(wanted)
        if not self._plain:
            feeds = self._ragged_feeds(requests)
        elif len(requests) == 1:
            feeds = {t.name: self._feed(t.data, t.datatype) for t in requests[0].inputs}
        else:
            feeds = self._merged_feeds(requests)
        t1 = time.perf_counter_ns()
        results = dict(zip(names, self._session.run(names, feeds), strict=True))
        t2 = time.perf_counter_ns()
        scattered = self._scattered(requests, results) if self._spec.batch_outputs else {}
        if len(requests) == 1 and not scattered:
            request = requests[0]
            outputs = [output_tensor(self._spec, n, _bytes_out(results[n])) for n in names]
            responses = [InferenceResponse(request.model_name, self._version, request.id, outputs)]
        else:
            responses = self._responses(requests, wanted, results, scattered)
        timing = (t1 - t0, t2 - t1, time.perf_counter_ns() - t2)
        for request in requests:
            request.timing = timing
        return responses

    def _responses(
        self,
        requests: list[InferenceRequest],
        wanted: list[list[str]],
        results: dict[str, np.ndarray],
        scattered: dict[str, list[np.ndarray]],
    ) -> list[InferenceResponse]:
        """A response per request of a batch, with its rows of each output it asked for."""
        parts = {
            name: self._tensors(name, scattered.get(name) or _pieces(array, requests))
            for name, array in results.items()
        }
        return [
            InferenceResponse(
                request.model_name,
                self._version,
                request.id,
                [parts[name][index] for name in wanted[index]],
            )
            for index, request in enumerate(requests)
        ]

    def _tensors(self, name: str, pieces: list[np.ndarray]) -> list[Tensor]:
        """Output ``name``'s piece for each request as a Tensor: the first through
        ``output_tensor`` (datatype, reshape, the error of an unsupported dtype), the others
        with its datatype when the output has no reshape."""
        first = output_tensor(self._spec, name, _bytes_out(pieces[0]))
        io = self._spec.outputs.get(name)
        if (
            len(pieces) == 1
            or (io is not None and io.reshape is not None)
            or first.data.dtype.kind in "OU"
        ):
            return [first] + [output_tensor(self._spec, name, _bytes_out(p)) for p in pieces[1:]]
        datatype = first.datatype
        return [first] + [Tensor(name, datatype, p.shape, p) for p in pieces[1:]]

    def _feed(self, data: np.ndarray, datatype: DataType) -> np.ndarray:
        if datatype is DataType.BYTES:  # ORT takes str, not bytes, for strings
            flat = [
                v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)
                for v in data.reshape(-1)
            ]
            return np.array(flat, dtype=object).reshape(data.shape)
        return data

    def _merged_feeds(self, requests: list[InferenceRequest]) -> dict[str, np.ndarray]:
        first = requests[0]
        feeds = {}
        for position, tensor in enumerate(first.inputs):
            parts = [_input_data(r, position, tensor.name) for r in requests]
            merge = merge_ragged if tensor.name in self._ragged else _along_batch
            feeds[tensor.name] = self._feed(merge(parts), tensor.datatype)
        return feeds

    def _ragged_feeds(self, requests: list[InferenceRequest]) -> dict[str, np.ndarray]:
        """Ragged inputs as 1-D concatenations (for one request too: the model's input is
        [-1]), the others along the batch dimension, plus the batch inputs."""
        feeds = self._merged_feeds(requests)
        for batch_input in self._spec.batch_inputs:
            array = batch_input_array(batch_input, _shapes(requests, batch_input.source))
            for target in batch_input.targets:
                feeds[target] = array
        return feeds

    def _scattered(
        self, requests: list[InferenceRequest], results: dict[str, np.ndarray]
    ) -> dict[str, list[np.ndarray]]:
        """The batch outputs computed, cut back into each request's part."""
        parts = {}
        for batch_output in self._spec.batch_outputs:
            shapes = _shapes(requests, batch_output.source)
            for target in batch_output.targets:
                if target in results:
                    parts[target] = scatter_output(batch_output, results[target], shapes)
        return parts


def _input_data(request: InferenceRequest, position: int, name: str) -> np.ndarray:
    """Input ``name`` of ``request``: at ``position`` as in the batch's first request (the
    usual case), else looked up by name."""
    inputs = request.inputs
    if position < len(inputs) and inputs[position].name == name:
        return inputs[position].data
    return next(t.data for t in inputs if t.name == name)


def _pieces(array: np.ndarray, requests: list[InferenceRequest]) -> list[np.ndarray]:
    """A batch's output cut back into each request's rows (views): in one reshape when every
    request is one row of a batch-major output, else a slice per request."""
    count = len(requests)
    if count == 1:
        return [array]
    if array.ndim and array.shape[0] == count and all(r.batch_size == 1 for r in requests):
        return list(array.reshape((count, 1, *array.shape[1:])))
    pieces, start = [], 0
    for request in requests:
        pieces.append(array[start : start + request.batch_size])
        start += request.batch_size
    return pieces


def _along_batch(parts: list[np.ndarray]) -> np.ndarray:
    return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)


def _shapes(requests: list[InferenceRequest], name: str) -> list[tuple[int, ...]]:
    """Each request's shape of input ``name`` (batch dimension first)."""
    return [next(t.shape for t in r.inputs if t.name == name) for r in requests]


def _bytes_out(array: np.ndarray) -> np.ndarray:
    if array.dtype.kind in "OU":  # ORT strings come back as str
        flat = [v.encode("utf-8") if isinstance(v, str) else v for v in array.reshape(-1)]
        return np.array(flat, dtype=object).reshape(array.shape)
    return array


class OnnxRuntimeBackend:
    def __init__(self, default_max_batch_size: int = DEFAULT_MAX_BATCH_SIZE) -> None:
        # --backend-config [onnxruntime,]default-max-batch-size: what auto-complete gives a
        # model that can batch.
        self._default_max_batch_size = default_max_batch_size

    async def load(self, ctx: LoadContext) -> tuple[ModelSpec, list[ModelInstance]]:
        path = ctx.model_file("model.onnx")
        first = await asyncio.to_thread(_create_session, path, ctx.config)
        config = ctx.config
        if ctx.auto_complete:
            config.name = config.name or ctx.model_name
            auto_complete(config, first, self._default_max_batch_size)
        spec = ctx.finalize(config)
        check_against_session(spec, first)
        names = instance_names(spec, ctx)
        rest = await asyncio.gather(
            *(asyncio.to_thread(_create_session, path, spec.config) for _ in names[1:])
        )
        sessions = [first, *rest]
        execution = await _execution(spec, path)
        return spec, [
            OnnxInstance(n, spec, ctx.version, s, execution)
            for n, s in zip(names, sessions, strict=True)
        ]


async def _execution(spec: ModelSpec, path: Path) -> ModelExecution:
    """Where the model's executions may run: its setting, and whether its cost depends on
    input values (its configured shapes, then its graph, read on a worker thread)."""
    params = {k: v.string_value for k, v in spec.config.parameters.items()}
    mode = execution_mode(params)
    reason = variable_inputs(spec)
    if not reason and mode != "thread":
        graph = path / "model.onnx" if path.is_dir() else path
        reason = await asyncio.to_thread(onnx_reason, graph)
    return ModelExecution(spec.name, mode, reason)
