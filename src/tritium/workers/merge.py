"""Totals over the workers (pure): the statistics extension's documents and the Prometheus
text of ``/metrics``.

- Statistics: per model version, every count and duration is summed, ``last_inference`` is
  the latest, batch statistics are summed per batch size.
- Metrics: every sample of a counter, a histogram (``_bucket``, ``_sum``, ``_count``: the
  buckets are the same in every worker, so the sums are the merged histogram) and a gauge of
  the server's own (pending requests, backlogs, restarts) is summed over the workers; the
  machine's gauges (CPU utilization and memory, the same machine seen by every worker) are
  taken once. A summary's ``_sum`` and ``_count`` are summed; its quantiles are computed
  again from the workers' window sketches merged (``metrics/latency.py:quantiles_of``), which
  is what a single process would answer.
"""

from __future__ import annotations

from typing import Any

from ..metrics.latency import quantiles_of
from ..metrics.render_latency import number as _number

# Gauges of the machine, not of a worker: every worker reads the same value.
_MACHINE = ("nv_cpu_", "nv_gpu_", "nv_energy_")
# A version is ready when it is ready in every worker.
_LOWEST = ("tritium_model_ready{",)


def merge_statistics(parts: list[dict[str, Any]]) -> dict[str, Any]:
    merged: dict[tuple[str, str], dict[str, Any]] = {}
    for part in parts:
        for entry in part.get("model_stats", []):
            key = (str(entry["name"]), str(entry["version"]))
            merged[key] = _merge_entry(merged[key], entry) if key in merged else entry
    return {"model_stats": list(merged.values())}


def _merge_entry(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in a.items():
        other = b.get(key)
        if key == "last_inference":
            out[key] = max(int(value), int(other or 0))
        elif key == "batch_stats":
            out[key] = _merge_batches(value, other or [])
        elif key in ("name", "version") or other is None:
            out[key] = value
        else:
            out[key] = _sum(value, other)
    for key, value in b.items():
        out.setdefault(key, value)
    return out


def _sum(a: Any, b: Any) -> Any:
    if isinstance(a, dict) and isinstance(b, dict):
        return {k: _sum(v, b[k]) if k in b else v for k, v in {**b, **a}.items()}
    if isinstance(a, bool) or isinstance(b, bool):
        return a
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a + b
    if isinstance(a, list) and isinstance(b, list):
        return a if a else b  # memory_usage: the same for every worker (an empty list today)
    return a


def _merge_batches(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by_size: dict[int, dict[str, Any]] = {}
    for entry in [*a, *b]:
        size = int(entry["batch_size"])
        if size in by_size:
            by_size[size] = {
                k: (size if k == "batch_size" else _sum(v, entry.get(k, v)))
                for k, v in by_size[size].items()
            }
        else:
            by_size[size] = entry
    return [by_size[s] for s in sorted(by_size)]


def merge_metrics(parts: list[dict[str, Any]]) -> str:
    """``parts``: each worker's ``{"text": its /metrics, "sketches": {series: {"quantiles":
    [...], "cells": [[key, count, total], ...]}}}`` (series: the family name and its labels,
    as rendered before ``,quantile=``)."""
    order: list[str] = []  # comment lines and sample keys, in the first worker's order
    values: dict[str, float] = {}
    kinds: dict[str, str] = {}
    for part in parts:
        for line in str(part.get("text", "")).splitlines():
            _take(line, order, values, kinds)
    quantiles = _merged_quantiles(parts)
    out: list[str] = []
    for item in order:
        if item.startswith("#") or not item:
            out.append(item)
        elif item in quantiles:
            out.append(f"{item} {_number(quantiles[item])}")
        else:
            out.append(f"{item} {_number(values[item])}")
    return "\n".join(out) + "\n"


def _take(line: str, order: list[str], values: dict[str, float], kinds: dict[str, str]) -> None:
    if line.startswith("#") or not line.strip():
        if line not in kinds:  # a HELP or TYPE line, once
            kinds[line] = ""
            order.append(line)
        return
    key, _, text = line.rpartition(" ")
    try:
        value = float(text)
    except ValueError:
        return
    if key not in values:
        order.append(key)
        values[key] = value
    elif key.startswith(_LOWEST):
        values[key] = min(values[key], value)
    elif not key.startswith(_MACHINE):
        values[key] += value


def _merged_quantiles(parts: list[dict[str, Any]]) -> dict[str, float]:
    cells: dict[str, dict[int, list[int]]] = {}
    wanted: dict[str, list[float]] = {}
    for part in parts:
        for series, sketch in dict(part.get("sketches", {})).items():
            wanted[series] = [float(q) for q in sketch["quantiles"]]
            merged = cells.setdefault(series, {})
            for key, count, total in sketch["cells"]:
                cell = merged.setdefault(int(key), [0, 0])
                cell[0] += int(count)
                cell[1] += int(total)
    found: dict[str, float] = {}
    for series, qs in wanted.items():
        for q, value in zip(qs, quantiles_of(cells[series], tuple(qs)), strict=True):
            found[f'{series},quantile="{_number(q)}"}}'] = value
    return found
