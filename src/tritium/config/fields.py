"""What tritium does with every field of Triton's ``ModelConfig``, applied at load time.

Each field path (dotted, through nested messages, repeated entries and map values, e.g.
``instance_group.rate_limiter``) is IMPLEMENTED (tritium honours it), GPU_ONLY (Triton itself
has no effect for it on a server without a GPU: accepted, with one warning per model load),
NO_EFFECT (Triton accepts it and it means nothing for this kind of model: accepted, with one
warning per model load) or REFUSED (the load fails, the model is UNAVAILABLE and the reason
names the field). Nothing is parsed and then silently ignored. A field left at its default
value, or an empty section (``model_operations {}``), changes nothing and is never refused.

``tests/unit/test_config_fields.py`` walks the ``ModelConfig`` descriptor and fails for a field
with no decision in ``field_table.py`` (the one table); ``docs/model_config.md`` is checked
against it.

Decisions are made on the configuration as the user wrote it (or as auto-complete produced it),
before ``normalize`` fills in Triton's defaults (pinned memory, preferred batch sizes, ...).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from google.protobuf.descriptor import FieldDescriptor

from .field_table import FIELDS, PARAMETERS, Decision, FieldRule
from .model_config import ConfigProblem, ModelConfig

__all__ = [
    "FIELDS",
    "PARAMETERS",
    "Decision",
    "FieldReview",
    "FieldRule",
    "check_fields",
    "field_paths",
    "markdown_table",
    "review",
    "set_fields",
]
_I, _G, _R, _W = Decision.IMPLEMENTED, Decision.GPU_ONLY, Decision.REFUSED, Decision.NO_EFFECT


@dataclass(frozen=True, slots=True)
class FieldReview:
    """The fields of one configuration that are not simply implemented: (path, reason)."""

    refused: tuple[tuple[str, str], ...]
    gpu_only: tuple[tuple[str, str], ...]
    no_effect: tuple[tuple[str, str], ...] = ()


def set_fields(message: Any, prefix: str = "") -> Iterator[str]:
    """The dotted paths of the fields set in ``message`` to something other than their
    default, in declaration order (a path may repeat, once per entry of a repeated field).
    A section counts only if something inside it is set; a non-empty list or map counts."""
    for fd, value in message.ListFields():
        path = prefix + fd.name
        if fd.type != FieldDescriptor.TYPE_MESSAGE:
            yield path
            continue
        if fd.message_type.GetOptions().map_entry:
            value_fd = fd.message_type.fields_by_name["value"]
            items = list(value.values()) if value_fd.type == FieldDescriptor.TYPE_MESSAGE else []
        elif fd.is_repeated:
            items = list(value)
        else:
            below = list(set_fields(value, path + "."))
            if below:
                yield path
                yield from below
            continue
        yield path  # a non-empty list or map
        for item in items:
            yield from set_fields(item, path + ".")


def review(config: ModelConfig) -> FieldReview:
    """Which fields set in ``config`` are refused and which only matter with a GPU (pure).
    A subtree is reported once, at its outermost path with that decision."""
    found: dict[Decision, dict[str, str]] = {_R: {}, _G: {}, _W: {}}
    for path in set_fields(config):
        for top in _prefixes(path):
            rule = FIELDS.get(top)
            if rule is not None and rule.decision is not _I:
                found[rule.decision].setdefault(top, rule.reason)
                break
    for key in config.parameters:
        rule = PARAMETERS.get((config.backend, key))
        if rule is not None and rule.decision is not _I:
            found[rule.decision].setdefault(f"parameters.{key}", rule.reason)
    return FieldReview(tuple(found[_R].items()), tuple(found[_G].items()), tuple(found[_W].items()))


def _prefixes(path: str) -> Iterator[str]:
    parts = path.split(".")
    for end in range(1, len(parts) + 1):
        yield ".".join(parts[:end])


def check_fields(config: ModelConfig, problem: ConfigProblem) -> None:
    """Fail the load for the first refused field; warn once per model load for each field
    that only has an effect with a GPU or none at all."""
    found = review(config)
    if found.refused:
        path, reason = found.refused[0]
        raise problem.error(
            path, f"{reason}; remove it from the configuration", anchor=_anchor(path)
        )
    for path, reason in (*found.gpu_only, *found.no_effect):
        problem.warn(path, f"accepted but ignored: {reason}", anchor=_anchor(path))


def _anchor(path: str) -> str:
    """What identifies the field's entry in config.pbtxt beyond its path: a parameter's key
    (``parameters.<key>`` is not a path of the text: the entry is ``key: "<key>"``)."""
    return path.removeprefix("parameters.") if path.startswith("parameters.") else ""


def field_paths(descriptor: Any, prefix: str = "") -> Iterator[str]:
    """Every field path of a message type, in declaration order (map values and repeated
    entries are walked into; the proto has no recursive messages)."""
    for fd in descriptor.fields:
        path = prefix + fd.name
        yield path
        below = fd.message_type
        if below is not None and below.GetOptions().map_entry:
            below = below.fields_by_name["value"].message_type
        if below is not None:
            yield from field_paths(below, path + ".")


def markdown_table() -> str:
    """The decision tables as Markdown, as docs/model_config.md shows them (a unit test keeps
    the page equal to this; regenerate with ``python -m tritium.config.fields``)."""
    lines = ["| Field | tritium | Why |", "|---|---|---|"]
    for path in field_paths(ModelConfig.DESCRIPTOR):
        rule = FIELDS[path]
        lines.append(f"| `{path}` | {rule.decision.value} | {rule.reason} |")
    lines += ["", "| Backend | `parameters` key | tritium | Why |", "|---|---|---|---|"]
    for (backend, key), rule in PARAMETERS.items():
        lines.append(f"| {backend} | `{key}` | {rule.decision.value} | {rule.reason} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown_table(), end="")
