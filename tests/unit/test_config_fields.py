"""No config silently ignored: every ModelConfig field has a decision (config/fields.py), refused
fields fail the load naming the field, GPU-only ones warn once, defaults change nothing."""

from __future__ import annotations

import logging
from pathlib import Path

import onnxruntime as ort
import pytest
from google.protobuf.descriptor import Descriptor

from tritium.backends.onnxruntime import _session_options
from tritium.config.fields import FIELDS, Decision, check_fields, markdown_table, review
from tritium.config.model_config import ConfigProblem, ModelConfig, parse_config_text
from tritium.config.spec import build_spec, normalize
from tritium.errors import ErrorKind, ServerError

ROOT = Path(__file__).resolve().parents[2]
PATH = Path("/models/m/config.pbtxt")
BASE = """\
name: "m"
backend: "python"
max_batch_size: 4
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
"""


def walk(descriptor: Descriptor, prefix: str = "") -> list[str]:
    """Every field path under ``descriptor``, through nested messages, lists and map values."""
    paths = []
    for fd in descriptor.fields:
        path = prefix + fd.name
        paths.append(path)
        sub = fd.message_type
        if sub is not None and sub.GetOptions().map_entry:
            sub = sub.fields_by_name["value"].message_type
        if sub is not None:
            assert path.count(".") < 10, f"recursive message at {path}"
            paths += walk(sub, path + ".")
    return paths


def test_every_model_config_field_has_a_decision() -> None:
    paths = walk(ModelConfig.DESCRIPTOR)
    missing = [p for p in paths if p not in FIELDS]
    assert not missing, f"decide these ModelConfig fields in config/fields.py: {missing}"
    assert set(FIELDS) == set(paths), f"stale decisions: {sorted(set(FIELDS) - set(paths))}"
    assert len(paths) > 150  # the walk really went into the nested messages


def test_a_section_below_a_decision_agrees_with_it() -> None:
    """Below a refused or GPU-only field every field has the same decision (otherwise the
    table would say one thing and the load do another)."""
    for path, rule in FIELDS.items():
        parent = path.rsplit(".", 1)[0]
        if "." in path and FIELDS[parent].decision is not Decision.IMPLEMENTED:
            assert rule.decision is FIELDS[parent].decision, path


def config_of(extra: str, base: str = BASE) -> tuple[ModelConfig, ConfigProblem, str]:
    text = base + extra
    return parse_config_text(text, PATH), ConfigProblem("m", PATH, text), text


REFUSED = [
    ('model_operations { op_library_filename: "libcustom.so" }', "model_operations"),
    ('model_repository_agents { agents [ { name: "checksum" } ] }', "model_repository_agents"),
    ('instance_group [ { host_policy: "policy_0" } ]', "instance_group.host_policy"),
    ("instance_group [ { passive: true } ]", "instance_group.passive"),
    ("instance_group [ { kind: KIND_CPU gpus: [ 0 ] } ]", "instance_group.gpus"),
    ('instance_group [ { profile: [ "0" ] } ]', "instance_group.profile"),
    ('runtime: "libtriton_python.so"', "runtime"),
    (
        'optimization { execution_accelerators { cpu_execution_accelerator [ { name: "openvino" '
        "} ] } }",
        "optimization.execution_accelerators.cpu_execution_accelerator",
    ),
    (
        'sequence_batching { state [ { input_name: "S" output_name: "S_OUT" data_type: TYPE_FP32 '
        "dims: [ 1 ] use_same_buffer_for_input_output: true use_growable_memory: true } ] }",
        "sequence_batching.state.use_growable_memory",
    ),
]


@pytest.mark.parametrize(("extra", "field"), REFUSED, ids=[f for _, f in REFUSED])
def test_a_refused_field_fails_the_load_naming_it(extra: str, field: str) -> None:
    config, problem, text = config_of(extra)
    with pytest.raises(ServerError) as info:
        check_fields(config, problem)
    assert info.value.kind is ErrorKind.INVALID_ARG
    message = info.value.message
    line = text.splitlines().index(extra) + 1
    assert message.startswith(f"{PATH}:{line}: field '{field}': "), message
    assert message.endswith("; remove it from the configuration"), message
    assert review(config).refused[0][0] == field


