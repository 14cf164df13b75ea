"""OpenVINO backend (``backend: "openvino"``), Triton's ``openvino_backend`` contract on CPU.

A model is read once (``model.xml`` + ``model.bin`` by default; ``default_model_filename``
names another file OpenVINO reads, e.g. ``model.onnx``), checked against the configuration
(``model_io_check``), given the configured element types (OpenVINO's pre/post-processing
converts, as Triton's backend does) and compiled once; each instance owns one infer request
and runs it on its own thread (OpenVINO releases the GIL while it infers, so instances run
concurrently on the compiled model's streams). Triton's parameters are read in
``OpenVinoOptions.from_config``. Imported only when a model needs it (``pip install
tritium[openvino]``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov

from ..config.confine import client_path
from ..config.model_config import ModelConfig, mc
from ..config.spec import ModelSpec
from ..errors import ServerError, internal, invalid_arg, unavailable
from ..logs.settings import about_model
from ..request import InferenceRequest
from ..types import DataType, InferenceResponse
from .base import LoadContext, ModelInstance, instance_names, output_tensor, requested_names
from .data_dependence import openvino_reason, variable_inputs
from .inline_policy import ModelExecution, execution_mode
from .model_io_check import WILDCARD, ModelTensor, check_model_io
from .threaded import ThreadedInstance, union

log = logging.getLogger("tritium")

DEFAULT_MAX_BATCH_SIZE = 4  # Triton's global default-max-batch-size, which backends receive

# OpenVINO element type name <-> config datatype, as Triton's backend maps them (no FP64,
# BF16 or STRING: such a configured tensor fails the load).
_TO_CONFIG = {
    "boolean": "TYPE_BOOL",
    "u8": "TYPE_UINT8",
    "u16": "TYPE_UINT16",
    "u32": "TYPE_UINT32",
    "u64": "TYPE_UINT64",
    "i8": "TYPE_INT8",
    "i16": "TYPE_INT16",
    "i32": "TYPE_INT32",
    "i64": "TYPE_INT64",
    "f16": "TYPE_FP16",
    "f32": "TYPE_FP32",
}
_OV_TYPES = {
    "TYPE_BOOL": ov.Type.boolean,
    "TYPE_UINT8": ov.Type.u8,
    "TYPE_UINT16": ov.Type.u16,
    "TYPE_UINT32": ov.Type.u32,
    "TYPE_UINT64": ov.Type.u64,
    "TYPE_INT8": ov.Type.i8,
    "TYPE_INT16": ov.Type.i16,
    "TYPE_INT32": ov.Type.i32,
    "TYPE_INT64": ov.Type.i64,
    "TYPE_FP16": ov.Type.f16,
    "TYPE_FP32": ov.Type.f32,
}
SUPPORTED = frozenset(dt for dt in map(DataType.from_config, _OV_TYPES) if dt is not None)


def _config_type(element: Any) -> str:
    return _TO_CONFIG.get(element.get_type_name(), "TYPE_INVALID")


def _yes(params: dict[str, str], key: str) -> bool:
    """Triton's ParseBoolParameter: true only for YES (any case); anything else is false."""
    return params.get(key, "").strip().lower() == "yes"


def _count(key: str, text: str) -> int:
    value = text.strip()
    if not value.isdigit():
        raise invalid_arg(
            f"expected the parameter '{key}' to be a non-negative number, got {value.lower()}"
        )
    return int(value)


def _streams(text: str) -> str:
    value = text.strip().lower()
    if value in ("auto", "numa"):
        return value.upper()
    if value.isdigit():
        return value
    raise invalid_arg(
        f"expected the parameter 'NUM_STREAMS' to be either AUTO/NUMA/<int_value>, got {value}"
    )


_HINTS = ("latency", "throughput", "cumulative_throughput")


def _hint(text: str) -> str:
    value = text.strip().lower()
    if value not in _HINTS:
        raise invalid_arg(
            "expected the parameter 'PERFORMANCE_HINT' to be "
            f"LATENCY/THROUGHPUT/CUMULATIVE_THROUGHPUT, got {value}"
        )
    return value.upper()


