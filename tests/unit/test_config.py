"""config.pbtxt parsing, /config rendering and Triton core's normalisation (no sockets)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tritium.errors import ErrorKind, ServerError
from tritium.config.model_config import (
    ConfigProblem,
    ModelConfig,
    config_from_json,
    config_to_json,
    mc,
    parse_config_text,
    read_config,
)
from tritium.config.spec import build_spec, infer_backend, normalize

PATH = Path("/models/m/config.pbtxt")

GOOD_ONNX = """\
name: "m"
backend: "onnxruntime"
max_batch_size: 8
input [
  {
    name: "INPUT0"
    data_type: TYPE_FP32
    dims: [ 4 ]
  }
]
output [
  {
    name: "OUTPUT0"
    data_type: TYPE_FP32
    dims: [ 4 ]
  }
]
"""


def parse(text: str, path: Path = PATH) -> ModelConfig:
    return parse_config_text(text, path)


def spec_of(text: str, name: str = "m", path: Path = PATH):
    config = parse(text, path)
    problem = ConfigProblem(name, path, text)
    normalize(config, name, problem)
    return build_spec(config, problem)


def error_of(text: str, name: str = "m") -> ServerError:
    with pytest.raises(ServerError) as info:
        spec_of(text, name)
    assert info.value.kind is ErrorKind.INVALID_ARG
    return info.value


# ------------------------------------------------------------------------------ parsing


def test_parse_good_config() -> None:
    config = parse(GOOD_ONNX)
    assert config.name == "m"
    assert config.backend == "onnxruntime"
    assert config.max_batch_size == 8
    assert [i.name for i in config.input] == ["INPUT0"]
    assert list(config.output[0].dims) == [4]
    assert config.input[0].data_type == mc.TYPE_FP32


def test_parse_syntax_error_names_file_line_column_and_field() -> None:
    text = 'name: "m"\nbackend: "python"\nmax_batch_size: "x"\n'
    with pytest.raises(ServerError) as info:
        parse(text)
    assert info.value.kind is ErrorKind.INVALID_ARG
    message = info.value.message
    assert re.search(rf"{re.escape(str(PATH))}:3:\d+", message), message
    assert "max_batch_size" in message


def test_parse_unknown_field_names_file_line_column_and_field() -> None:
    text = 'name: "m"\nbackend: "python"\nmax_batch_size: 0\nfoo_bar: 1\n'
    with pytest.raises(ServerError) as info:
        parse(text)
    message = info.value.message
    assert re.search(rf"{re.escape(str(PATH))}:4:1\b", message), message
    assert "foo_bar" in message


def test_parse_unterminated_message_names_file() -> None:
    text = 'name: "m"\ninput [ { name: "a" data_type: TYPE_FP32 dims: [ 1 ]\n'
    with pytest.raises(ServerError) as info:
        parse(text)
    assert str(PATH) in info.value.message


def test_parse_wrong_enum_value_names_line() -> None:
    text = 'name: "m"\ninput [\n  {\n    name: "a"\n    data_type: TYPE_NOPE\n  }\n]\n'
    with pytest.raises(ServerError) as info:
        parse(text)
    assert re.search(rf"{re.escape(str(PATH))}:5:\d+", info.value.message), info.value.message
    assert "TYPE_NOPE" in info.value.message


def test_read_config_missing_file_is_empty(tmp_path: Path) -> None:
    config, path, text = read_config(tmp_path)
    assert config == ModelConfig()
    assert path is None
    assert text == ""


def test_read_config_prefers_named_custom_config(tmp_path: Path) -> None:
    (tmp_path / "config.pbtxt").write_text("max_batch_size: 1\n")
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "big.pbtxt").write_text("max_batch_size: 32\n")
    config, path, _ = read_config(tmp_path, "big")
    assert config.max_batch_size == 32
    assert path == tmp_path / "configs" / "big.pbtxt"
    config, path, _ = read_config(tmp_path, "absent")
    assert config.max_batch_size == 1
    assert path == tmp_path / "config.pbtxt"
    config, _, _ = read_config(tmp_path)
    assert config.max_batch_size == 1


def test_config_from_json_override() -> None:
    config = config_from_json('{"max_batch_size": 4, "backend": "python"}')
    assert config.max_batch_size == 4
    with pytest.raises(ServerError) as info:
        config_from_json('{"no_such_field": 1}')
    assert info.value.kind is ErrorKind.INVALID_ARG


# ---------------------------------------------------------------------- /config rendering


def test_config_to_json_prints_defaults() -> None:
    data = config_to_json(ModelConfig())
    assert data["max_batch_size"] == 0
    assert data["platform"] == ""
    assert data["backend"] == ""
    assert data["input"] == []
    assert data["output"] == []


def test_config_to_json_int64_fields_are_numbers_and_enums_are_names() -> None:
    text = GOOD_ONNX + (
        "version_policy: { specific: { versions: [ 1, 3 ] } }\n"
        "dynamic_batching {\n"
        "  max_queue_delay_microseconds: 100\n"
        "  default_queue_policy { default_timeout_microseconds: 7 }\n"
        "  priority_levels: 2\n"
        "  priority_queue_policy { key: 1 value { default_timeout_microseconds: 9 } }\n"
        "}\n"
    )
    data = config_to_json(parse(text))
    assert data["input"][0]["dims"] == [4]
    assert data["input"][0]["data_type"] == "TYPE_FP32"
    assert data["version_policy"]["specific"]["versions"] == [1, 3]
    batching = data["dynamic_batching"]
    assert batching["max_queue_delay_microseconds"] == 100
    assert batching["default_queue_policy"]["default_timeout_microseconds"] == 7
    assert batching["priority_queue_policy"]["1"]["default_timeout_microseconds"] == 9

    # Nothing 64-bit is left as a protobuf-JSON string anywhere.
    def walk(value: object) -> None:
        if isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)
        elif isinstance(value, str):
            assert not value.lstrip("-").isdigit(), f"number rendered as string: {value!r}"

    walk(data)


def test_config_to_json_reshape_and_sequence_numbers() -> None:
    text = (
        'name: "m"\nbackend: "python"\nmax_batch_size: 2\n'
        'input [ { name: "a" data_type: TYPE_INT64 dims: [ 1 ] reshape: { shape: [ ] } } ]\n'
        'output [ { name: "b" data_type: TYPE_INT64 dims: [ 2, 3 ] reshape: { shape: [ 6 ] } } ]\n'
        "sequence_batching { max_sequence_idle_microseconds: 5000000 }\n"
    )
    data = config_to_json(parse(text))
    assert data["output"][0]["reshape"]["shape"] == [6]
    assert data["output"][0]["dims"] == [2, 3]
    assert data["sequence_batching"]["max_sequence_idle_microseconds"] == 5000000


# --------------------------------------------------------------------------- normalisation


def test_name_defaults_to_directory() -> None:
    text = GOOD_ONNX.replace('name: "m"\n', "")
    spec = spec_of(text, name="from_dir")
    assert spec.name == "from_dir"
    assert spec.config.name == "from_dir"
    assert spec.config_json["name"] == "from_dir"


def test_name_mismatch_is_an_error_naming_the_line() -> None:
    text = "# a comment\n" + GOOD_ONNX.replace('name: "m"', 'name: "other"')
    exc = error_of(text, name="m")
    assert f"{PATH}:2" in exc.message
    assert "name" in exc.message
    assert "other" in exc.message


def test_instance_group_defaults_onnxruntime_two_cpu_instances() -> None:
    spec = spec_of(GOOD_ONNX)
    groups = spec.config.instance_group
    assert len(groups) == 1
    assert groups[0].count == 2
    assert groups[0].kind == mc.ModelInstanceGroup.KIND_CPU
    assert groups[0].name == "m_0"
    assert spec.instance_count == 2


def test_instance_group_defaults_python_one_instance() -> None:
    spec = spec_of(GOOD_ONNX.replace('"onnxruntime"', '"python"'))
    assert [g.count for g in spec.config.instance_group] == [1]
    assert spec.config.default_model_filename == "model.py"


def test_instance_group_explicit_count_kept() -> None:
    text = GOOD_ONNX + "instance_group [ { count: 3 kind: KIND_CPU } ]\n"
    assert spec_of(text).instance_count == 3


def test_kind_gpu_refused_with_line() -> None:
    text = GOOD_ONNX + "instance_group [\n  {\n    kind: KIND_GPU\n  }\n]\n"
    line = text.splitlines().index("    kind: KIND_GPU") + 1
    exc = error_of(text)
    assert f"{PATH}:{line}" in exc.message
    assert "KIND_GPU" in exc.message
    assert "instance_group" in exc.message


def test_version_policy_default_latest_one() -> None:
    spec = spec_of(GOOD_ONNX)
    policy = spec.config.version_policy
    assert policy.WhichOneof("policy_choice") == "latest"
    assert policy.latest.num_versions == 1
    assert spec.config_json["version_policy"] == {"latest": {"num_versions": 1}}


def test_version_policy_given_is_kept() -> None:
    spec = spec_of(GOOD_ONNX + "version_policy: { all: {} }\n")
    assert spec.config.version_policy.WhichOneof("policy_choice") == "all"


def test_preferred_batch_size_defaults_to_max_batch_size() -> None:
    spec = spec_of(GOOD_ONNX + "dynamic_batching { }\n")
    assert list(spec.config.dynamic_batching.preferred_batch_size) == [8]
    spec = spec_of(GOOD_ONNX + "dynamic_batching { preferred_batch_size: [ 2, 4 ] }\n")
    assert list(spec.config.dynamic_batching.preferred_batch_size) == [2, 4]


def test_sequence_idle_default() -> None:
    spec = spec_of(GOOD_ONNX + "sequence_batching { }\n")
    assert spec.config.sequence_batching.max_sequence_idle_microseconds == 1_000_000


def test_default_model_filename_and_pinned_memory() -> None:
    spec = spec_of(GOOD_ONNX)
    assert spec.config.default_model_filename == "model.onnx"
    assert spec.config.optimization.input_pinned_memory.enable is True
    assert spec.config.optimization.output_pinned_memory.enable is True


def test_missing_backend_is_an_error() -> None:
    exc = error_of('name: "m"\nmax_batch_size: 0\n')
    assert "backend" in exc.message


def test_spec_shapes_and_platform() -> None:
    spec = spec_of(GOOD_ONNX)
    io = spec.inputs["INPUT0"]
    assert io.dims == (4,)
    assert io.datatype.wire == "FP32"
    assert spec.required_inputs == frozenset({"INPUT0"})
    assert spec.max_batch_size == 8
    assert spec.decoupled is False
    assert spec.platform == "onnxruntime"  # no platform set: metadata reports the backend


def test_infer_backend_from_version_directory(tmp_path: Path) -> None:
    version = tmp_path / "1"
    version.mkdir()
    (version / "model.onnx").write_bytes(b"")
    config = ModelConfig()
    infer_backend(config, [version])
    assert config.backend == "onnxruntime"
    assert config.platform == "onnxruntime_onnx"

    config = ModelConfig(platform="onnxruntime_onnx")
    infer_backend(config, [])
    assert config.backend == "onnxruntime"

    (version / "model.onnx").unlink()
    (version / "model.py").write_text("")
    config = ModelConfig()
    infer_backend(config, [version])
    assert config.backend == "python"


@pytest.mark.parametrize("platform", ["onnxruntime", "onnxruntime_onx", "python", "tensorflow"])
def test_unknown_platform_is_refused_as_triton_does(tmp_path: Path, platform: str) -> None:
    """An unknown platform is not replaced by what the version directory holds: Triton
    infers from files only when no platform is given, then refuses the empty backend."""
    version = tmp_path / "1"
    version.mkdir()
    (version / "model.onnx").write_bytes(b"")
    (version / "model.py").write_text("")
    config = ModelConfig(name="m", platform=platform)
    infer_backend(config, [version])
    assert config.backend == ""
    with pytest.raises(ServerError, match=f"unexpected platform type '{platform}' for m"):
        normalize(config, "m", ConfigProblem("m", None, ""))
    named = ModelConfig(name="m", platform=platform, default_model_filename="model.py")
    infer_backend(named, [version])  # a backend's own file name still names it (as Triton)
    assert named.backend == "python"


# ----------------------------------------------------------------------- build_spec errors


def test_missing_dims_error_names_line_and_field() -> None:
    text = (
        'name: "m"\n'
        'backend: "python"\n'
        "input [\n"
        "  {\n"
        '    name: "INPUT0"\n'
        "    data_type: TYPE_FP32\n"
        "  }\n"
        "]\n"
    )
    exc = error_of(text)
    assert f"{PATH}:5" in exc.message  # the line of the input's name
    assert "dims" in exc.message
    assert "INPUT0" in exc.message


def test_missing_data_type_error_names_line_and_field() -> None:
    text = (
        'name: "m"\n'
        'backend: "python"\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        "output [\n"
        "  {\n"
        '    name: "OUTPUT0"\n'
        "    dims: [ 1 ]\n"
        "  }\n"
        "]\n"
    )
    exc = error_of(text)
    assert f"{PATH}:6" in exc.message
    assert "data_type" in exc.message
    assert "OUTPUT0" in exc.message


@pytest.mark.parametrize("dims", ["[ 0 ]", "[ -2 ]", "[ 4, 0 ]"])
def test_invalid_dims(dims: str) -> None:
    text = (
        'name: "m"\nbackend: "python"\n'
        f'input [ {{ name: "a" data_type: TYPE_FP32 dims: {dims} }} ]\n'
    )
    exc = error_of(text)
    assert "dims" in exc.message
    assert f"{PATH}:3" in exc.message


def test_duplicate_input_name() -> None:
    text = (
        'name: "m"\nbackend: "python"\n'
        'input [ { name: "a" data_type: TYPE_FP32 dims: [ 1 ] },\n'
        '        { name: "a" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
    )
    assert "duplicate" in error_of(text).message


def test_reshape_size_mismatch() -> None:
    text = (
        'name: "m"\nbackend: "python"\n'
        'input [ { name: "a" data_type: TYPE_FP32 dims: [ 4 ] reshape: { shape: [ 3 ] } } ]\n'
    )
    assert "reshape" in error_of(text).message


def test_negative_max_batch_size() -> None:
    exc = error_of(GOOD_ONNX.replace("max_batch_size: 8", "max_batch_size: -1"))
    assert "max_batch_size" in exc.message


def test_bad_version_policies() -> None:
    exc = error_of(GOOD_ONNX + "version_policy: { latest: { num_versions: 0 } }\n")
    assert "version_policy" in exc.message
    exc = error_of(GOOD_ONNX + "version_policy: { specific: { } }\n")
    assert "version_policy" in exc.message


def test_auto_completed_config_error_names_model() -> None:
    """Without a config file, errors say which model's auto-completed config is wrong."""
    config = ModelConfig(backend="python")
    config.input.add(name="x", data_type=mc.TYPE_FP32)
    problem = ConfigProblem("auto", None, "")
    normalize(config, "auto", problem)
    with pytest.raises(ServerError) as info:
        build_spec(config, problem)
    assert "auto" in info.value.message
    assert "dims" in info.value.message