def test_shape_tensors_fail_on_inputs_and_outputs() -> None:
    base = BASE.replace("dims: [ -1 ] }", "dims: [ -1 ] is_shape_tensor: true }")
    config, problem, _ = config_of("", base)
    assert [path for path, _ in review(config).refused] == [
        "input.is_shape_tensor",
        "output.is_shape_tensor",
    ]
    with pytest.raises(ServerError, match="shape tensors are only supported for TensorRT"):
        check_fields(config, problem)


def test_the_refusal_message_says_what_to_do() -> None:
    config, problem, _ = config_of('model_operations { op_library_filename: "libcustom.so" }')
    with pytest.raises(ServerError) as info:
        check_fields(config, problem)
    assert (
        "field 'model_operations': custom operation libraries (model_operations) are not "
        "supported by tritium yet; remove it from the configuration" in info.value.message
    )


def test_model_warmup_is_implemented() -> None:
    config, problem, _ = config_of(
        'model_warmup [ { name: "w" batch_size: 1 count: 2 inputs { key: "INPUT0" value: '
        "{ data_type: TYPE_FP32 dims: [ 1 ] zero_data: true } } } ]"
    )
    check_fields(config, problem)
    assert review(config).refused == ()


def test_a_backend_parameter_is_decided_for_its_backend_only() -> None:
    extra = (
        'parameters { key: "memory.enable_memory_arena_shrinkage" value: { string_value: "cpu:0" '
        "} }"
    )
    config, problem, _ = config_of(extra)
    check_fields(config, problem)  # the Python backend has no such key: passed on, as Triton
    config, problem, _ = config_of(extra, BASE.replace('"python"', '"onnxruntime"'))
    with pytest.raises(ServerError, match="memory.enable_memory_arena_shrinkage"):
        check_fields(config, problem)


def test_an_implemented_parameter_is_accepted() -> None:
    extra = 'parameters { key: "EXECUTION_ENV_PATH" value: { string_value: "env.tar.gz" } }'
    config, problem, _ = config_of(extra)
    check_fields(config, problem)
    assert review(config).refused == () and review(config).gpu_only == ()


GPU_ONLY = [
    ("optimization { cuda { graphs: true busy_wait_events: true } }", "optimization.cuda"),
    (
        'optimization { execution_accelerators { gpu_execution_accelerator [ { name: "tensorrt" '
        "} ] } }",
        "optimization.execution_accelerators.gpu_execution_accelerator",
    ),
    ("optimization { input_pinned_memory { enable: true } }", "optimization.input_pinned_memory"),
    ("optimization { priority: PRIORITY_MAX }", "optimization.priority"),
    ("optimization { eager_batching: true }", "optimization.eager_batching"),
    (
        "optimization { gather_kernel_buffer_threshold: 4 }",
        "optimization.gather_kernel_buffer_threshold",
    ),
    ('cc_model_filenames { key: "7.5" value: "model_t4.py" }', "cc_model_filenames"),
    (
        "instance_group [ { secondary_devices [ { kind: KIND_NVDLA device_id: 0 } ] } ]",
        "instance_group.secondary_devices",
    ),
    (
        'parameters { key: "FORCE_CPU_ONLY_INPUT_TENSORS" value: { string_value: "no" } }',
        "parameters.FORCE_CPU_ONLY_INPUT_TENSORS",
    ),
]


@pytest.mark.parametrize(("extra", "field"), GPU_ONLY, ids=[f for _, f in GPU_ONLY])
def test_a_gpu_only_field_is_accepted_with_one_warning(
    extra: str, field: str, caplog: pytest.LogCaptureFixture
) -> None:
    config, problem, _ = config_of(extra)
    with caplog.at_level(logging.WARNING, logger="tritium"):
        check_fields(config, problem)
        check_fields(config, problem)  # a second version of the same load: no second warning
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert f"field '{field}': accepted but ignored:" in warnings[0]
    assert [path for path, _ in review(config).gpu_only] == [field]
    assert review(config).refused == ()


