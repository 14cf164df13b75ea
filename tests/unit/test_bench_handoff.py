"""The ``handoff`` bench list (issue 14 item 10, bench/scenarios/handoff.py): its rows, the
hand-off and batching figures derived from them, and the lines under its table."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))  # the package ``bench``

from bench.catalog import TARGETS  # noqa: E402
from bench.scenarios import handoff  # noqa: E402


def _row(model: str, conc: int, target: str = "", **values: Any) -> dict[str, Any]:
    return {"model": model, "concurrency": conc, "target": target, "infer_per_s": 1.0, **values}


def test_the_list_has_a_one_cpu_row_on_a_server_of_its_own() -> None:
    scenarios = handoff.handoff_scenarios()
    assert len({s.name for s in scenarios}) == len(scenarios)
    pinned = [s for s in scenarios if s.target]
    assert [(s.model, s.concurrency, s.target) for s in pinned] == [
        (handoff.PYTHON_MODEL, 1, handoff.ONE_CPU)
    ]
    assert handoff.ONE_CPU in TARGETS


def test_the_ceiling_is_what_a_free_stub_would_leave_of_the_cpu_per_inference() -> None:
    row = _row(handoff.PYTHON_MODEL, 16, server_cpu_us=140.0, stub_cpu_us=35.0, client_cpu_us=175.0)
    assert handoff.batching_ceiling(row) == (140 + 35 + 175) / (140 + 175)
    assert handoff.batching_ceiling(_row(handoff.PYTHON_MODEL, 16, server_cpu_us=1.0)) is None


def test_compare_puts_each_figure_on_its_own_row() -> None:
    compute = {"input": 20.0, "infer": 100.0, "output": 10.0}
    rows = [
        _row(handoff.PYTHON_MODEL, 1, compute_us=compute, baseline_us=10.0, p50_ms=0.6),
        _row(handoff.PYTHON_MODEL, 1, handoff.ONE_CPU, compute_us=compute, baseline_us=20.0),
        _row("simple", 1, p50_ms=0.4, baseline_us=5.0),
        _row(handoff.PYTHON_MODEL, 16, server_cpu_us=100.0, stub_cpu_us=50.0, client_cpu_us=100.0),
        _row(handoff.DYNBATCH, 16, avg_batch=4.0),
    ]
    rows[3]["infer_per_s"], rows[4]["infer_per_s"] = 1000.0, 1100.0
    handoff.compare(rows)
    assert rows[0]["handoff_us"] == 120.0  # the run's server: 130 µs around the stub − 10
    assert rows[1]["handoff_us"] == 110.0  # the one-CPU server's row, not mixed up with it
    assert abs(rows[0]["vs_simple_p50_ms"] - 0.2) < 1e-9
    assert abs(rows[4]["batching_gain"] - 1.1) < 1e-9
    assert rows[3]["batching_ceiling"] == 250 / 200
    lines = "\n".join(handoff.goal_lines(rows))
    assert "hand-off round trip at c1: 120.0 µs" in lines
    assert "server and stub on one CPU (one-cpu): 110.0 µs" in lines
    assert "1.10× batching off" in lines
    assert "would gain at most 1.25×, 1.50× with a client that cost nothing too" in lines
