"""PyTriton's ``Request`` and ``Response`` (``pytriton.proxy.types``): what an inference
callable gets (a list of requests, one per client request of the execution) and returns."""

from __future__ import annotations

import dataclasses
from collections.abc import ItemsView, Iterator, KeysView, ValuesView
from typing import Any

import numpy as np


@dataclasses.dataclass
class _Tensors:
    """Tensors by name (``data``), used as the mapping itself, as PyTriton's are."""

    data: dict[str, np.ndarray]

    def __getitem__(self, name: str) -> np.ndarray:
        return self.data[name]

    def __setitem__(self, name: str, value: np.ndarray) -> None:
        self.data[name] = value

    def __delitem__(self, name: str) -> None:
        del self.data[name]

    def __len__(self) -> int:
        return len(self.data)

    def __iter__(self) -> Iterator[str]:
        return iter(self.data)

    def items(self) -> ItemsView[str, np.ndarray]:
        return self.data.items()

    def keys(self) -> KeysView[str]:
        return self.data.keys()

    def values(self) -> ValuesView[np.ndarray]:
        return self.data.values()


@dataclasses.dataclass
class Request(_Tensors):
    """One request: its inputs by name (``data``) and its parameters."""

    parameters: dict[str, Any] | None = None
    span: Any | None = None
    requested_output_names: list[str] | None = None


@dataclasses.dataclass
class Response(_Tensors):
    """One response: its outputs by name."""


Requests = list[Request]
Responses = list[Response]
