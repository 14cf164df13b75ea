"""repository/records.py: Triton's strict readiness over the manager's records, and what an
unload does to each version (no models are loaded: records only)."""

from __future__ import annotations

from typing import Any, cast

from tritium.repository.model import Model, ModelState
from tritium.repository.records import (
    UNLOADED,
    ModelRecord,
    VersionRecord,
    strictly_ready,
    unload_versions,
)

SERVING = cast(Model, object())  # a stand-in: the records only hold it


def record(name: str, *versions: VersionRecord) -> ModelRecord:
    found = ModelRecord(name)
    for version in versions:
        found.versions[version.version] = version
    return found


def ready(version: int = 1, model: Any = SERVING) -> VersionRecord:
    return VersionRecord(version, ModelState.READY, "", model)


def failed(version: int = 1, reason: str = "init failed") -> VersionRecord:
    return VersionRecord(version, ModelState.UNAVAILABLE, reason)


def test_ready_versions_are_ready() -> None:
    assert strictly_ready([record("a", ready(1), ready(2)), record("b", ready())])
    assert strictly_ready([])


def test_a_version_unloaded_on_purpose_does_not_count() -> None:
    gone = VersionRecord(1, ModelState.UNAVAILABLE, UNLOADED)
    assert strictly_ready([record("a", ready()), record("b", gone)])


def test_a_failed_version_is_not_ready() -> None:
    assert not strictly_ready([record("a", ready(1), failed(2))])


def test_a_model_that_failed_before_any_version_is_not_ready() -> None:
    broken = ModelRecord("a", ModelState.UNAVAILABLE, "bad config")
    assert not strictly_ready([broken])


def test_a_loading_or_crashed_version_is_not_ready() -> None:
    loading = VersionRecord(1, ModelState.LOADING)
    crashed = VersionRecord(1, ModelState.UNAVAILABLE, "stub died", SERVING)
    assert not strictly_ready([record("a", loading)])
    assert not strictly_ready([record("b", crashed)])


def test_unload_releases_the_serving_versions_and_keeps_failures() -> None:
    crashed = VersionRecord(3, ModelState.UNAVAILABLE, "stub died", SERVING)
    model = record("a", ready(1), failed(2), crashed)
    closing = unload_versions(model)
    assert closing == [SERVING, SERVING]
    states = {v: (e.state, e.reason, e.model) for v, e in model.versions.items()}
    assert states == {
        1: (ModelState.UNAVAILABLE, UNLOADED, None),
        2: (ModelState.UNAVAILABLE, "init failed", None),  # as Triton's AsyncUnload
        3: (ModelState.UNAVAILABLE, UNLOADED, None),
    }
    assert model.ready == {} and model.latest is None
    assert not strictly_ready([model])  # the failure still counts
