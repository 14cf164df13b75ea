"""``tritium_model_ready``: rendered from the repository index rows, one 1/0 gauge per model
version the server is meant to serve (the alert rule "a model not ready" reads it)."""

from __future__ import annotations

from tritium.metrics.render import render


def _ready_lines(index: list[dict[str, str]]) -> list[str]:
    text = render([], None, index=index).decode()
    return [line for line in text.splitlines() if line.startswith("tritium_model_ready")]


def test_ready_and_failed_versions_are_one_and_zero() -> None:
    index = [
        {"name": "a", "version": "1", "state": "READY"},
        {"name": "a", "version": "2", "state": "UNAVAILABLE", "reason": "boom"},
        {"name": "b", "state": "UNAVAILABLE", "reason": "bad config"},
        {"name": "c", "version": "1", "state": "LOADING"},
    ]
    assert _ready_lines(index) == [
        'tritium_model_ready{model="a",version="1"} 1',
        'tritium_model_ready{model="a",version="2"} 0',
        'tritium_model_ready{model="b",version=""} 0',
        'tritium_model_ready{model="c",version="1"} 0',
    ]


def test_never_loaded_and_unloaded_models_are_left_out() -> None:
    index = [
        {"name": "on_disk_only"},
        {"name": "gone", "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"},
    ]
    assert _ready_lines(index) == []
    assert b"tritium_model_ready" not in render([], None, index=index)


def test_label_values_are_escaped() -> None:
    index = [{"name": 'we"ird\\name', "state": "UNAVAILABLE", "reason": "x"}]
    assert _ready_lines(index) == ['tritium_model_ready{model="we\\"ird\\\\name",version=""} 0']
