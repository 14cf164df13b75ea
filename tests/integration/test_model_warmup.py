"""Model warm-up (``model_warmup``) end to end, HTTP and gRPC: the samples run ``count`` times
on every instance before the version is READY (a request during warm-up does not see it
ready), with zero, random and file data (BYTES included); warm-up is not in the statistics
nor the metrics; a failing warm-up leaves the model UNAVAILABLE with Triton's reason while
the others serve; ONNX and sequence models warm up too. Models: tests/support/warmup_models.py."""

from __future__ import annotations

import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tests.support.clients import client, make_input
from tests.support.seq_clients import model_stats
from tests.support.sequence_models import SEEN_FIELDS
from testkit.server_process import ServerProcess
from tests.support.warmup_models import (
    FILE_INPUT0,
    FILE_INPUT1,
    WARM_INSTANCES,
    WARM_SAMPLES,
    build_warmup_repository,
    read_log,
)

REASONS = {
    "warm_fails": "failed to run warmup sample 'zero sample': An Error Occurred; ",
    "warm_raises": "failed to run warmup sample 'zero sample': ",
    "warm_short_file": (
        "warmup setting expects 16 bytes, but the data provided from s.binonly has 3 bytes"
    ),
    "warm_escape": "warmup sample 'escape': input_data_file '../config.pbtxt' of input 'INPUT0' "
    "must name a file inside",
    "warm_bad_dtype": "warmup sample 'dtype': input 'INPUT0' data-type is 'INT32', but model "
    "'warm_bad_dtype' expects 'FP32'",
    "warm_linked": "warmup sample 'linked': input_data_file 'l.bin' of input 'INPUT0' must "
    "name a file inside",
}
CLIENT_INPUT0 = np.full((1, 4), 7.0, dtype=np.float32)


@pytest.fixture(scope="module")
def log_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("warmlog") / "executions.jsonl"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, log_path: Path) -> Iterator[ServerProcess]:
    repo = build_warmup_repository(tmp_path_factory.mktemp("warm") / "repo", log_path)
    proc = ServerProcess([repo], "--exit-on-error=false")
    yield proc
    proc.stop()


def _counter_inputs(protocol: str) -> list[Any]:
    strings = np.array([[b"x", b"y"]], dtype=object)
    return [
        make_input(protocol, "INPUT0", CLIENT_INPUT0, "FP32"),
        make_input(protocol, "INPUT1", strings, "BYTES"),
    ]


def _by_instance(entries: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for entry in entries:
        found.setdefault(entry["instance"], []).append(entry)
    return found


def _assert_warmed(entries: list[dict[str, Any]]) -> None:
    """Each instance's first executions are exactly the warm-up samples, with their data."""
    instances = _by_instance(entries)
    assert len(instances) == WARM_INSTANCES, instances.keys()
    for runs in instances.values():
        warm = runs[: len(WARM_SAMPLES)]
        assert [e["n"] for e in warm] == [n for _, n in WARM_SAMPLES], runs
        zeros, random, from_file = warm[:-2], warm[-2], warm[-1]
        for entry in zeros:
            assert entry["in0"] == [[0.0] * 4] * 2 and entry["in1"] == [["", ""]] * 2
        assert random["in1"] == [["", ""]]  # random BYTES: empty strings, as Triton
        assert from_file["in0"] == [FILE_INPUT0.tolist()]
        assert from_file["in1"] == [[v.decode() for v in FILE_INPUT1]]
        assert all(e["in0"] == [CLIENT_INPUT0[0].tolist()] for e in runs[len(WARM_SAMPLES) :])


def test_warmup_ran_count_times_on_every_instance(
    server: ServerProcess, log_path: Path, protocol: str
) -> None:
    c = client(protocol, server.url(protocol))
    try:
        assert c.is_model_ready("warm_counter")
        result = c.infer("warm_counter", _counter_inputs(protocol))
    finally:
        c.close()
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), CLIENT_INPUT0)
    # The instance that answered had run every warm-up execution before this request.
    assert int(result.as_numpy("RUNS")[0, 0]) >= len(WARM_SAMPLES)
    _assert_warmed(read_log(log_path))


@pytest.mark.parametrize("name", sorted(REASONS))
def test_failing_warmup_leaves_the_model_unavailable_with_its_reason(
    server: ServerProcess, protocol: str, name: str
) -> None:
    c = client(protocol, server.url(protocol))
    try:
        rows = (
            c.get_model_repository_index()
            if protocol == "http"
            else c.get_model_repository_index(as_json=True)["models"]
        )
        row = next(r for r in rows if r["name"] == name)
        assert row["state"] == "UNAVAILABLE", row
        assert REASONS[name] in row["reason"], row
        assert c.is_model_ready(name) is False
    finally:
        c.close()
    if name == "warm_raises":
        assert "warm-up boom" in row["reason"]