@dataclass(frozen=True, slots=True)
class OpenVinoOptions:
    """Triton's OpenVINO parameters: the model-level switches and the properties the model
    is compiled with (``properties``, OpenVINO's names)."""

    skip_dynamic_batch: bool = False  # SKIP_OV_DYNAMIC_BATCHSIZE: batch fixed to max_batch_size
    batch_padding: bool = False  # ENABLE_BATCH_PADDING: pad every batch to max_batch_size
    reshape_io: bool = False  # RESHAPE_IO_LAYERS: the inputs take the configured dims
    device: str = "CPU"  # TARGET_DEVICE
    cpu_extension: str = ""  # CPU_EXTENSION_PATH
    cache_dir: str = ""  # CACHE_DIR (OpenVINO's compiled-model cache; not Triton's)
    properties: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def from_config(cls, config: ModelConfig, instances: int) -> OpenVinoOptions:
        params = {k: v.string_value for k, v in config.parameters.items()}
        return cls(
            skip_dynamic_batch=_yes(params, "SKIP_OV_DYNAMIC_BATCHSIZE"),
            batch_padding=_yes(params, "ENABLE_BATCH_PADDING"),
            reshape_io=_yes(params, "RESHAPE_IO_LAYERS"),
            device=params.get("TARGET_DEVICE", "").strip().upper() or "CPU",
            cpu_extension=params.get("CPU_EXTENSION_PATH", ""),
            cache_dir=params.get("CACHE_DIR", ""),
            properties=tuple(_properties(params, instances).items()),
        )


def _properties(params: dict[str, str], instances: int) -> dict[str, Any]:
    """The compile properties. Unless NUM_STREAMS or PERFORMANCE_HINT say otherwise, one
    stream per instance with one inference thread each, as each ONNX Runtime instance has
    one intra-op thread: the instances run concurrently and do not oversubscribe the cores
    (OpenVINO's default, a stream of every core, would serialise the instances' requests)."""
    props: dict[str, Any] = {}
    if "INFERENCE_NUM_THREADS" in params:
        props["INFERENCE_NUM_THREADS"] = _count(
            "INFERENCE_NUM_THREADS", params["INFERENCE_NUM_THREADS"]
        )
    if "COMPILATION_NUM_THREADS" in params:
        props["COMPILATION_NUM_THREADS"] = _count(
            "COMPILATION_NUM_THREADS", params["COMPILATION_NUM_THREADS"]
        )
    if "HINT_BF16" in params:
        if params["HINT_BF16"].strip().lower() != "yes":
            raise invalid_arg(
                "expected the parameter 'HINT_BF16' to be YES, got "
                f"{params['HINT_BF16'].strip().lower()}"
            )
        props["INFERENCE_PRECISION_HINT"] = "bf16"
    if "INFERENCE_PRECISION_HINT" in params:
        _precision(props, params["INFERENCE_PRECISION_HINT"])
    if "NUM_STREAMS" in params:
        props["NUM_STREAMS"] = _streams(params["NUM_STREAMS"])
    if "PERFORMANCE_HINT" in params:
        props["PERFORMANCE_HINT"] = _hint(params["PERFORMANCE_HINT"])
    if "NUM_STREAMS" not in props and "PERFORMANCE_HINT" not in props:
        props["NUM_STREAMS"] = str(instances)
        props.setdefault("INFERENCE_NUM_THREADS", instances)
    return props


_PRECISIONS = ("f32", "bf16", "f16")


def _precision(props: dict[str, Any], text: str) -> None:
    """INFERENCE_PRECISION_HINT (tritium's addition): OpenVINO's CPU plugin computes in
    bfloat16 by default where the CPU has it; ``f32`` keeps float32 answers (as ONNX
    Runtime gives them)."""
    value = text.strip().lower()
    if value not in _PRECISIONS:
        raise invalid_arg(
            f"expected the parameter 'INFERENCE_PRECISION_HINT' to be F32/BF16/F16, got {value}"
        )
    if props.get("INFERENCE_PRECISION_HINT", value) != value:
        raise invalid_arg("parameters 'HINT_BF16' and 'INFERENCE_PRECISION_HINT' disagree")
    props["INFERENCE_PRECISION_HINT"] = value


def _read_model(core: Any, path: Path, model: str) -> Any:
    if not path.is_file():
        raise unavailable(f"unable to find '{path}' for model '{model}'")
    try:
        return core.read_model(str(path))
    except Exception as exc:  # OpenVINO raises its own exception types
        raise internal(f"openvino error in reading model: {exc}") from None


