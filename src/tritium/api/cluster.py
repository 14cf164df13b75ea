"""The other workers of ``tritium serve --workers N``, as the inference call and the server
see them (implemented by workers/member.py)."""

from __future__ import annotations

from typing import Any, Protocol

from ..request import InferenceRequest, ResponseSender


class Cluster(Protocol):
    """The other workers of ``tritium serve --workers N`` (workers/member.py): what must be
    the whole server's goes through it. None in a single process."""

    async def load(
        self, name: str, config_json: str | None, files: dict[str, bytes] | None
    ) -> None: ...

    async def unload(self, name: str, unload_dependents: bool) -> None: ...

    def ready(self) -> bool: ...

    async def statistics(self, name: str, version: str) -> dict[str, Any]: ...

    async def metrics(self) -> bytes: ...

    def sequence_owner(self, correlation_id: int | str) -> int | None:
        """The worker that keeps this sequence's state, when it is another one."""

    def cache_owner(self, key: bytes) -> int | None:
        """The worker whose response cache holds this key, when it is another one."""

    def forward(self, owner: int, request: InferenceRequest, sender: ResponseSender) -> None:
        """Run ``request`` on worker ``owner``; its responses come to ``sender``."""

    async def broadcast(self, action: str, args: dict[str, Any]) -> None:
        """Apply a setting change on every other worker (``apply_setting``): this one
        applied it first."""
