"""``/v1/embeddings`` over a model that answers a vector per text: the request read and
checked, the model's contract read once from its config, the answer's document.

A model serves embeddings when it takes a BYTES input ``text_input`` and answers a numeric
output ``embedding`` (its values, flattened, are the vector). ``dimensions`` is given to the
model as its input ``dimensions`` when it declares one, and refused otherwise; the model's
``num_input_tokens`` output (when declared) makes ``usage``. Each input text is one inference.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Set
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from ...types import DataType, InferenceResponse, Tensor
from .errors import OpenAIError, invalid_value, unsupported_parameter
from .formats import IOSpec, ModelSpec, input_tensor
from .schema import check_keys, int_value, load_object, model_name

MAX_INPUTS: Final = 64  # texts per request: one inference each
_KEYS: Final = frozenset(("model", "input", "encoding_format", "dimensions"))
_FILLED: Final = frozenset(("text_input", "dimensions"))


@dataclass(frozen=True, slots=True)
class EmbeddingsRequest:
    model: str
    texts: tuple[str, ...]
    base64: bool = False
    dimensions: int | None = None


def parse_embeddings(body: bytes | bytearray) -> EmbeddingsRequest:
    """The body of ``/v1/embeddings`` (run off the loop for a large body)."""
    doc = load_object(body)
    check_keys(doc, _KEYS)
    texts = _texts(doc.get("input"))
    encoding = doc.get("encoding_format")
    if encoding not in (None, "float", "base64"):
        raise invalid_value("encoding_format", "'encoding_format' must be 'float' or 'base64'")
    dimensions = int_value(doc, "dimensions", 1, 1 << 20)
    return EmbeddingsRequest(model_name(doc), texts, encoding == "base64", dimensions)


def _texts(value: Any) -> tuple[str, ...]:
    texts = [value] if isinstance(value, str) else value
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        raise unsupported_parameter(
            "input", "'input' must be a string or an array of strings (token ids are not supported)"
        )
    if len(texts) > MAX_INPUTS:
        raise invalid_value("input", f"'input' takes at most {MAX_INPUTS} texts")
    if not all(texts):
        raise invalid_value("input", "'input' texts must be non-empty")
    return tuple(texts)


class EmbeddingModel:
    """One model's embedding contract (see the module's doc), read once from its config;
    ``problem``: why it cannot serve embeddings ("" when it can)."""

    __slots__ = ("name", "problem", "counts_tokens", "_inputs", "_batched")

    def __init__(self, spec: ModelSpec) -> None:
        self.name = spec.name
        self._inputs: Mapping[str, IOSpec] = spec.inputs
        self._batched = spec.max_batch_size > 0
        self.counts_tokens = "num_input_tokens" in spec.outputs
        self.problem = _problem(spec.name, spec.inputs, spec.outputs, spec.required_inputs)

    def tensors(self, request: EmbeddingsRequest, text: str) -> tuple[Tensor, ...]:
        if self.problem:
            raise OpenAIError(self.problem, "model", "model_not_supported")
        tensors = [input_tensor(self._inputs["text_input"], [text], self._batched)]
        if request.dimensions is not None:
            spec = self._inputs.get("dimensions")
            if spec is None:
                raise unsupported_parameter(
                    "dimensions",
                    f"model '{self.name}' cannot honour 'dimensions': its config declares no "
                    "input 'dimensions'",
                )
            tensors.append(input_tensor(spec, [request.dimensions], self._batched))
        return tuple(tensors)


def _problem(
    name: str, inputs: Mapping[str, IOSpec], outputs: Mapping[str, IOSpec], required: Set[str]
) -> str:
    text_in, vector = inputs.get("text_input"), outputs.get("embedding")
    if text_in is None or vector is None:
        return (
            f"model '{name}' cannot serve embeddings: it needs an input 'text_input' and an "
            "output 'embedding'"
        )
    if text_in.datatype is not DataType.BYTES or vector.datatype.dtype.kind not in "fiu":
        return (
            f"model '{name}' cannot serve embeddings: 'text_input' must be TYPE_STRING and "
            "'embedding' numeric"
        )
    for missing in sorted(required - _FILLED):
        return (
            f"model '{name}' cannot serve embeddings: it needs input '{missing}', which an "
            "OpenAI request does not give"
        )
    return ""


def document(
    request: EmbeddingsRequest, model: EmbeddingModel, responses: list[InferenceResponse]
) -> dict[str, Any]:
    """The answer: one vector per input text, in order."""
    data = []
    prompt_tokens = 0
    for index, response in enumerate(responses):
        vector = np.zeros(0, dtype=np.float32)
        for tensor in response.outputs:
            if tensor.name == "embedding":
                vector = tensor.data.reshape(-1).astype(np.float32)
            elif tensor.name == "num_input_tokens" and tensor.datatype is not DataType.BYTES:
                prompt_tokens += int(tensor.data.reshape(-1)[0]) if tensor.data.size else 0
        value: Any = (
            base64.b64encode(vector.astype("<f4").tobytes()).decode()
            if request.base64
            else vector.tolist()
        )
        data.append({"object": "embedding", "index": index, "embedding": value})
    usage = (
        {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens}
        if model.counts_tokens
        else None
    )
    return {"object": "list", "data": data, "model": request.model, "usage": usage}
