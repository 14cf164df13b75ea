"""``dynamic_batching`` refused at load as Triton core's ValidateModelConfig refuses it
(config/dynamic_batching.py), with Triton's messages; configs Triton accepts still build."""

from __future__ import annotations

from pathlib import Path

import pytest

from tritium.config.model_config import ConfigProblem, parse_config_text
from tritium.config.spec import build_spec, normalize
from tritium.errors import ErrorKind, ServerError

PATH = Path("/models/m/config.pbtxt")
DELAY = "default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 100 }"
REJECT = "default_queue_policy { timeout_action: REJECT default_timeout_microseconds: 100 }"
LEVEL_3_POLICY = "priority_queue_policy { key: 3 value: { } }"
TOO_BIG = "dynamic batching preferred size must be <= max batch size for m"
ORDERING_DELAY = (
    "Queue policy can not have DELAY as timeout action when 'preserve_ordering' is true for m"
)
BASE = """
name: "m"
backend: "python"
max_batch_size: 8
input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""


def build(batching: str) -> None:
    text = BASE + f"dynamic_batching {{ {batching} }}\n"
    config = parse_config_text(text, PATH)
    problem = ConfigProblem("m", PATH, text)
    normalize(config, "m", problem)
    build_spec(config, problem)


@pytest.mark.parametrize(
    ("batching", "message"),
    [
        (
            "preferred_batch_size: [ 4, 16 ]",
            "dynamic batching preferred size must be <= max batch size for m",
        ),
        ("preferred_batch_size: [ 0 ]", "dynamic batching preferred size must be positive for m"),
        ("priority_levels: 2", "default priority level must be in range [1, 2] for m"),
        (
            "priority_levels: 2 default_priority_level: 3",
            "default priority level must be in range [1, 2] for m",
        ),
        (
            f"priority_levels: 2 default_priority_level: 1 {LEVEL_3_POLICY}",
            "priority queue policy must have priority level in range [1, 2] for m",
        ),
        (
            "priority_levels: 2 default_priority_level: 1 preserve_ordering: true",
            "Only one priority level is allowed when 'preserve_ordering' is true for m",
        ),
        (f"preserve_ordering: true {DELAY}", ORDERING_DELAY),
    ],
)
def test_triton_refuses_it(batching: str, message: str) -> None:
    with pytest.raises(ServerError) as info:
        build(batching)
    assert info.value.kind is ErrorKind.INVALID_ARG
    assert message in str(info.value)


@pytest.mark.parametrize(
    "batching",
    [
        "",
        "preferred_batch_size: [ 2, 8 ] max_queue_delay_microseconds: 100",
        "priority_levels: 2 default_priority_level: 2 priority_queue_policy { key: 1 value: { } }",
        f"preserve_ordering: true {REJECT}",
    ],
)
def test_triton_accepts_it(batching: str) -> None:
    build(batching)
