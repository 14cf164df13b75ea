"""Which model a bare name means under --model-namespacing (repository/namespaces.py)."""

from __future__ import annotations

import pytest

from tritium.errors import ErrorKind, ServerError
from tritium.repository.model import ModelState
from tritium.repository.layout import ModelId
from tritium.repository.namespaces import NameIndex, composing_id
from tritium.repository.records import ModelRecord, VersionRecord


def _record(namespace: str, name: str) -> ModelRecord:
    return ModelRecord(name, namespace=namespace)


def test_a_name_in_one_namespace_resolves() -> None:
    index = NameIndex(True)
    index.store(_record("/a", "x"))
    index.store(_record("/a", "y"))
    found = index.find("x")
    assert found is not None and found.key == ModelId("/a", "x")
    assert index.find("z") is None


def test_a_name_in_two_namespaces_is_ambiguous_with_tritons_text() -> None:
    index = NameIndex(True)
    index.store(_record("/a", "x"))
    index.store(_record("/b", "x"))
    with pytest.raises(ServerError) as caught:
        index.find("x")
    assert caught.value.kind is ErrorKind.INVALID_ARG
    assert caught.value.message == (
        "There are 2 identifiers of model 'x' in global map, model namespace must be "
        "provided to resolve ambiguity."
    )
    near = index.find("x", near="/b")  # an ensemble of /b asks
    assert near is not None and near.namespace == "/b"


def test_a_reload_replaces_its_own_record_only() -> None:
    index = NameIndex(True)
    index.store(_record("/a", "x"))
    index.store(_record("/b", "x"))
    newer = _record("/a", "x")
    index.store(newer)
    assert index.find("x", near="/a") is newer
    with pytest.raises(ServerError):
        index.find("x")


def test_a_copy_unloaded_everywhere_else_leaves_no_ambiguity() -> None:
    index = NameIndex(True)
    gone = _record("/a", "x")
    gone.versions[1] = VersionRecord(1, ModelState.UNAVAILABLE, "unloaded")
    index.store(gone)
    index.store(_record("/b", "x"))
    found = index.find("x")
    assert found is not None and found.namespace == "/b"


def test_keys_of_a_name() -> None:
    known = [ModelId("/a", "x"), ModelId("/b", "x"), ModelId("/a", "y")]
    assert NameIndex(True).keys("x", known) == [ModelId("/a", "x"), ModelId("/b", "x")]
    assert NameIndex(False).keys("x", known) == [ModelId("", "x")]


def test_an_ensemble_step_prefers_its_own_namespace() -> None:
    known = [ModelId("/a", "x"), ModelId("/b", "x"), ModelId("/b", "only_b")]
    assert composing_id("/a", "x", known, True) == ModelId("/a", "x")
    assert composing_id("/a", "only_b", known, True) == ModelId("/b", "only_b")
    assert composing_id("/c", "x", known, True) == ModelId("/c", "x")  # ambiguous: missing
    assert composing_id("", "x", known, False) == ModelId("", "x")
