"""grpc.health.v1.Health (Check, Watch), apart from ``service.py`` so that service.py compiles
with mypyc: ``Watch`` is an async generator, which mypyc does not compile, so this module
stays interpreted in the compiled build (it is not on the request path)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from grpc_health.v1 import health_pb2

from ...server import InferenceServer
from ...transport.grpc.call import ServerCall
from ...transport.grpc.status import RpcError, StatusCode

# Health.Watch streams open at once: per connection (grpc's client-side health checking opens
# one per channel and service) and on the whole server; one more is RESOURCE_EXHAUSTED.
MAX_WATCHES_PER_CONNECTION = 8
MAX_WATCHES = 1024


class HealthService:
    """grpc.health.v1: SERVING when the server is ready (Check), and its changes (Watch).

    A Watch stream sends the status at once, then one message per change: it sleeps on the
    server's ``Readiness`` (woken when readiness flips), so an idle watcher costs no CPU.
    At most ``MAX_WATCHES_PER_CONNECTION`` streams per connection and ``MAX_WATCHES`` in all
    (each holds a stream until the client goes); one more is RESOURCE_EXHAUSTED."""

    def __init__(self, server: InferenceServer) -> None:
        self._server = server
        self._watches = 0
        self._per_connection: dict[object, int] = {}  # connections watching now

    async def Check(self, request: Any, call: ServerCall) -> Any:
        return health_pb2.HealthCheckResponse(status=_health(self._server.is_ready()))

    async def Watch(self, request: Any, call: ServerCall) -> AsyncIterator[Any]:
        connection = call.connection
        self._enter(connection)
        try:
            readiness = self._server.readiness
            ready = self._server.is_ready()
            while True:
                yield health_pb2.HealthCheckResponse(status=_health(ready))
                ready = await readiness.wait(ready)
        finally:
            self._leave(connection)

    def _enter(self, connection: object) -> None:
        """Count a new Watch stream, or refuse it over a bound."""
        held = self._per_connection.get(connection, 0)
        if held >= MAX_WATCHES_PER_CONNECTION:
            raise RpcError(
                StatusCode.RESOURCE_EXHAUSTED,
                f"too many Health.Watch streams on this connection (at most "
                f"{MAX_WATCHES_PER_CONNECTION})",
            )
        if self._watches >= MAX_WATCHES:
            raise RpcError(
                StatusCode.RESOURCE_EXHAUSTED,
                f"too many Health.Watch streams on this server (at most {MAX_WATCHES})",
            )
        self._per_connection[connection] = held + 1
        self._watches += 1

    def _leave(self, connection: object) -> None:
        self._watches -= 1
        held = self._per_connection.pop(connection, 1) - 1
        if held:
            self._per_connection[connection] = held


def _health(ready: bool) -> Any:
    response = health_pb2.HealthCheckResponse
    return response.SERVING if ready else response.NOT_SERVING
