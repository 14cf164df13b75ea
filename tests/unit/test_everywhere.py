"""``InferenceServer.everywhere``: the one mechanism behind the ``_total`` operations of
``--workers N`` (a setting applied on this worker first, then broadcast to the others
through ``Cluster``), in process with a recording cluster in place of the supervisor."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tritium.errors import ErrorKind, ServerError
from tritium.logs.settings import LogUpdate
from tritium.options import ServerOptions
from tritium.server import InferenceServer


class _Recorded:
    """The cluster's side of a setting change: what was broadcast, in order."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []

    async def broadcast(self, action: str, args: dict[str, Any]) -> None:
        self.sent.append((action, args))

    def ready(self) -> bool:
        return True


def _server(cluster: _Recorded | None) -> InferenceServer:
    server = InferenceServer(ServerOptions(allow_client_shm=True))
    server.cluster = cluster  # type: ignore[assignment]  # the part of Cluster used here
    return server


def test_each_total_applies_here_then_broadcasts_once() -> None:
    cluster = _Recorded()
    server = _server(cluster)

    async def run() -> tuple[dict[str, Any], dict[str, list[str]], dict[str, list[str]]]:
        settings = await server.update_log_settings_total(LogUpdate(info=True))
        shown = await server.trace_setting_total("", {"trace_rate": ["7"]})
        read = await server.trace_setting_total("")  # a read: nothing to broadcast
        await server.unregister_system_shm_total("")
        return settings, shown, read

    settings, shown, read = asyncio.run(run())
    assert settings["log_info"] is True
    assert shown["trace_rate"] == ["7"] and read["trace_rate"] == ["7"]
    assert cluster.sent == [
        ("log", {"update": {"info": True}}),
        ("trace", {"model": "", "update": {"trace_rate": ["7"]}}),
        ("shm_unregister", {"name": ""}),
    ]


def test_a_change_refused_here_goes_nowhere() -> None:
    cluster = _Recorded()
    server = _server(cluster)
    with pytest.raises(ServerError) as caught:
        asyncio.run(server.trace_setting_total("no_such_model", {"trace_rate": ["7"]}))
    assert caught.value.kind is ErrorKind.INVALID_ARG
    assert cluster.sent == []


def test_one_process_applies_here_only() -> None:
    server = _server(None)
    shown = asyncio.run(server.everywhere("trace", {"model": "", "update": {"trace_rate": ["9"]}}))
    assert shown["trace_rate"] == ["9"]
    with pytest.raises(ServerError):
        asyncio.run(server.everywhere("nonsense", {}))
