"""The configuration a bound model is served with (``pytriton.model_config.
triton_model_config``): what decorators read through ``get_model_config``."""

from __future__ import annotations

import dataclasses
from typing import Any

from . import DeviceKind, DynamicBatcher


@dataclasses.dataclass
class TensorSpec:
    """One input or output of a bound model, named."""

    name: str
    shape: tuple[int, ...]
    dtype: Any
    optional: bool | None = False


@dataclasses.dataclass
class ResponseCache:
    enable: bool


@dataclasses.dataclass
class TritonModelConfig:
    """A bound model's configuration as served."""

    model_name: str
    model_version: int = 1
    max_batch_size: int = 4
    batching: bool = True
    batcher: DynamicBatcher | None = None
    instance_group: dict[DeviceKind, int | None] = dataclasses.field(default_factory=dict)
    decoupled: bool = False
    backend_parameters: dict[str, str] = dataclasses.field(default_factory=dict)
    inputs: list[TensorSpec] | None = None
    outputs: list[TensorSpec] | None = None
    response_cache: ResponseCache | None = None

    @property
    def backend(self) -> str:
        return "pytriton"
