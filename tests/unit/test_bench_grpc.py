"""The ``grpc`` bench list (issue 12, bench/scenarios/transport.py): its matrix, the ratios
between servers, the PASS/FAIL lines of the issue's targets (HTTP against the recorded
foundation result), its repository variants, and the runner starting each server for its
first scenario and stopping it after its last."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))  # the package ``bench``

from bench import runner  # noqa: E402
from bench.cli import used_info  # noqa: E402
from bench.common import Scenario, Settings, Target  # noqa: E402
from bench.scenarios import transport  # noqa: E402
from bench.scenarios.transport import FLOOR, H2  # noqa: E402


def row(model: str, protocol: str, conc: int, target: str, **values: Any) -> dict[str, Any]:
    base = {"infer_per_s": 1000.0, "p50_ms": 1.0, "server_cpu_us": 200.0, "other_cpu_util": 0.0}
    return {
        "model": model,
        "protocol": protocol,
        "concurrency": conc,
        "target": target,
        "name": f"{model}/{protocol}/c{conc}@{target}",
        **base,
        **values,
    }


def test_matrix_covers_every_server_and_mode() -> None:
    scenarios = transport.transport_scenarios()
    names = [s.name for s in scenarios]
    assert len(names) == len(set(names))
    models = {"simple", "simple_dynbatch", "add_sub_python", "add_sub_python_dynbatch"}
    for model in models:
        for protocol, conc in transport.GRPC_MODES:
            assert Scenario(model, protocol, conc, target=H2) in scenarios
        for protocol, conc in transport.HTTP_MODES:
            assert Scenario(model, protocol, conc, target=H2) in scenarios
    floor = [s for s in scenarios if s.target == FLOOR]
    assert {s.model for s in floor} == {"simple"}  # it answers the simple contract only
    assert {(s.protocol, s.concurrency) for s in floor} == set(transport.GRPC_MODES)
    large = [s for s in scenarios if s.model == transport.IDENTITY_MODEL]
    assert {(s.protocol, s.target) for s in large} == {("grpc", H2), ("http", H2)}
    assert {s.target for s in scenarios} == {H2, FLOOR}  # never the run's own server


def test_h2_rows_are_compared_with_floor_and_http() -> None:
    rows = [
        row("add_sub_python", "grpc", 16, H2, infer_per_s=3000.0, server_cpu_us=150.0),
        row("simple", "grpc", 16, FLOOR, infer_per_s=2000.0, server_cpu_us=300.0),
        row("add_sub_python", "http", 16, H2, infer_per_s=6000.0),
        row("add_sub_python", "grpc-stream", 16, H2),  # only HTTP at c16 to compare with
        {"model": "simple", "protocol": "grpc", "concurrency": 1, "target": H2, "errors": ["x"]},
    ]
    transport.compare(rows)
    vs = rows[0]["vs"]
    assert set(vs) == {"floor", "http"}
    assert vs["floor"]["infer_per_s"] == pytest.approx(1.5)
    assert vs["floor"]["server_cpu_us"] == pytest.approx(0.5)
    assert vs["http"]["infer_per_s"] == pytest.approx(0.5)
    assert set(rows[3]["vs"]) == {"http"}
    assert all("vs" not in r for r in rows[1:3] + rows[4:])  # only measured h2 gRPC rows


def goal_rows(
    h2_c16: float, floor_c16: float, streams: float, p50_c1: float, http_c16: float = 7000.0
) -> list[dict]:
    return [
        row("simple", "grpc", 16, H2, infer_per_s=h2_c16, server_cpu_us=140.0),
        row("simple", "grpc", 16, FLOOR, infer_per_s=floor_c16),
        row("simple", "grpc", 1, H2, p50_ms=p50_c1),
        row("simple", "grpc-streams", 16, H2, infer_per_s=streams),
        row("simple", "http", 16, H2, infer_per_s=http_c16),
    ]


def foundation(path: Path, infer_per_s: float) -> Path:
    """A foundation result as bench/run.py writes it: binary HTTP ``simple`` c16 at
    ``infer_per_s``, among rows the HTTP target must not read."""
    scenarios = [
        row("simple", "http", 1, "", infer_per_s=1.0),
        row("simple", "http-json", 16, "", infer_per_s=2.0),
        row("add_sub_python", "http", 16, "", infer_per_s=3.0),
        row("simple", "http", 16, "", infer_per_s=infer_per_s),
    ]
    path.write_text(json.dumps({"issue": "foundation", "scenarios": scenarios}))
    return path


def goals(rows: list[dict]) -> list[str]:
    lines = [line for line in transport.goal_lines(rows) if line.startswith("- ")]
    assert len(lines) == len(transport.GOALS)
    return lines


def test_goal_lines_say_pass_and_fail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transport, "FOUNDATION", foundation(tmp_path / "f.json", 7000.0))
    floor, cpu, p50, streams, http = goals(goal_rows(7600.0, 4000.0, 9000.0, 0.44, 6650.0))
    assert "1.90× → **PASS**" in floor
    assert "140 µs → **PASS**" in cpu
    assert "0.440 ms → **PASS**" in p50
    assert "9,000/s → **FAIL**" in streams
    assert "0.95× → **PASS**" in http and "foundation.json" in http
    floor, _, p50, streams, http = goals(goal_rows(7000.0, 4000.0, 12000.0, 0.5, 6000.0))
    assert "1.75× → **FAIL**" in floor and "0.500 ms → **FAIL**" in p50
    assert "12,000/s → **PASS**" in streams
    assert "0.86× → **FAIL**" in http  # HTTP slower than recorded, beyond the noise


def test_http_target_is_na_without_a_recorded_foundation_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(transport, "FOUNDATION", tmp_path / "absent.json")
    http = goals(goal_rows(7600.0, 4000.0, 12000.0, 0.4))[-1]
    assert "n/a" in http and "none recorded" in http
    no_row = tmp_path / "f.json"
    no_row.write_text(json.dumps({"scenarios": [row("simple", "grpc", 16, "")]}))
    assert transport.recorded_http(no_row) is None
    (tmp_path / "bad.json").write_text("{")
    assert transport.recorded_http(tmp_path / "bad.json") is None
    assert transport.recorded_http(foundation(tmp_path / "g.json", 5000.0)) == 5000.0


def test_goal_lines_without_a_row_and_on_a_busy_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(transport, "FOUNDATION", foundation(tmp_path / "f.json", 7000.0))
    rows = goal_rows(7600.0, 4000.0, 12000.0, 0.4)
    rows[1] = {**rows[1], "errors": ["boom"]}
    del rows[1]["infer_per_s"]  # the floor row failed
    rows[0]["other_cpu_util"] = 0.5
    lines = transport.goal_lines(rows)
    assert "n/a" in lines[3] and "PASS" not in lines[3] and "FAIL" not in lines[3]
    assert any("1 of 4 rows" in line and "0.50" in line for line in lines)


def test_table_splits_the_16_mib_rows() -> None:
    rows = [
        row("simple", "grpc", 16, H2, p99_ms=2.0, stub_cpu_us=0.0, client_cpu_us=100.0, wrong=[]),
        row(
            transport.IDENTITY_MODEL,
            "grpc",
            1,
            H2,
            p99_ms=90.0,
            mb_per_s=400.0,
            client_cpu_us=5e4,
            server_cpu_us=6e4,
            wrong=[],
        ),
    ]
    text = "\n".join(transport.table(rows))
    assert text.count("| simple | grpc | 16 | h2 |") == 1
    assert "16 MiB tensors" in text
    assert f"| {transport.IDENTITY_MODEL} | grpc | 1 | h2 | 1,000.0 | 400 |" in text


def test_build_models_adds_dynamic_batching_variants(tmp_path: Path) -> None:
    for model in transport.MODELS:
        shutil.copytree(ROOT / "examples" / "model_repository" / model, tmp_path / model)
    transport.build_models(tmp_path)
    for model in transport.MODELS:
        config = (tmp_path / f"{model}_dynbatch" / "config.pbtxt").read_text()
        assert f'name: "{model}_dynbatch"' in config and f'name: "{model}"' not in config
        assert config.rstrip().endswith("dynamic_batching { }")
        assert "dynamic_batching" not in (tmp_path / model / "config.pbtxt").read_text()
    assert (tmp_path / "add_sub_python_dynbatch" / "1" / "model.py").exists()
    assert (tmp_path / transport.IDENTITY_MODEL / "1" / "model.onnx").exists()


class FakeServer:
    """Stands for a server in the runner's bookkeeping (no process, no protocol)."""

    statistics = False

    def __init__(self, name: str, log: list[str]) -> None:
        self.name, self.log, self.alive = name, log, True
        log.append(f"start {name}")

    pid = 0

    def wait_ready(self, models: list[str]) -> None:
        self.log.append(f"ready {self.name} {','.join(models)}")

    def healthy(self) -> bool:
        return self.alive

    def log_tail(self) -> str:
        return f"tail of {self.name}"

    def stop(self) -> None:
        self.log.append(f"stop {self.name}")