def _confined(model_dir: Path, options: OpenVinoOptions) -> OpenVinoOptions:
    """A client's CPU_EXTENSION_PATH and CACHE_DIR (a load request's config), taken inside
    the model's directory (config/confine.py): the library must be a file there, the cache an
    existing folder there (OpenVINO would create a missing one wherever the client said)."""
    extension, cache = options.cpu_extension, options.cache_dir
    if extension:
        path = client_path(model_dir, model_dir, "parameters.CPU_EXTENSION_PATH", extension)
        if not path.is_file():
            raise invalid_arg("CPU_EXTENSION_PATH names no file in the model directory")
        extension = str(path)
    if cache:
        path = client_path(model_dir, model_dir, "parameters.CACHE_DIR", cache)
        if not path.is_dir():
            raise invalid_arg("CACHE_DIR names no folder in the model directory")
        cache = str(path)
    return replace(options, cpu_extension=extension, cache_dir=cache)


def _core(options: OpenVinoOptions) -> Any:
    core = ov.Core()
    if options.cpu_extension:
        try:
            core.add_extension(options.cpu_extension)
        except Exception as exc:
            raise internal(f"openvino error in  loading custom CPU extensions: {exc}") from None
    if options.cache_dir:
        core.set_property({"CACHE_DIR": options.cache_dir})
    return core


def _shape(partial: Any) -> tuple[int, ...]:
    """A partial shape as Triton prints it: a dynamic dimension (or an interval) is -1."""
    return tuple(d.get_length() if d.is_static else WILDCARD for d in partial)


def _has_batch(port: Any) -> bool:
    layout = ov.layout_helpers.get_layout(port)
    return bool(layout.has_name("N"))


def auto_complete(config: ModelConfig, model: Any, default_max_batch_size: int) -> None:
    """Fill max_batch_size, dynamic_batching, inputs and outputs from the model, as Triton's
    OpenVINO backend does: batching only where every input and output has an ``N`` layout."""
    ports = [*model.inputs, *model.outputs]
    if all(_has_batch(p) for p in ports):
        if config.max_batch_size == 0:
            config.max_batch_size = max(default_max_batch_size, 1)
            log.warning(
                "autofilled max_batch_size to %d for model '%s' since batching is supported "
                "but no max_batch_size is specified in model configuration. Must specify "
                "max_batch_size to utilize autofill with a larger max batch size",
                config.max_batch_size,
                config.name,
                extra=about_model(config.name),
            )
        if config.max_batch_size > 1 and not (
            config.HasField("dynamic_batching") or config.HasField("sequence_batching")
        ):
            config.dynamic_batching.SetInParent()
    elif config.max_batch_size != 0:
        log.warning(
            "model layout for model %s does not support batching while non-zero "
            "max_batch_size is specified",
            config.name,
            extra=about_model(config.name),
        )
    skip = 1 if config.max_batch_size > 0 else 0
    for ports_of, target in ((model.inputs, config.input), (model.outputs, config.output)):
        if len(target):
            continue
        for port in ports_of:
            entry = target.add()
            entry.name = port.get_any_name()
            entry.data_type = mc.DataType.Value(_config_type(port.get_element_type()))
            entry.dims.extend(_shape(port.get_partial_shape())[skip:])


def _tensors(spec: ModelSpec, ports: Any, configured: dict[str, str]) -> list[ModelTensor]:
    """The model's tensors for ``check_model_io``. A configured tensor takes the configured
    element type (OpenVINO converts, as in Triton); with batching the first dimension is the
    backend's to set, so it is reported as -1 (Triton's CompareDimsSupported skips it)."""
    tensors = []
    for port in ports:
        name = port.get_any_name()
        shape = _shape(port.get_partial_shape())
        if spec.max_batch_size > 0 and shape:
            shape = (WILDCARD, *shape[1:])
        datatype = configured.get(name, _config_type(port.get_element_type()))
        tensors.append(ModelTensor(name, datatype, shape))
    return tensors


def _checked_model(spec: ModelSpec, model: Any, options: OpenVinoOptions) -> Any:
    """The model checked against the configuration, with the configured element types and
    its batch dimension set. RESHAPE_IO_LAYERS first gives the inputs the configured dims,
    so the outputs are checked as the reshaped model computes them (as in Triton)."""
    inputs = {io.name: io.datatype.config_name for io in spec.inputs.values()}
    outputs = {io.name: io.datatype.config_name for io in spec.outputs.values()}
    try:
        if options.reshape_io:
            model.reshape(_reshaped(spec, model))
    except ServerError:
        raise
    except Exception as exc:
        raise internal(f"openvino error in setting shape: {exc}") from None
    check_model_io(
        spec,
        _tensors(spec, model.inputs, inputs),
        _tensors(spec, model.outputs, outputs),
        SUPPORTED,
    )
    try:
        ppp = ov.preprocess.PrePostProcessor(model)
        for name, datatype in inputs.items():
            ppp.input(name).tensor().set_element_type(_OV_TYPES[datatype])
        for name, datatype in outputs.items():
            ppp.output(name).tensor().set_element_type(_OV_TYPES[datatype])
        model = ppp.build()
        if spec.max_batch_size > 0:
            model.reshape(_with_batch(model, spec, options))
    except Exception as exc:
        raise internal(f"openvino error in apply model input preprocessing: {exc}") from None
    return model


