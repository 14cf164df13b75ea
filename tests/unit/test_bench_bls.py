"""The ``bls`` bench list (issue 14 item 11, bench/scenarios/bls.py): its matrix, the request
of a call-overhead row, the per-call figures, the ratios to the ensemble rows and the per-call
costs, the child's compute time from the statistics, the models it writes, and its tables."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))  # the package ``bench``

from bench.catalog import BASELINE_SAME_AS, CONTRACTS, ISSUES  # noqa: E402
from bench.common import BLS_PIPELINE, ENSEMBLE, STEPS, Scenario  # noqa: E402
from bench.engine import stats_delta  # noqa: E402
from bench.scenarios import bls  # noqa: E402
from bench.server import COMPUTE_KEYS, compute_ns  # noqa: E402


def test_matrix_pairs_each_ensemble_cell_with_the_bls_model_then_the_call_rows() -> None:
    scenarios = bls.scenarios()
    assert len({s.name for s in scenarios}) == len(scenarios)
    pipeline = [s for s in scenarios if not s.child]
    assert [s.model for s in pipeline] == [ENSEMBLE, BLS_PIPELINE] * 4
    cells = {(s.protocol, s.concurrency) for s in pipeline}
    assert cells == {(p, c) for p in ("http", "grpc") for c in (1, 16)}
    calls = [s for s in scenarios if s.child]
    assert {(s.child, s.tensor_bytes) for s in calls} == {
        (child, size) for child in bls.CHILDREN for size in (64, 16 << 20)
    }
    assert all(s.model == bls.PARENT and s.concurrency == 1 for s in calls)
    assert calls[0].name == "bls_calls/grpc/c1/identity_fp32/64B"


def test_the_bls_pipeline_waits_for_and_reads_its_steps_and_the_call_rows_their_child() -> None:
    steps = tuple(s.model for s in STEPS)
    assert Scenario(BLS_PIPELINE, "grpc", 1).models == (BLS_PIPELINE, *steps)
    row = Scenario(bls.PARENT, "grpc", 1, child=bls.PYTHON_CHILD, tensor_bytes=64)
    assert row.models == (bls.PARENT, bls.PYTHON_CHILD)


def test_registered_with_the_ensembles_contract_and_baseline() -> None:
    assert ISSUES["bls"] is bls.ISSUE
    assert CONTRACTS[BLS_PIPELINE] == CONTRACTS[ENSEMBLE]
    assert BASELINE_SAME_AS[BLS_PIPELINE] == ENSEMBLE


def test_a_call_row_asks_for_its_child_calls_and_floats() -> None:
    sc = Scenario(bls.PARENT, "grpc", 1, child=bls.ONNX_CHILD, tensor_bytes=16 << 20)
    arrays = bls.request_arrays(sc)
    assert arrays["CHILD"].tolist() == [bls.ONNX_CHILD.encode()]
    assert arrays["CALLS"].tolist() == [bls.CALLS[16 << 20]]
    assert arrays["FLOATS"].tolist() == [4 << 20] and arrays["FLOATS"].dtype == np.int64


def test_call_figures_are_over_every_call_of_the_window() -> None:
    micros = [np.array([10.0, 20.0]), np.array([30.0, 40.0])]
    figures = bls.call_figures(micros, 2)
    assert figures["child_calls"] == 4 and figures["calls_per_request"] == 2
    assert figures["call_p50_us"] == 25.0 and figures["call_mean_us"] == 25.0
    assert 39.0 < figures["call_p99_us"] <= 40.0
    assert bls.call_figures([], 2) == {"calls_per_request": 2, "child_calls": 0}


def _row(model: str, protocol: str = "grpc", conc: int = 1, **kw: Any) -> dict[str, Any]:
    return {
        "model": model,
        "protocol": protocol,
        "concurrency": conc,
        "name": f"{model}/{protocol}/c{conc}",
        "infer_per_s": 100.0,
        "p50_ms": 2.0,
        "p99_ms": 4.0,
        "server_cpu_us": 300.0,
        "stub_cpu_us": 100.0,
        "client_cpu_us": 50.0,
        "seconds": 5.0,
        "wrong": [],
        "errors": [],
        **kw,
    }


def test_bls_rows_are_divided_by_the_ensemble_row_of_their_cell() -> None:
    rows = [
        _row(ENSEMBLE),
        _row(BLS_PIPELINE, infer_per_s=50.0, server_cpu_us=600.0, stub_cpu_us=400.0),
        _row(BLS_PIPELINE, conc=16),  # no ensemble row in its cell: no ratio
        _row(ENSEMBLE, protocol="http", chained=True),  # a chained row is not the reference
        _row(BLS_PIPELINE, protocol="http"),
    ]
    bls.add_ratios(rows)
    vs = rows[1]["vs_ensemble"]
    assert vs["infer_per_s"] == 0.5 and vs["server_cpu_us"] == 2.0
    assert vs["serving_cpu_us"] == 2.5  # (600 + 400) ÷ (300 + 100)
    assert "vs_ensemble" not in rows[0] and "vs_ensemble" not in rows[2]
    assert "vs_ensemble" not in rows[4]


def test_call_rows_get_cpu_per_call_and_the_overhead_over_the_childs_compute() -> None:
    stats = {bls.ONNX_CHILD: {"compute_total_us": 40.0}}
    row = _row(
        bls.PARENT,
        child=bls.ONNX_CHILD,
        tensor_bytes=64,
        calls_per_request=200,
        call_mean_us=150.0,
        server_cpu_us=20_000.0,
        stub_cpu_us=10_000.0,
        composing_stats=stats,
    )
    bls.add_ratios([row])
    assert row["server_cpu_us_per_call"] == 100.0 and row["stub_cpu_us_per_call"] == 50.0
    assert row["child_compute_us"] == 40.0 and row["overhead_us"] == 110.0
    bare = _row(bls.PARENT, child=bls.ONNX_CHILD, tensor_bytes=64, calls_per_request=2)
    bls.add_ratios([bare])  # no statistics: no compute, no overhead
    assert bare["child_compute_us"] is None and "overhead_us" not in bare


def test_compute_time_per_inference_from_the_statistics() -> None:
    stats = {
        "inference_stats": {
            "compute_input": {"count": 4, "ns": 1000},
            "compute_infer": {"count": 4, "ns": 7000},
            "compute_output": {"count": 4, "ns": 2000},
            "queue": {"count": 4, "ns": 99_999},  # not compute
        }
    }
    assert sum(compute_ns(stats, k) for k in COMPUTE_KEYS) == 10_000
    assert compute_ns({}, "compute_infer") == 0
    start = {"inference_count": 10, "execution_count": 10}
    start.update(dict.fromkeys(COMPUTE_KEYS, 0))
    start["compute_infer"] = 5_000
    end = {"inference_count": 14, "execution_count": 12}
    end.update({"compute_input": 4_000, "compute_infer": 37_000, "compute_output": 4_000})
    delta = stats_delta(start, end)
    assert delta["compute_total_us"] == 10.0  # 40 µs over 4 inferences
    older = {"inference_count": 14, "execution_count": 12}  # a server without them
    assert "compute_total_us" not in stats_delta(start, older)


def test_models_written_into_the_bench_repository(tmp_path: Path) -> None:
    bls.build_models(tmp_path)
    for model in (bls.PARENT, bls.PYTHON_CHILD):
        config = (tmp_path / model / "config.pbtxt").read_text()
        assert f'name: "{model}"' in config and 'backend: "python"' in config
        compile((tmp_path / model / "1" / "model.py").read_text(), model, "exec")
    assert (tmp_path / bls.ONNX_CHILD / "1" / "model.onnx").is_file()


def test_the_report_has_both_tables_and_says_which_cells_it_compared() -> None:
    rows = [_row(ENSEMBLE), _row(BLS_PIPELINE, infer_per_s=80.0)]
    calls = _row(
        bls.PARENT,
        child=bls.PYTHON_CHILD,
        tensor_bytes=16 << 20,
        calls_per_request=2,
        child_calls=20,
        call_p50_us=9000.0,
        call_mean_us=9500.0,
        floor_us=4000.0,
        other_cpu_util=0.5,
    )
    failed = {"model": bls.PARENT, "protocol": "grpc", "concurrency": 1, "errors": ["boom"]}
    all_rows = [*rows, calls, failed]
    bls.add_ratios(all_rows)
    text = "\n".join(bls.table(all_rows))
    assert "| grpc | 1 | BLS | 80 |" in text and "thr BLS ÷ ens" in text
    assert "grpc c1 0.80×" in text
    assert "| Python (2nd stub) | 16 MiB | 2 | 4 | 9,000.0 |" in text
    assert "FAILED: boom" in text and "other processes were busy" in text
