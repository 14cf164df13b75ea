"""PyTriton's model configuration classes (``pytriton.model_config``), same names and fields."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Sequence
from typing import Any

import numpy as np


class DeviceKind(enum.Enum):
    """Where a model's instances run (tritium: CPU only)."""

    KIND_AUTO = "KIND_AUTO"
    KIND_CPU = "KIND_CPU"
    KIND_GPU = "KIND_GPU"


class TimeoutAction(enum.Enum):
    """What a queue does with a request that timed out."""

    REJECT = "REJECT"
    DELAY = "DELAY"


@dataclasses.dataclass
class QueuePolicy:
    """A dynamic batcher's queue policy (Triton's ``ModelQueuePolicy``)."""

    timeout_action: TimeoutAction = TimeoutAction.REJECT
    default_timeout_microseconds: int = 0
    allow_timeout_override: bool = False
    max_queue_size: int = 0


@dataclasses.dataclass
class DynamicBatcher:
    """Dynamic batching (Triton's ``ModelDynamicBatching``)."""

    max_queue_delay_microseconds: int = 0
    preferred_batch_size: list[int] | None = None
    preserve_ordering: bool = False
    priority_levels: int = 0
    default_priority_level: int = 0
    default_queue_policy: QueuePolicy | None = None
    priority_queue_policy: dict[int, QueuePolicy] | None = None


@dataclasses.dataclass
class WarmupInput:
    """One input of a warmup sample."""

    dtype: Any
    shape: Sequence[int]
    zero_data: bool | None = False
    random_data: bool | None = False
    input_data_file: str | None = None


@dataclasses.dataclass
class ModelWarmup:
    """A warmup sample (refused by tritium.pytriton: see docs/pytriton.md)."""

    name: str
    batch_size: int
    inputs: dict[str, WarmupInput]
    count: int


@dataclasses.dataclass
class ModelConfig:
    """How a bound function is served."""

    batching: bool = True
    max_batch_size: int = 4
    batcher: DynamicBatcher = dataclasses.field(default_factory=DynamicBatcher)
    response_cache: bool = False
    decoupled: bool = False
    model_warmup: list[ModelWarmup] | None = None


@dataclasses.dataclass(frozen=True)
class Tensor:
    """A model input or output: its shape without the batch dimension, numpy dtype, name."""

    shape: tuple[int, ...]
    dtype: Any
    name: str | None = None
    optional: bool | None = False

    def __post_init__(self) -> None:
        if isinstance(self.dtype, np.dtype):
            object.__setattr__(self, "dtype", self.dtype.type)


__all__ = [
    "DeviceKind",
    "DynamicBatcher",
    "ModelConfig",
    "ModelWarmup",
    "QueuePolicy",
    "Tensor",
    "TimeoutAction",
    "WarmupInput",
]