def test_runner_starts_each_server_for_its_first_scenario_and_stops_it_after_its_last(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log: list[str] = []

    def refuse(*args: Any) -> Any:
        raise RuntimeError("no transport")

    monkeypatch.setitem(runner.TARGETS, "a", Target(lambda *a: FakeServer("a", log), "A"))
    monkeypatch.setitem(runner.TARGETS, "b", Target(lambda *a: FakeServer("b", log), "B"))
    monkeypatch.setitem(runner.TARGETS, "c", Target(refuse, "C"))
    monkeypatch.setattr(runner, "idle_cpu", lambda server, seconds: {"server_cpu_util": 0.0})

    def run_scenario(sc: Scenario, server: Any, settings: Settings, baselines: Any) -> dict:
        log.append(f"run {sc.name}")
        return {"name": sc.name, "errors": [], "wrong": []}

    monkeypatch.setattr(runner, "run_scenario", run_scenario)
    scenarios = [
        Scenario("simple", "grpc", 1, target="a"),
        Scenario("add_sub_python", "grpc", 1, target="b"),
        Scenario("simple", "grpc", 16, target="c"),
        Scenario("simple", "grpc", 16, target="a"),
        Scenario("simple", "grpc", 16, target="b"),
    ]
    info: dict[str, Any] = {"baselines": {}}
    rows = runner.run_scenarios(tmp_path, tmp_path, scenarios, Settings(quick=True), info)
    assert log == [
        "start a",
        "ready a simple",
        "run simple/grpc/c1@a",
        "start b",
        "ready b add_sub_python,simple",
        "run add_sub_python/grpc/c1@b",
        "run simple/grpc/c16@a",
        "stop a",
        "run simple/grpc/c16@b",
        "stop b",
    ]
    assert [r["name"] for r in rows] == [s.name for s in scenarios]
    assert "did not start: no transport" in rows[2]["errors"][0]
    assert set(info["targets"]) == {"a", "b"} and info["targets"]["a"]["what"] == "A"


def test_a_report_keeps_the_info_of_its_own_servers() -> None:
    info = {
        "server_args": [],
        "baselines": {"simple": {"calls_per_s": 1.0}, "mlp": {"calls_per_s": 2.0}},
        "server_idle": {"server_cpu_util": 0.0},
        "targets": {H2: {"what": "h2"}, FLOOR: {"what": "floor"}},
    }
    grpc = used_info(info, [row("simple", "grpc", 1, H2)])
    assert grpc == {
        "server_args": [],
        "baselines": {"simple": {"calls_per_s": 1.0}},
        "targets": {H2: {"what": "h2"}},
    }
    foundation = used_info(info, [row("mlp", "grpc", 1, "")])
    assert foundation["server_idle"] == info["server_idle"] and "targets" not in foundation
