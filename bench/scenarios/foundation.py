"""The ``foundation`` list: ``simple`` (ONNX) and ``add_sub_python`` (Python backend) over
binary HTTP, JSON HTTP and unary gRPC at concurrency 1 and 16, on the generic unary worker
(catalog.worker) with the ``simple`` contract; their baselines are baselines.baseline_onnx and
baselines.baseline_python."""

from __future__ import annotations

from bench.common import Issue, Scenario


def foundation_scenarios() -> list[Scenario]:
    return [
        Scenario(model, protocol, concurrency)
        for model in ("simple", "add_sub_python")
        for protocol in ("http", "http-json", "grpc")
        for concurrency in (1, 16)
    ]


ISSUE = Issue("foundation", foundation_scenarios)
