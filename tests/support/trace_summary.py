"""What Triton's trace summary tool (server repo qa/common/trace_summary.py) computes from a
trace file, re-implemented for tests: traces grouped by id, kept when a root trace has the
front-end's timestamps (or its parent was kept), and per (model, version) the count and the
request / queue / compute / input / infer / output spans, each end at or after its start
(the tool raises otherwise)."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

FRONTEND_FILTER = {"http": "HTTP_RECV_START", "grpc": "GRPC_WAITREAD_START"}
SPANS = {
    "REQUEST": ("REQUEST_START", "REQUEST_END"),
    "QUEUE": ("QUEUE_START", "COMPUTE_START"),
    "COMPUTE": ("COMPUTE_START", "COMPUTE_END"),
    "COMPUTE_INPUT": ("COMPUTE_START", "COMPUTE_INPUT_END"),
    "COMPUTE_INFER": ("COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START"),
    "COMPUTE_OUTPUT": ("COMPUTE_OUTPUT_START", "COMPUTE_END"),
    "HTTP_INFER": ("HTTP_RECV_START", "HTTP_SEND_END"),
    "HTTP_RECV": ("HTTP_RECV_START", "HTTP_RECV_END"),
    "HTTP_SEND": ("HTTP_SEND_START", "HTTP_SEND_END"),
    "GRPC_INFER": ("GRPC_WAITREAD_END", "GRPC_SEND_END"),
    "GRPC_SEND": ("GRPC_SEND_START", "GRPC_SEND_END"),
}


def load(path: Path) -> list[dict[str, Any]]:
    entries = json.loads(Path(path).read_text())
    assert isinstance(entries, list)
    return entries


def merged(entries: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Every trace by id: model name/version, parent id, {timestamp name: ns}, tensors."""
    traces: dict[int, dict[str, Any]] = defaultdict(lambda: {"timestamps": {}, "tensors": []})
    for entry in sorted(entries, key=lambda e: e.get("id", -1)):
        trace = traces[entry["id"]]
        for key in ("model_name", "model_version", "parent_id", "request_id"):
            if key in entry:
                trace[key] = entry[key]
        for stamp in entry.get("timestamps", ()):
            trace["timestamps"][stamp["name"]] = stamp["ns"]
        if "activity" in entry:
            trace["tensors"].append((entry["activity"], entry["tensor"]))
    return dict(traces)


def summarize(entries: list[dict[str, Any]], frontend: str) -> dict[tuple[str, int], Any]:
    """Per (model, version): {"count": n, span name: total ns} for the traces of one
    front-end, as the tool's ``summarize`` does."""
    traces = merged(entries)
    kept: set[int] = set()
    for trace_id in sorted(traces):
        trace = traces[trace_id]
        if "parent_id" not in trace:
            if FRONTEND_FILTER[frontend] in trace["timestamps"]:
                kept.add(trace_id)
        elif trace["parent_id"] in kept:
            kept.add(trace_id)
    summary: dict[tuple[str, int], Any] = {}
    for trace_id in sorted(kept):
        trace = traces[trace_id]
        stamps = trace["timestamps"]
        if "REQUEST_START" not in stamps or "REQUEST_END" not in stamps:
            continue
        key = (trace["model_name"], trace["model_version"])
        spans = summary.setdefault(key, {"count": 0})
        spans["count"] += 1
        for name, (start, end) in SPANS.items():
            if start in stamps and end in stamps:
                assert stamps[end] >= stamps[start], f"{end} < {start} in trace {trace_id}"
                spans[name] = spans.get(name, 0) + stamps[end] - stamps[start]
    return summary
