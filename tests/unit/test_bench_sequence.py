"""The ``sequence`` bench list (issue 13, bench/scenarios/sequence.py): its matrix, what a lane
sends and expects, the variant configs and model files it writes into the bench's repository,
the ratios to the stateless rows, and the executed-rows average from ``batch_stats``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))  # the package ``bench``

from bench.engine import stats_delta  # noqa: E402
from bench.scenarios import sequence, sequence_models  # noqa: E402
from bench.scenarios.sequence_models import (  # noqa: E402
    RUNNING_SUM,
    SIMPLE,
    VARIANTS,
    Variant,
    split_name,
)
from bench.server import batch_rows  # noqa: E402


def test_matrix_is_both_models_under_every_variant() -> None:
    scenarios = sequence.sequence_scenarios()
    assert len({s.name for s in scenarios}) == len(scenarios) == 2 * len(VARIANTS)
    assert {split_name(s.model) for s in scenarios} == {
        (base, v) for base in (SIMPLE, RUNNING_SUM) for v in VARIANTS
    }
    for sc in scenarios:
        assert (sc.concurrency, sc.steps, sc.protocol) == (64, 50, "grpc-streams")
        assert sc.target == sequence.TARGET and sc.name.endswith("/c64/s50@seq")


def test_split_name() -> None:
    assert split_name("running_sum_onnx_direct64") == ("running_sum_onnx", "direct64")
    assert split_name("simple_sequence_stateless") == ("simple_sequence", "stateless")
    assert split_name("simple_sequence") == ("simple_sequence", "")
    assert split_name("simple") == ("simple", "")


def test_step_flags_start_end_and_early_end() -> None:
    flags = [sequence.step_flags(step, 50, False) for step in range(50)]
    assert flags[0] == (True, False) and flags[49] == (False, True)
    assert all(f == (False, False) for f in flags[1:49])
    assert sequence.step_flags(7, 50, True) == (False, True)  # a closing lane ends it early


def test_sequence_ids_are_unique_and_never_zero() -> None:
    ids = {sequence.sequence_id(lane, n) for lane in range(64) for n in range(5000)}
    assert len(ids) == 64 * 5000 and 0 not in ids


def test_simple_sequence_contract() -> None:
    contract = sequence.CONTRACTS[SIMPLE]
    first, later = contract.inputs(3, 0, False), contract.inputs(3, 1, False)
    assert set(first) == {"INPUT"} and first["INPUT"].dtype == np.int32
    assert first["INPUT"].shape == (1, 1)
    assert contract.expected(3, 0)[0, 0] == first["INPUT"][0, 0] + 1  # START adds 1
    assert contract.expected(3, 1)[0, 0] == later["INPUT"][0, 0]
    stateless = [contract.inputs(3, step, True) for step in (0, 1)]
    assert [int(s["START"][0, 0]) for s in stateless] == [1, 0]
    assert [int(s["READY"][0, 0]) for s in stateless] == [1, 1]
    assert contract.client_state is None


def test_running_sum_contract_is_the_sum_so_far() -> None:
    contract = sequence.CONTRACTS[RUNNING_SUM]
    steps = [contract.inputs(5, step, False)["INPUT"] for step in range(50)]
    assert steps[0].shape == (1, 4) and steps[0].dtype == np.float32
    assert np.array_equal(contract.expected(5, 0), steps[0])
    assert np.array_equal(contract.expected(5, 49), np.sum(steps, axis=0))
    assert contract.client_state == ("INPUT_STATE", "OUTPUT_STATE")


def parse(text: str) -> Any:
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    return text_format.Parse(text, model_config_pb2.ModelConfig())


@pytest.mark.parametrize("strategy", VARIANTS)
def test_simple_sequence_configs(strategy: str) -> None:
    config = parse(sequence_models.simple_config(Variant(SIMPLE, strategy)))
    assert config.name == f"simple_sequence_{strategy}" and config.max_batch_size == 8
    assert config.instance_group[0].count == (8 if strategy == "direct64" else 1)
    inputs = [i.name for i in config.input]
    if strategy == "stateless":
        assert not config.HasField("sequence_batching") and config.HasField("dynamic_batching")
        assert inputs == ["INPUT", "START", "READY"]
        return
    seq = config.sequence_batching
    assert inputs == ["INPUT"] and not config.HasField("dynamic_batching")
    assert [c.name for c in seq.control_input] == ["START", "READY"]
    assert seq.WhichOneof("strategy_choice") == ("oldest" if strategy == "oldest" else "direct")
    if strategy == "oldest":
        assert seq.oldest.max_candidate_sequences == 64
        assert seq.oldest.max_queue_delay_microseconds == 0


@pytest.mark.parametrize("strategy", VARIANTS)
def test_running_sum_configs(strategy: str) -> None:
    config = parse(sequence_models.running_sum_config(Variant(RUNNING_SUM, strategy)))
    assert config.platform == "onnxruntime_onnx" and config.max_batch_size == 8
    names = ([i.name for i in config.input], [o.name for o in config.output])
    if strategy == "stateless":
        assert names == (["INPUT", "INPUT_STATE"], ["OUTPUT", "OUTPUT_STATE"])
        assert not config.HasField("sequence_batching")
        return
    assert names == (["INPUT"], ["OUTPUT"])
    (state,) = config.sequence_batching.state
    assert (state.input_name, state.output_name) == ("INPUT_STATE", "OUTPUT_STATE")
    assert state.initial_state[0].zero_data and list(state.dims) == [4]


def test_build_models_writes_every_variant_with_the_fallback_files(tmp_path: Path) -> None:
    import onnxruntime as ort

    repo = tmp_path / "models"
    repo.mkdir()
    sequence_models.build_models(repo)
    for base in (SIMPLE, RUNNING_SUM):
        assert "bench's own" in sequence_models.SOURCES[base]
        for strategy in VARIANTS:
            model = repo / f"{base}_{strategy}"
            assert parse((model / "config.pbtxt").read_text()).name == model.name
    session = ort.InferenceSession(str(repo / "running_sum_onnx_oldest" / "1" / "model.onnx"))
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    out, state = session.run(["OUTPUT", "OUTPUT_STATE"], {"INPUT": x, "INPUT_STATE": x})
    assert np.array_equal(out, 2 * x) and np.array_equal(state, 2 * x)
    assert not (repo / SIMPLE).exists()  # the bench never pretends to be the example


def test_build_models_uses_the_example_files_when_present(tmp_path: Path) -> None:
    repo = tmp_path / "models"
    (repo / SIMPLE / "1").mkdir(parents=True)
    (repo / SIMPLE / "1" / "model.py").write_text("# the example's\n")
    sequence_models.build_models(repo)
    assert sequence_models.SOURCES[SIMPLE] == "examples/model_repository/simple_sequence/1/model.py"
    for strategy in VARIANTS:
        copied = repo / f"{SIMPLE}_{strategy}" / "1" / "model.py"
        assert copied.read_text() == "# the example's\n"


def test_fallback_model_py_answers_the_contract(tmp_path: Path) -> None:
    from bench.baselines import load_python_model

    model_dir = tmp_path / "simple_sequence_stateless"
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "1" / "model.py").write_text(sequence_models.FALLBACK_MODEL_PY)
    (model_dir / "config.pbtxt").write_text(
        sequence_models.simple_config(Variant(SIMPLE, "stateless"))
    )
    model, pb = load_python_model(model_dir)
    contract = sequence.CONTRACTS[SIMPLE]
    for step in (0, 1, 2):
        arrays = contract.inputs(9, step, True)
        request = pb.InferenceRequest(
            inputs=[pb.Tensor(name, a) for name, a in arrays.items()],
            requested_output_names=["OUTPUT"],
            model_name=model_dir.name,
        )
        (response,) = model.execute([request])
        got = pb.get_output_tensor_by_name(response, "OUTPUT").as_numpy()
        assert np.array_equal(got, contract.expected(9, step))


def measured(model: str, steps: float, cpu: float, stub: float = 0.0) -> dict[str, Any]:
    return {
        "model": model,
        "infer_per_s": steps,
        "p50_ms": 2.0,
        "server_cpu_us": cpu,
        "stub_cpu_us": stub,
    }


def test_rows_are_compared_with_the_stateless_row_of_their_model() -> None:
    rows = [
        measured("simple_sequence_direct", 1000.0, 300.0, 100.0),
        measured("simple_sequence_stateless", 2000.0, 150.0, 50.0),
        measured("running_sum_onnx_oldest", 3000.0, 200.0),
        {"model": "running_sum_onnx_stateless", "errors": ["failed"]},
    ]
    sequence.compare(rows)
    assert rows[0]["vs_stateless"] == {"steps_per_s": 0.5, "p50_ms": 1.0, "cpu_us": 2.0}
    assert "vs_stateless" not in rows[1]  # the reference itself
    assert "vs_stateless" not in rows[2]  # its stateless row failed


def test_executed_rows_count_fillers() -> None:
    stats = {
        "batch_stats": [
            {"batch_size": 8, "compute_infer": {"count": 3, "ns": 1}},
            {"batch_size": 2, "compute_infer": {"count": 5, "ns": 1}},
        ]
    }
    assert batch_rows(stats) == 34 and batch_rows({}) == 0
    start = {"inference_count": 10, "execution_count": 4, "batch_rows": 20}
    end = {"inference_count": 40, "execution_count": 14, "batch_rows": 70}
    delta = stats_delta(start, end)
    assert delta["avg_batch"] == 3.0 and delta["avg_exec_batch"] == 5.0
    old = {"inference_count": 10, "execution_count": 4}  # a server without batch_stats
    assert "avg_exec_batch" not in stats_delta(old, {"inference_count": 40, "execution_count": 14})