def _with_batch(model: Any, spec: ModelSpec, options: OpenVinoOptions) -> dict[str, Any]:
    """Each input's shape with its first dimension dynamic, or max_batch_size where
    SKIP_OV_DYNAMIC_BATCHSIZE fixes it (Triton's set_batch)."""
    batch = spec.max_batch_size if options.skip_dynamic_batch else -1
    shapes = {}
    for port in model.inputs:
        partial = port.get_partial_shape()
        partial[0] = ov.Dimension(batch)
        shapes[port.get_any_name()] = partial
    return shapes


def _reshaped(spec: ModelSpec, model: Any) -> dict[str, Any]:
    """RESHAPE_IO_LAYERS: each configured input takes its configured dims (reshape where
    given; -1 is dynamic), after the model's batch dimension when max_batch_size > 0."""
    shapes = {p.get_any_name(): p.get_partial_shape() for p in model.inputs}
    for io in spec.inputs.values():
        dims = io.reshape if io.reshape is not None else io.dims
        if any(d < WILDCARD or d == 0 for d in dims):
            raise internal(
                "openvino backend does not support dimensions values other than `-1` or "
                "positive integers"
            )
        if io.name not in shapes:
            continue  # check_model_io names it
        lead = [shapes[io.name][0]] if spec.max_batch_size > 0 else []
        shapes[io.name] = ov.PartialShape([*lead, *(ov.Dimension(d) for d in dims)])
    return shapes


def _compile(core: Any, model: Any, spec: ModelSpec, options: OpenVinoOptions) -> Any:
    properties = dict(options.properties)
    properties["ALLOW_AUTO_BATCHING"] = spec.max_batch_size > 0 and not options.skip_dynamic_batch
    try:
        return core.compile_model(model, options.device, properties)
    except Exception as exc:
        raise internal(f"openvino error in loading model: {exc}") from None


class OpenVinoInstance(ThreadedInstance):
    """One infer request of the compiled model, run on its own thread."""

    failure = "openvino execute failure"
    own_errors = True

    def __init__(  # noqa: PLR0913 - what one instance needs, all given by the backend
        self,
        name: str,
        spec: ModelSpec,
        version: int,
        compiled: Any,
        options: OpenVinoOptions,
        execution: ModelExecution,
    ) -> None:
        self._spec = spec
        self._request = compiled.create_infer_request()
        self._options = options
        # Output name -> index of the compiled model's output (each of a port's names).
        self._outputs = {n: i for i, p in enumerate(compiled.outputs) for n in p.get_names()}
        super().__init__(name, version, "openvino", execution)

    def _run(self, requests: list[InferenceRequest]) -> list[InferenceResponse]:
        t0 = time.perf_counter_ns()
        total = sum(r.batch_size for r in requests) if self._spec.max_batch_size else 1
        pad = self._padding(total)
        feeds = {
            name: _padded(_merged(requests, name), pad)
            for name in (t.name for t in requests[0].inputs)
        }
        t1 = time.perf_counter_ns()
        try:
            self._request.infer(feeds, share_inputs=True, share_outputs=True)
        except Exception as exc:
            raise internal(f"openvino error in running inference: {exc}") from None
        t2 = time.perf_counter_ns()
        # Copies of the requested outputs only: the request's own buffers are reused by the
        # next execution while the responses are still being sent.
        names = union(requested_names(self._spec, r) for r in requests)
        arrays = {n: self._request.get_output_tensor(self._outputs[n]).data.copy() for n in names}
        responses = self._responses(requests, arrays)
        timing = (t1 - t0, t2 - t1, time.perf_counter_ns() - t2)
        for request in requests:
            request.timing = timing
        return responses

    def _padding(self, total: int) -> int:
        """How many zero rows to add (ENABLE_BATCH_PADDING); with the batch fixed to
        max_batch_size (SKIP_OV_DYNAMIC_BATCHSIZE) another batch fails as in Triton."""
        mbs = self._spec.max_batch_size
        if mbs == 0 or total == mbs:
            return 0
        if self._options.batch_padding:
            return mbs - total
        if self._options.skip_dynamic_batch:
            raise internal(
                f"expected requests with batch size '{mbs}', got '{total}'... this error can "
                "be avoided by setting 'ENABLE_BATCH_PADDING' parameter in model "
                "configuration to 'YES' at a performance cost."
            )
        return 0

    def _responses(
        self, requests: list[InferenceRequest], arrays: dict[str, np.ndarray]
    ) -> list[InferenceResponse]:
        responses = []
        start = 0
        for request in requests:
            size = request.batch_size if self._spec.max_batch_size else 0
            outputs = []
            for name in requested_names(self._spec, request):
                array = arrays[name]
                if self._spec.max_batch_size:
                    array = array[start : start + size]
                outputs.append(output_tensor(self._spec, name, array))
            start += size
            responses.append(
                InferenceResponse(request.model_name, self._version, request.id, outputs)
            )
        return responses