DEFAULTS = [
    "model_warmup [ ]",
    "batch_input [ ]",
    "model_operations { }",
    "model_repository_agents { }",
    "optimization { cuda { graphs: false } priority: PRIORITY_DEFAULT }",
    "optimization { input_pinned_memory { enable: false } output_pinned_memory { } }",
    'instance_group [ { count: 1 kind: KIND_CPU passive: false host_policy: "" '
    "rate_limiter { priority: 0 resources [ ] } } ]",
    'sequence_batching { iterative_sequence: false state [ { input_name: "S" output_name: '
    '"S_OUT" data_type: TYPE_FP32 dims: [ 1 ] use_growable_memory: false } ] }',
    'runtime: ""',
    "metric_tags [ ]",
]


@pytest.mark.parametrize("extra", DEFAULTS)
def test_default_values_change_nothing(extra: str, caplog: pytest.LogCaptureFixture) -> None:
    config, problem, _ = config_of(extra)
    with caplog.at_level(logging.WARNING, logger="tritium"):
        check_fields(config, problem)
    assert review(config).refused == () and review(config).gpu_only == ()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_what_normalize_adds_is_not_reported() -> None:
    """normalize() turns pinned memory on (as Triton): the check runs on the config before."""
    config, problem, _ = config_of("dynamic_batching { }")
    check_fields(config, problem)
    assert review(config) == review(ModelConfig.FromString(config.SerializeToString()))
    normalize(config, "m", problem)
    assert [p for p, _ in review(config).gpu_only] == [
        "optimization.input_pinned_memory",
        "optimization.output_pinned_memory",
    ]


def test_implemented_sections_are_accepted_quietly(caplog: pytest.LogCaptureFixture) -> None:
    extra = """\
version_policy { specific { versions: [ 1 ] } }
dynamic_batching { max_queue_delay_microseconds: 100 priority_levels: 2 default_priority_level: 1
  priority_queue_policy { key: 1 value: { max_queue_size: 4 } } }
instance_group [ { count: 2 kind: KIND_CPU } ]
parameters { key: "custom" value: { string_value: "x" } }
model_transaction_policy { decoupled: false }
response_cache { enable: true }
optimization { graph { level: 1 } }
"""
    config, problem, _ = config_of(extra)
    with caplog.at_level(logging.WARNING, logger="tritium"):
        check_fields(config, problem)
    assert not caplog.records


def test_image_format_needs_three_dims() -> None:
    base = BASE.replace("dims: [ -1 ] }", "format: FORMAT_NHWC dims: [ 4, 4 ] }", 1)
    config, problem, _ = config_of("", base)
    normalize(config, "m", problem)
    with pytest.raises(ServerError, match="field 'input.format': model input NHWC/NCHW require 3"):
        build_spec(config, problem)


@pytest.mark.parametrize(
    ("level", "expected"),
    [
        (-1, ort.GraphOptimizationLevel.ORT_ENABLE_BASIC),
        (0, ort.GraphOptimizationLevel.ORT_ENABLE_ALL),
        (1, ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED),
        (2, ort.GraphOptimizationLevel.ORT_DISABLE_ALL),
    ],
)
def test_onnxruntime_graph_level_as_triton(level: int, expected: object) -> None:
    config = ModelConfig()
    config.optimization.graph.level = level
    assert _session_options(config).graph_optimization_level == expected


def test_onnxruntime_memory_parameters() -> None:
    config = ModelConfig()
    config.parameters["enable_mem_arena"].string_value = "false"
    config.parameters["enable_mem_pattern"].string_value = "Off"
    options = _session_options(config)
    assert options.enable_cpu_mem_arena is False
    assert options.enable_mem_pattern is False
    config.parameters["enable_mem_arena"].string_value = "maybe"
    with pytest.raises(ServerError, match="parameter 'enable_mem_arena' must be true or false"):
        _session_options(config)


def test_docs_list_exactly_the_table() -> None:
    page = (ROOT / "docs" / "model_config.md").read_text(encoding="utf-8")
    for table in markdown_table().split("\n\n"):  # fields, then parameters keys
        assert table.strip() + "\n" in page, (
            "docs/model_config.md is out of date: paste `python -m tritium.config.fields` in it"
        )
    listed = {line.split("`")[1] for line in page.splitlines() if line.startswith("| `")}
    assert listed == set(FIELDS)
