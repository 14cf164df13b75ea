"""The line a config.pbtxt problem is reported at: read from the text format's tokens, so a
field name that also appears in a comment, a string, a model name or another message earlier
does not fool it (it did, when the line was found by searching the text)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tritium.config.fields import check_fields
from tritium.config.locate import Occurrence, field_line, occurrences
from tritium.config.model_config import ConfigProblem, parse_config_text
from tritium.config.spec import build_spec
from tritium.errors import ServerError

PATH = Path("/models/m/config.pbtxt")


def _refusal(text: str) -> str:
    config = parse_config_text(text, PATH)  # the locator only ever sees text protobuf took
    with pytest.raises(ServerError) as info:
        check_fields(config, ConfigProblem("m", PATH, text))
    return info.value.message


def _line_of_marker(text: str, marker: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if marker in line)


TRICKY = {
    "name in a comment first": (
        "# passive: set below, see instance_group\n"
        'name: "m"\nbackend: "python"\n'
        "instance_group [ { count: 1 passive: true } ]  # HERE\n",
        "instance_group.passive",
    ),
    "name inside the model's name": (
        'name: "passive_runtime_model"\nbackend: "python"\n'
        'runtime: "libtriton_python.so"  # HERE\n',
        "runtime",
    ),
    "name inside another string": (
        'name: "m"\nbackend: "python"\n'
        'parameters { key: "note" value { string_value: "host_policy: none" } }\n'
        'instance_group [ { host_policy: "p0" } ]  # HERE\n',
        "instance_group.host_policy",
    ),
    "same name in another message": (
        'name: "m"\nbackend: "python"\n'
        'output [ { name: "O" data_type: TYPE_FP32 dims: [ 1 ] is_shape_tensor: false } ]\n'
        'input [ { name: "I" data_type: TYPE_FP32 dims: [ 1 ]\n'
        "          is_shape_tensor: true } ]  # HERE\n",
        "input.is_shape_tensor",
    ),
    "quoted '#' is not a comment": (
        'name: "m"\nbackend: "python"\n'
        'parameters { key: "a#b" value { string_value: "x # y" } } instance_group [ {\n'
        "  passive: true }  # HERE\n]\n",
        "instance_group.passive",
    ),
    "escaped quote in a string": (
        'name: "m"\nbackend: "python"\n'
        'parameters { key: "q" value { string_value: "say \\" passive: true" } }\n'
        "instance_group { passive: true }  # HERE\n",
        "instance_group.passive",
    ),
    "a refused parameter key written earlier as a value": (
        'name: "m"\nbackend: "onnxruntime"\n'
        'parameters { key: "note"\n'
        '  value { string_value: "memory.enable_memory_arena_shrinkage" } }\n'
        "parameters {\n"
        '  key: "memory.enable_memory_arena_shrinkage"  # HERE\n'
        '  value { string_value: "cpu:0" }\n}\n',
        "parameters.memory.enable_memory_arena_shrinkage",
    ),
}


@pytest.mark.parametrize("case", sorted(TRICKY))
def test_a_refused_field_is_reported_at_its_own_line(case: str) -> None:
    text, field = TRICKY[case]
    message = _refusal(text)
    assert message.startswith(f"{PATH}:{_line_of_marker(text, '# HERE')}: field '{field}': ")


def test_occurrences_follow_the_nesting_and_unescape_strings() -> None:
    text = (
        'name: "m"  # name: "not this"\n'
        'input [ { name: "IN" dims: [ -1, 3 ] }, {\n name: "I\\x4e2" } ]\n'
        'parameters: { key: "k" value: < string_value: "a" "b" > }\n'
    )
    found = occurrences(text)
    assert [(o.path, o.line, o.value) for o in found] == [
        ("name", 1, "m"),
        ("input", 2, None),
        ("input.name", 2, "IN"),
        ("input.dims", 2, None),
        ("input.dims", 2, "-1"),
        ("input.dims", 2, "3"),
        ("input.name", 3, "IN2"),
        ("parameters", 4, None),
        ("parameters.key", 4, "k"),
        ("parameters.value", 4, None),
        ("parameters.value.string_value", 4, "ab"),
    ]
    first, second = found[2], found[6]
    assert isinstance(first, Occurrence) and first.entry != second.entry  # two input entries


def test_field_line_rules() -> None:
    text = (
        'name: "m"\n'
        "instance_group [\n"
        "  { count: 1 kind: KIND_CPU },\n"
        "  { count: 2\n"
        "    kind: KIND_GPU }\n"
        "]\n"
        'input [ { name: "A" dims: [ 1 ] },\n'
        '        { name: "B"\n'
        "          dims: [ 0 ] } ]\n"
    )
    assert field_line(text, "name") == 1
    assert field_line(text, "instance_group") == 2
    assert field_line(text, "instance_group", "count") == 3  # a sub-field: its first line
    assert field_line(text, "instance_group", "KIND_GPU") == 5  # a value: its line
    assert field_line(text, "input.dims", '"B"') == 9  # the field inside the named entry
    assert field_line(text, "input", '"B"') == 8
    assert field_line(text, "output") == 0  # not written
    assert field_line(text, "instance_group.rate_limiter") == 2  # its closest ancestor
    assert field_line("", "name") == 0


def test_other_load_errors_point_at_their_entry() -> None:
    text = (
        'name: "m"\nbackend: "python"\n'
        '# input "B" is the one with bad dims\n'
        'input [ { name: "A" data_type: TYPE_FP32 dims: [ 1 ] },\n'
        '        { name: "B" data_type: TYPE_FP32\n'
        "          dims: [ -2 ] } ]\n"
    )
    with pytest.raises(ServerError) as info:
        build_spec(parse_config_text(text, PATH), ConfigProblem("m", PATH, text))
    assert info.value.message.startswith(f"{PATH}:6: field 'input.dims': input 'B' dimension")


def test_deep_nesting_needs_no_recursion() -> None:
    text = "a { " * 5000 + "b: 1" + " }" * 5000
    assert field_line(text, ".".join(["a"] * 5000 + ["b"])) == 1
