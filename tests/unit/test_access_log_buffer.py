"""The access log's logic: an entry's fields from a request's timestamps, the buffer that drops
(and counts) rather than blocks, batches written by the writer, rotation at the bound."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
from tritium.logs.access_log import AccessEntry, AccessLog
from tritium.request import InferenceRequest
from tritium.types import ClientRequest, DataType, Tensor


def _request(model: str = "m", version: int = 3) -> InferenceRequest:
    data = np.array([4242.125], dtype=np.float32)
    client = ClientRequest(model, version, "req-7", (Tensor("INPUT0", DataType.FP32, (1,), data),))
    request = InferenceRequest(client)
    request.model_version = version
    request.arrival_ns = 1_000_000
    request.start_ns = 1_250_000  # 250 µs queued
    request.timing = (10_000, 300_000, 20_000)  # 330 µs computing
    return request


def _entry(model: str = "m", protocol: str = "http") -> AccessEntry:
    entry = AccessEntry.begin(protocol, "127.0.0.1:5000", 64, "reader", "infer-key")
    entry.request = _request(model)
    entry.outcome("SUCCESS", 200)
    entry.bytes_out = 32
    entry.ended()
    return entry


def _lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_an_entry_takes_the_requests_times_and_nothing_of_its_tensors() -> None:
    doc = _entry().as_doc()
    assert set(doc) == {
        "time",
        "protocol",
        "stream",
        "peer",
        "identity",
        "api_key",
        "model",
        "version",
        "request_id",
        "status",
        "code",
        "queue_us",
        "compute_us",
        "duration_us",
        "bytes_in",
        "bytes_out",
    }
    assert doc["queue_us"] == 250 and doc["compute_us"] == 330
    assert (doc["model"], doc["version"], doc["request_id"]) == ("m", "3", "req-7")
    assert (doc["identity"], doc["api_key"], doc["status"], doc["code"]) == (
        "reader",
        "infer-key",
        "SUCCESS",
        200,
    )
    assert str(doc["time"]).endswith("Z") and isinstance(doc["duration_us"], int)
    assert "4242" not in json.dumps(doc)


def test_a_request_that_never_ran_has_no_times() -> None:
    entry = AccessEntry.begin("grpc", "127.0.0.1:1", 10)
    entry.model = "x" * 2000  # a client-chosen name is cut
    entry.outcome("NOT_FOUND", 5)
    entry.ended()
    doc = entry.as_doc()
    assert doc["queue_us"] is None and doc["compute_us"] is None
    assert len(str(doc["model"])) == 512 and doc["status"] == "NOT_FOUND"


def test_lines_are_written_in_batches_by_drain(tmp_path: Path) -> None:
    path = tmp_path / "access.jsonl"
    access = AccessLog(path, start=False)
    for _ in range(3):
        access.put(_entry())
    assert path.read_text() == ""  # put writes nothing itself
    access.drain()
    assert [line["model"] for line in _lines(path)] == ["m", "m", "m"]
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    access.close()


def test_a_full_buffer_drops_and_counts(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "access.jsonl"
    access = AccessLog(path, buffer_lines=2, start=False)
    for _ in range(5):
        access.put(_entry())
    assert access.dropped == 3
    with caplog.at_level(logging.WARNING, logger="tritium"):
        access.drain()
    assert len(_lines(path)) == 2
    assert "3 lines dropped" in caplog.text
    access.close()
    access.put(_entry())  # after close: dropped too, never written
    assert access.dropped == 4 and len(_lines(path)) == 2


def test_rotation_at_the_bound_keeps_the_backups(tmp_path: Path) -> None:
    path = tmp_path / "access.jsonl"
    size = len(json.dumps(_entry().as_doc(), separators=(",", ":"))) + 1
    bound = size * 3 + size // 2  # three lines a file
    access = AccessLog(path, max_bytes=bound, backups=2, start=False)
    for index in range(20):
        access.put(_entry(f"m{index:02d}"))
        if index % 4 == 0:
            access.drain()  # rotation happens inside a batch too
    access.close()
    files = sorted(tmp_path.iterdir())
    assert [f.name for f in files] == ["access.jsonl", "access.jsonl.1", "access.jsonl.2"]
    assert all(0 < f.stat().st_size <= bound for f in files)
    kept = [line["model"] for f in reversed(files) for line in _lines(f)]
    assert kept == [f"m{index:02d}" for index in range(20)][-len(kept) :]  # newest last
    assert len(kept) >= 7  # the current file and two full backups


def test_no_backups_means_the_file_starts_over(tmp_path: Path) -> None:
    path = tmp_path / "access.jsonl"
    size = len(json.dumps(_entry().as_doc(), separators=(",", ":"))) + 1
    access = AccessLog(path, max_bytes=size * 2, backups=0, start=False)
    for index in range(5):
        access.put(_entry(f"m{index}"))
    access.close()
    assert [f.name for f in tmp_path.iterdir()] == ["access.jsonl"]
    kept = [line["model"] for line in _lines(path)]
    assert kept in (["m4"], ["m3", "m4"]) and path.stat().st_size <= size * 2


def test_the_writer_thread_writes_and_close_flushes(tmp_path: Path) -> None:
    path = tmp_path / "access.jsonl"
    access = AccessLog(path)
    for _ in range(10):
        access.put(_entry())
    access.close()  # whatever the thread had not written yet is written now
    assert len(_lines(path)) == 10


def test_an_unopenable_file_is_an_error_at_start(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        AccessLog(tmp_path / "missing" / "access.jsonl", start=False)
