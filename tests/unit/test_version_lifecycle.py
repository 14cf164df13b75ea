"""repository/lifecycle.py: a version's transitions (no backend runs: records only)."""

from __future__ import annotations

from pathlib import Path
from typing import cast

from tritium.config.model_config import ConfigProblem, ModelConfig
from tritium.config.spec import ModelSpec
from tritium.repository.layout import ModelId
from tritium.repository.lifecycle import Hooks, Source, VersionLoad, unloading
from tritium.repository.model import Model, ModelState, VersionSettings
from tritium.repository.records import UNLOADED, ModelRecord, VersionRecord, unload_versions

SERVING = cast(Model, object())  # a stand-in: the records only hold it


def _no_spec(owner: ModelId, name: str, version: int) -> ModelSpec:
    raise AssertionError("no ensemble here")


def _load(changes: list[str]) -> VersionLoad:
    record = ModelRecord("m")
    entry = record.versions[1] = VersionRecord(1)
    hooks = Hooks(VersionSettings(), False, 0, lambda: changes.append("changed"), _no_spec)
    source = Source(ModelConfig(), ConfigProblem("m", None, ""), Path("/nowhere/m"))
    return VersionLoad(record, entry, source, hooks)


def test_a_version_serves_fails_and_recovers() -> None:
    changes: list[str] = []
    load = _load(changes)
    assert load.entry.state is ModelState.LOADING
    load.ready(SERVING)
    assert load.record.latest is SERVING and load.entry.state is ModelState.READY
    load.instance_failed("stub died")
    assert load.entry.state is ModelState.UNAVAILABLE and load.entry.reason == "stub died"
    assert load.record.latest is None and changes == ["changed"]
    load.recovered()
    assert load.entry.state is ModelState.READY and load.entry.reason == ""
    assert load.record.latest is SERVING and changes == ["changed", "changed"]


def test_a_version_unloaded_meanwhile_stays_unloaded() -> None:
    changes: list[str] = []
    load = _load(changes)
    load.ready(SERVING)
    assert unload_versions(load.record) == [SERVING]
    load.recovered()  # a stub restarted while the version was being unloaded
    assert load.entry.state is ModelState.UNAVAILABLE and load.entry.reason == UNLOADED
    assert changes == []


def test_a_failed_load_and_a_shutdown() -> None:
    load = _load([])
    load.failed("init failed")
    assert load.entry.state is ModelState.UNAVAILABLE and load.entry.model is None
    other = _load([])
    other.ready(SERVING)
    unloading(other.record)
    assert other.entry.state is ModelState.UNLOADING and other.record.latest is None


def test_the_backend_gets_a_fresh_config_and_the_callbacks() -> None:
    load = _load([])
    first, second = load.context(), load.context()
    assert first.config is not second.config and first.config == load.source.config
    assert first.version_dir == Path("/nowhere/m/1") and first.on_failure == load.instance_failed
    update = load.context_for(ModelConfig(name="m"))
    assert update.config.name == "m" and not update.confined
