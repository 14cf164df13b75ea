"""Per model, how an OpenAI request becomes its input tensors, read from its config once.

Every model that takes a BYTES input ``text_input`` and answers a BYTES output ``text_output``
can serve completions, in one of three formats:

- **vLLM** (the model declares ``sampling_parameters``): the settings go as one JSON string in
  ``sampling_parameters`` (``temperature``, ``top_p``, ``seed``, ``stop``, ``max_tokens``,
  ``frequency_penalty``, ``presence_penalty``), as Triton's vLLM backend reads them;
- **TensorRT-LLM** (it declares any of ``max_tokens``, ``temperature``, ``top_p``, ``seed``,
  ``stop_words``, ``frequency_penalty``, ``presence_penalty``): each setting is its own tensor,
  sent only when the model declares it;
- **plain** (``text_input`` alone): the prompt only.

In every format: ``stream`` (BOOL) says whether the client streams, ``exclude_input_in_output``
(BOOL) carries ``echo``, ``return_num_input_tokens``/``return_num_output_tokens``/
``return_finish_reason`` are set true and ``return_logprobs`` false, each when declared. A
setting the model has no way to receive is refused (400, ``unsupported_parameter``), except
``stop`` and ``echo``, which the server applies itself when the model cannot (``stop``: the text
is cut before the first stop sequence and the request cancelled; ``echo``: the prompt is put in
front of the text). ``stream_options.include_usage`` needs a model that counts tokens (outputs
``num_input_tokens`` and ``num_output_tokens``). A model with a required input none of these
fill cannot be served and says so.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from typing import Any, Final, Protocol

import numpy as np
import orjson

from ...types import DataType, Tensor
from ..tensors import numeric_array
from .chat import ChatTemplate, template_of
from .errors import OpenAIError, unsupported_parameter
from .schema import Generation

VLLM: Final = "vllm"
TRTLLM: Final = "tensorrt_llm"
PLAIN: Final = "plain"

# OpenAI setting -> the TensorRT-LLM input that carries it
_SEPARATE: Final = {
    "max_tokens": "max_tokens",
    "temperature": "temperature",
    "top_p": "top_p",
    "seed": "seed",
    "frequency_penalty": "frequency_penalty",
    "presence_penalty": "presence_penalty",
    "stop": "stop_words",
}
_FLAGS_TRUE: Final = ("return_num_input_tokens", "return_num_output_tokens", "return_finish_reason")
_FLAGS_FALSE: Final = ("return_logprobs",)
_FILLED: Final = frozenset(
    ("text_input", "stream", "sampling_parameters", "exclude_input_in_output")
    + _FLAGS_TRUE
    + _FLAGS_FALSE
    + tuple(_SEPARATE.values())
)


class IOSpec(Protocol):
    """What a format reads of one input or output of a model's config (config/spec.py)."""

    @property
    def name(self) -> str: ...
    @property
    def datatype(self) -> DataType: ...
    @property
    def dims(self) -> tuple[int, ...]: ...


class ModelSpec(Protocol):
    """What a format reads of a model's config (``config/spec.py:ModelSpec``, which a
    front-end does not import: it gets one from ``Inference.model``)."""

    @property
    def name(self) -> str: ...
    @property
    def max_batch_size(self) -> int: ...
    @property
    def inputs(self) -> Mapping[str, IOSpec]: ...
    @property
    def outputs(self) -> Mapping[str, IOSpec]: ...
    @property
    def required_inputs(self) -> Set[str]: ...
    @property
    def config_json(self) -> dict[str, Any]: ...


