"""The metrics endpoint (``GET /metrics`` on ``--metrics-port``), Prometheus text format."""

from __future__ import annotations

from collections.abc import Awaitable

from ...metrics.render import CONTENT_TYPE, CpuSampler, render
from ...server import Cluster, InferenceServer
from .messages import HttpRequest, HttpResponse


class MetricsApp:
    def __init__(self, server: InferenceServer) -> None:
        self._server = server
        options = server.options
        self._cpu = (
            CpuSampler(options.metrics.interval_ms / 1000) if options.metrics.allow_cpu else None
        )

    def __call__(self, request: HttpRequest) -> HttpResponse | Awaitable[HttpResponse]:
        if request.path.split("?", 1)[0] != "/metrics":
            return HttpResponse(404, [b'{"error":"Not Found"}'])
        if request.method != "GET":
            return HttpResponse(405, [b'{"error":"Method Not Allowed"}'])
        server = self._server
        if server.cluster is not None:  # --workers N: the totals over every worker
            return self._total(server.cluster)
        body = render(
            server.stats_snapshot(),
            self._cpu,
            server.custom_metrics,
            server.repository_index(),
            server.openai_metrics,
        )
        return HttpResponse(200, [body], CONTENT_TYPE)

    @staticmethod
    async def _total(cluster: Cluster) -> HttpResponse:
        return HttpResponse(200, [await cluster.metrics()], CONTENT_TYPE)
