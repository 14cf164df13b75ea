"""The scheduler interface: how a model version's requests reach its instances.

Direct (Triton's default scheduler), dynamic batching and ensembles implement it; the one
place that chooses among them is ``model.py``. A scheduler answers every
request it accepted through the request's sender, even when it is closed.
"""

from __future__ import annotations

from typing import Protocol

from ..request import InferenceRequest


class Scheduler(Protocol):
    def submit(self, request: InferenceRequest) -> None:
        """Take a validated request; never raises (errors go to the request's sender)."""

    async def close(self) -> None:
        """Unloading: fail what still waits and let running executions finish."""