class ModelFormat:
    """One model's request format (see the module's doc); ``problem``: why the model cannot
    serve completions at all ("" when it can)."""

    __slots__ = ("name", "kind", "problem", "_inputs", "_batched", "counts_tokens", "_template")

    def __init__(self, spec: ModelSpec) -> None:
        self.name = spec.name
        self._inputs = spec.inputs
        self._batched = spec.max_batch_size > 0
        outputs = spec.outputs
        self.counts_tokens = "num_input_tokens" in outputs and "num_output_tokens" in outputs
        self.problem = _problem(spec)
        self._template = template_of(spec.config_json.get("parameters", {}))
        if "sampling_parameters" in spec.inputs:
            self.kind = VLLM
        elif any(name in spec.inputs for name in _SEPARATE.values()):
            self.kind = TRTLLM
        else:
            self.kind = PLAIN

    @property
    def takes_stop(self) -> bool:
        """Whether the model applies ``stop`` itself (else the server does)."""
        return self.kind == VLLM or "stop_words" in self._inputs

    @property
    def takes_echo(self) -> bool:
        """Whether the model applies ``echo`` itself (else the server does)."""
        return "exclude_input_in_output" in self._inputs

    def prompt(self, gen: Generation) -> str:
        """The prompt: a completion's own, a chat's messages through the model's template."""
        if not gen.chat:
            return gen.prompt
        template = self._template
        if not isinstance(template, ChatTemplate):
            raise OpenAIError(
                f"model '{self.name}' cannot serve chat completions: {template}",
                "model",
                "model_not_supported",
            )
        return template.render(gen.messages)

    def tensors(self, gen: Generation) -> tuple[Tensor, ...]:
        """The input tensors of one choice of ``gen`` (a chat's prompt rendered here); a
        setting the model cannot receive raises ``OpenAIError``."""
        if self.problem:
            raise OpenAIError(self.problem, "model", "model_not_supported")
        if gen.include_usage and not self.counts_tokens:
            raise unsupported_parameter(
                "stream_options",
                f"model '{self.name}' does not count tokens (no outputs 'num_input_tokens' and "
                "'num_output_tokens'): usage cannot be included",
            )
        values: dict[str, list[object]] = {"text_input": [self.prompt(gen)]}
        inputs = self._inputs
        if "stream" in inputs:
            values["stream"] = [gen.stream]
        if self.takes_echo:
            values["exclude_input_in_output"] = [not gen.echo]
        for name in _FLAGS_TRUE:
            if name in inputs:
                values[name] = [True]
        for name in _FLAGS_FALSE:
            if name in inputs:
                values[name] = [False]
        if self.kind == VLLM:
            values["sampling_parameters"] = [_sampling_parameters(gen)]
        else:
            self._separate(gen, values)
        return tuple(self._tensor(name, v) for name, v in values.items())

    def _separate(self, gen: Generation, values: dict[str, list[object]]) -> None:
        settings = _settings(gen)
        for key, value in settings.items():
            name = _SEPARATE[key]
            if name in self._inputs:
                values[name] = list(value) if isinstance(value, tuple) else [value]
            elif key != "stop":  # stop: applied by the server instead
                raise unsupported_parameter(
                    key,
                    f"model '{self.name}' cannot honour '{key}': its config declares no "
                    f"input '{name}'",
                )

    def _tensor(self, name: str, values: list[object]) -> Tensor:
        return input_tensor(self._inputs[name], values, self._batched)


def input_tensor(spec: IOSpec, values: list[object], batched: bool) -> Tensor:
    """``values`` as the input ``spec`` declares it: its datatype, its shape (with the batch
    dimension, one request, when the model batches)."""
    name = spec.name
    shape = _shape(spec, len(values), batched)
    datatype = spec.datatype
    if datatype is DataType.BYTES:
        array = np.empty(len(values), dtype=object)
        array[:] = [_text(v) for v in values]
    elif datatype is DataType.BOOL:
        array = np.array([bool(v) for v in values], dtype=np.bool_)
    else:
        array = numeric_array(values, datatype, name)
    return Tensor(name, datatype, shape, array.reshape(shape))


def _problem(spec: ModelSpec) -> str:
    text_in = spec.inputs.get("text_input")
    text_out = spec.outputs.get("text_output")
    if text_in is None or text_out is None:
        return (
            f"model '{spec.name}' cannot serve completions: it needs an input 'text_input' and "
            "an output 'text_output'"
        )
    if text_in.datatype is not DataType.BYTES or text_out.datatype is not DataType.BYTES:
        return (
            f"model '{spec.name}' cannot serve completions: 'text_input' and 'text_output' "
            "must be TYPE_STRING"
        )
    for name in sorted(spec.required_inputs - _FILLED):
        return (
            f"model '{spec.name}' cannot serve completions: it needs input '{name}', which an "
            "OpenAI request does not give"
        )
    return ""


def _settings(gen: Generation) -> dict[str, object]:
    """The sampling settings the request gives (OpenAI's names)."""
    found: dict[str, object] = {}
    for key, value in (
        ("max_tokens", gen.max_tokens),
        ("temperature", gen.temperature),
        ("top_p", gen.top_p),
        ("seed", gen.seed),
        ("frequency_penalty", gen.frequency_penalty),
        ("presence_penalty", gen.presence_penalty),
    ):
        if value is not None:
            found[key] = value
    if gen.stop:
        found["stop"] = gen.stop
    return found


def _sampling_parameters(gen: Generation) -> str:
    settings = _settings(gen)
    if "stop" in settings:
        settings["stop"] = list(gen.stop)
    return orjson.dumps(settings).decode()


def _shape(spec: IOSpec, count: int, batched: bool) -> tuple[int, ...]:
    """The shape of ``count`` values for an input of ``spec``'s dims (its one variable
    dimension takes what the others leave)."""
    dims = list(spec.dims)
    known = 1
    for d in dims:
        if d != -1:
            known *= d
    variable = dims.count(-1)
    if variable:
        first = dims.index(-1)
        dims = [1 if d == -1 else d for d in dims]
        if count % known == 0:
            dims[first] = count // known
    size = 1
    for d in dims:
        size *= d
    if size != count:
        raise OpenAIError(
            f"{count} value(s) do not fit input '{spec.name}' of shape {list(spec.dims)}",
            None,
            "model_not_supported",
        )
    return (1, *dims) if batched else tuple(dims)


def _text(value: object) -> bytes:
    return value.encode() if isinstance(value, str) else str(value).encode()
