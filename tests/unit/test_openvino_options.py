"""Triton's OpenVINO parameters as OpenVinoOptions reads them (pure: no model compiled)."""

from __future__ import annotations

import pytest

pytest.importorskip("openvino")

from tritium.backends.openvino import OpenVinoOptions  # noqa: E402
from tritium.config.model_config import ModelConfig  # noqa: E402
from tritium.errors import ServerError  # noqa: E402


def _config(**params: str) -> ModelConfig:
    config = ModelConfig()
    for key, value in params.items():
        config.parameters[key].string_value = value
    return config


def test_defaults_give_one_stream_and_thread_per_instance() -> None:
    options = OpenVinoOptions.from_config(_config(), 3)
    assert dict(options.properties) == {"NUM_STREAMS": "3", "INFERENCE_NUM_THREADS": 3}
    assert (options.device, options.skip_dynamic_batch, options.batch_padding) == (
        "CPU",
        False,
        False,
    )


def test_a_hint_or_streams_leave_the_thread_count_to_openvino() -> None:
    props = dict(OpenVinoOptions.from_config(_config(PERFORMANCE_HINT="throughput"), 2).properties)
    assert props == {"PERFORMANCE_HINT": "THROUGHPUT"}
    props = dict(OpenVinoOptions.from_config(_config(NUM_STREAMS="numa"), 2).properties)
    assert props == {"NUM_STREAMS": "NUMA"}


def test_switches_are_yes_only_as_in_triton() -> None:
    options = OpenVinoOptions.from_config(
        _config(
            SKIP_OV_DYNAMIC_BATCHSIZE="Yes", ENABLE_BATCH_PADDING="true", RESHAPE_IO_LAYERS="YES"
        ),
        1,
    )
    assert (options.skip_dynamic_batch, options.batch_padding, options.reshape_io) == (
        True,
        False,
        True,
    )


def test_bf16_and_thread_counts() -> None:
    props = dict(
        OpenVinoOptions.from_config(
            _config(HINT_BF16="yes", INFERENCE_NUM_THREADS="2"), 1
        ).properties
    )
    assert props["INFERENCE_PRECISION_HINT"] == "bf16"
    assert props["INFERENCE_NUM_THREADS"] == 2


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("NUM_STREAMS", "x", "either AUTO/NUMA/<int_value>, got x"),
        ("PERFORMANCE_HINT", "slow", "LATENCY/THROUGHPUT/CUMULATIVE_THROUGHPUT, got slow"),
        ("INFERENCE_NUM_THREADS", "1.5", "to be a non-negative number, got 1.5"),
        ("HINT_BF16", "no", "to be YES, got no"),
        ("INFERENCE_PRECISION_HINT", "f64", "to be F32/BF16/F16, got f64"),
    ],
)
def test_bad_values_are_refused(key: str, value: str, message: str) -> None:
    with pytest.raises(ServerError, match=message):
        OpenVinoOptions.from_config(_config(**{key: value}), 1)


def test_precision_hint() -> None:
    props = dict(OpenVinoOptions.from_config(_config(INFERENCE_PRECISION_HINT="F32"), 1).properties)
    assert props["INFERENCE_PRECISION_HINT"] == "f32"
    with pytest.raises(ServerError, match="disagree"):
        OpenVinoOptions.from_config(_config(HINT_BF16="YES", INFERENCE_PRECISION_HINT="f32"), 1)
