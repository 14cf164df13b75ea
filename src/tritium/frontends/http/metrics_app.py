"""The metrics endpoint (``GET /metrics`` on ``--metrics-port``), Prometheus text format."""

from __future__ import annotations

from ... import metrics
from ...server import InferenceServer
from .messages import HttpRequest, HttpResponse


class MetricsApp:
    def __init__(self, server: InferenceServer) -> None:
        self._server = server
        # --allow-cpu-metrics (off with --allow-metrics=false, as Triton): the nv_cpu_* families
        self._cpu = metrics.CpuSampler() if server.options.allow_cpu_metrics else None

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path.split("?", 1)[0] != "/metrics":
            return HttpResponse(404, [b'{"error":"Not Found"}'])
        if request.method != "GET":
            return HttpResponse(405, [b'{"error":"Method Not Allowed"}'])
        body = metrics.render(self._server.stats_snapshot(), self._cpu)
        return HttpResponse(200, [body], metrics.CONTENT_TYPE)