def test_other_models_serve(server: ServerProcess, protocol: str) -> None:
    c = client(protocol, server.url(protocol))
    try:
        for name in ("warm_counter", "warm_onnx", "warm_seq", "warm_decoupled"):
            assert c.is_model_ready(name), name
        x = np.arange(8, dtype=np.float32).reshape(2, 4)
        result = c.infer("warm_onnx", [make_input(protocol, "INPUT0", x, "FP32")])
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x * 2)
        result = c.infer("warm_counter", _counter_inputs(protocol))
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), CLIENT_INPUT0)
    finally:
        c.close()


def _metric(server: ServerProcess, family: str, model: str) -> float:
    url = f"http://127.0.0.1:{server.ports['metrics']}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    for line in text.splitlines():
        if line.startswith(family + "{") and f'model="{model}"' in line:
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no {family} for {model}")


def test_warmup_is_not_in_statistics_or_metrics(server: ServerProcess, protocol: str) -> None:
    """warm_onnx ran its batch-2 sample twice on each of its instances before READY; the
    statistics and metrics show only client requests (one execution each here)."""
    before = model_stats(protocol, server, "warm_onnx")
    assert before.execution_count == before.success  # no execution without a client request
    c = client(protocol, server.url(protocol))
    try:
        x = np.ones((1, 4), dtype=np.float32)
        c.infer("warm_onnx", [make_input(protocol, "INPUT0", x, "FP32")])
    finally:
        c.close()
    after = model_stats(protocol, server, "warm_onnx")
    assert after.execution_count == after.success == before.success + 1
    assert after.inference_count == before.inference_count + 1
    assert sum(after.batch_sizes.values()) == after.execution_count
    assert _metric(server, "nv_inference_exec_count", "warm_onnx") == after.execution_count
    assert _metric(server, "nv_inference_count", "warm_onnx") == after.inference_count
    assert _metric(server, "nv_inference_request_success", "warm_onnx") == after.success


def test_sequence_model_is_warmed_up(server: ServerProcess, protocol: str) -> None:
    """warm_seq's sample (INPUT0, START and READY controls, count 2) ran on both instances:
    the first client request an instance executes is at least its third execution."""
    c = client(protocol, server.url(protocol))
    try:
        x = np.array([[5]], dtype=np.int32)
        result = c.infer(
            "warm_seq",
            [make_input(protocol, "INPUT0", x, "INT32")],
            sequence_id=4242,
            sequence_start=True,
            sequence_end=True,
        )
    finally:
        c.close()
    seen = dict(zip(SEEN_FIELDS, result.as_numpy("SEEN").reshape(-1).tolist(), strict=True))
    assert seen["start"] == 1 and seen["acc"] == 5
    assert seen["execution"] >= 3, seen


# ------------------------------------------------------------------ READY only after warm-up
@pytest.fixture(scope="module")
def gated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, Path, Path]]:
    """An explicit-mode server whose warm_counter executions wait for a gate file."""
    base = tmp_path_factory.mktemp("gated")
    log, gate = base / "executions.jsonl", base / "gate"
    repo = build_warmup_repository(base / "repo", log, gate)
    proc = ServerProcess([repo], "--model-control-mode=explicit")
    yield proc, log, gate
    proc.stop()


def _wait_for(predicate: Any, what: str, timeout: float = 60.0) -> None:
    event = threading.Event()
    for _ in range(int(timeout / 0.02)):
        if predicate():
            return
        event.wait(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_request_during_warmup_does_not_see_ready(
    gated: tuple[ServerProcess, Path, Path], protocol: str
) -> None:
    server, log, gate = gated
    waiting = Path(f"{log}.waiting")
    for path in (gate, log, waiting):
        path.unlink(missing_ok=True)
    loader = client(protocol, server.url(protocol))
    observer = client(protocol, server.url(protocol))
    errors: list[BaseException] = []

    def load() -> None:
        try:
            loader.load_model("warm_counter")
        except BaseException as exc:  # reported by the test thread
            errors.append(exc)

    thread = threading.Thread(target=load)
    thread.start()
    try:
        _wait_for(lambda: not thread.is_alive() or waiting.exists(), "the warm-up to start")
        assert log.exists() is False  # held by the gate: no execution finished yet
        assert observer.is_model_ready("warm_counter") is False
        with pytest.raises(Exception, match="warm_counter"):
            observer.infer("warm_counter", _counter_inputs(protocol))
    finally:
        gate.touch()
        thread.join(120)
    try:
        assert not errors, errors
        assert observer.is_model_ready("warm_counter") is True
        _assert_warmed(read_log(log))
        observer.unload_model("warm_counter")
    finally:
        loader.close()
        observer.close()