def _merged(requests: list[InferenceRequest], name: str) -> np.ndarray:
    parts = [next(t.data for t in r.inputs if t.name == name) for r in requests]
    return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)


def _padded(array: np.ndarray, pad: int) -> np.ndarray:
    if pad == 0:
        return array
    zeros = np.zeros((pad, *array.shape[1:]), dtype=array.dtype)
    return np.concatenate([array, zeros], axis=0)


def _read(ctx: LoadContext, options: OpenVinoOptions) -> tuple[Any, Any]:
    """OpenVINO's core (extensions, cache) and the model read from the version folder."""
    core = _core(_confined(ctx.model_dir, options) if ctx.confined else options)
    return core, _read_model(core, ctx.model_file("model.xml"), ctx.model_name)


def _check_kinds(spec: ModelSpec) -> None:
    for group in spec.config.instance_group:
        if group.kind not in (mc.ModelInstanceGroup.KIND_CPU, mc.ModelInstanceGroup.KIND_AUTO):
            raise invalid_arg(
                f"unable to load model '{spec.name}', Triton OpenVINO backend supports only "
                "Kind CPU and AUTO"
            )


def _prepare(core: Any, model: Any, spec: ModelSpec, options: OpenVinoOptions) -> tuple[Any, str]:
    """Check and compile (on a worker thread: compiling takes time); also why the model's
    cost may depend on input values ('' if not: backends/data_dependence.py)."""
    checked = _checked_model(spec, model, options)
    reason = variable_inputs(spec) or openvino_reason(checked, spec, ov.PartialShape)
    compiled = _compile(core, checked, spec, options)
    log.info(
        "model '%s' compiled for %s: %s",
        spec.name,
        options.device,
        ", ".join(f"{k}={_text(compiled.get_property(k))}" for k in _REPORTED),
        extra=about_model(spec.name),
    )
    return compiled, reason


_REPORTED = ("NUM_STREAMS", "INFERENCE_NUM_THREADS", "PERFORMANCE_HINT", "INFERENCE_PRECISION_HINT")


def _text(value: Any) -> str:
    """A property as OpenVINO names it (an element type by its short name: f32)."""
    name = getattr(value, "get_type_name", None)
    return str(name() if callable(name) else value)


class OpenVinoBackend:
    """``backend: "openvino"``."""

    def __init__(self, default_max_batch_size: int = DEFAULT_MAX_BATCH_SIZE) -> None:
        self._default_max_batch_size = default_max_batch_size

    async def load(self, ctx: LoadContext) -> tuple[ModelSpec, list[ModelInstance]]:
        config = ctx.config
        # The core-level settings (and Triton's messages for bad values) before reading.
        core, model = await asyncio.to_thread(_read, ctx, OpenVinoOptions.from_config(config, 1))
        if ctx.auto_complete:
            config.name = config.name or ctx.model_name
            auto_complete(config, model, self._default_max_batch_size)
        spec = ctx.finalize(config)
        _check_kinds(spec)
        names = instance_names(spec, ctx)
        options = OpenVinoOptions.from_config(spec.config, len(names))
        mode = execution_mode({k: v.string_value for k, v in spec.config.parameters.items()})
        compiled, reason = await asyncio.to_thread(_prepare, core, model, spec, options)
        execution = ModelExecution(spec.name, mode, reason)
        return spec, [
            OpenVinoInstance(n, spec, ctx.version, compiled, options, execution) for n in names
        ]
