"""Triton's ``tritonfrontend`` package over tritium: ``KServeHttp``, ``KServeGrpc`` and
``Metrics`` start tritium's own front-ends (the same HTTP/REST, gRPC and metrics endpoints
``tritium serve`` runs) on an in-process ``tritium.tritonserver.Server``. See
docs/inprocess.md."""

from ._services import KServeGrpc, KServeHttp, Metrics

__all__ = ["KServeGrpc", "KServeHttp", "Metrics"]
