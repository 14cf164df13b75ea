"""Render deploy/helm/tritium without Helm: the plain manifests in deploy/kubernetes/.

The chart's templates use a small subset of Helm's template language, and this script
implements exactly that subset (anything else is an error, so the chart cannot drift into
syntax rendered here differently from Helm):

- actions ``{{ ... }}``, with ``{{-`` / ``-}}`` trimming the whitespace before / after;
- values: ``.Values.a.b``, ``.Release.Name``, ``.Release.Namespace``, ``.Chart.Name``,
  ``.Chart.AppVersion``, ``.`` (the item inside ``range``), integers and "strings";
- functions: ``not X``, and in pipelines ``quote``, ``toYaml``, ``nindent N``, ``indent N``;
- blocks: ``if X`` / ``else`` / ``end`` and ``range X`` / ``end``.

Values are Helm's: the chart's ``values.yaml``, then each ``--values`` file, then each
``--set``, each merged over the one before as Helm coalesces them (maps merged key by key,
recursively; a list or a scalar replaces what it overrides; ``null`` removes a key, so the
template sees it unset), so a values file holds only what it changes.

Usage: ``python deploy/helm/render.py [--values FILE ...] [--release NAME] [--set path=value
...] [--out FILE]`` (default: the chart's values, release ``tritium``, to stdout). The
manifests name no namespace (``kubectl apply -n NS`` or kustomize's ``namespace:`` picks it).
Needs PyYAML.
"""

from __future__ import annotations

import argparse
import copy
import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

CHART = Path(__file__).resolve().parent / "tritium"
RENDERED = Path(__file__).resolve().parents[1] / "kubernetes" / "tritium.yaml"
_ACTION = re.compile(r"\{\{(-?)\s*(.*?)\s*(-?)\}\}", re.S)


class TemplateError(ValueError):
    pass


@dataclass
class Node:
    kind: str  # "text", "expr", "if", "range"
    value: str = ""
    body: list[Node] = field(default_factory=list)
    orelse: list[Node] = field(default_factory=list)


def _tokens(text: str) -> list[tuple[str, str]]:
    """("text", ...) and ("action", ...) pieces, whitespace trimmed as the dashes say."""
    pieces: list[tuple[str, str]] = []
    at = 0
    trim_next = False
    for match in _ACTION.finditer(text):
        before = text[at : match.start()]
        if trim_next:
            before = before.lstrip()
        if match.group(1):
            before = before.rstrip()
        pieces.append(("text", before))
        pieces.append(("action", match.group(2)))
        trim_next = bool(match.group(3))
        at = match.end()
    rest = text[at:]
    pieces.append(("text", rest.lstrip() if trim_next else rest))
    return pieces


def parse(text: str) -> list[Node]:
    root: list[Node] = []
    stack: list[tuple[Node | None, list[Node]]] = [(None, root)]
    for kind, value in _tokens(text):
        block, into = stack[-1]
        if kind == "text":
            into.append(Node("text", value))
        elif value.startswith(("if ", "range ")):
            word, _, expr = value.partition(" ")
            node = Node(word, expr)
            into.append(node)
            stack.append((node, node.body))
        elif value == "else":
            if block is None or block.kind != "if":
                raise TemplateError("else outside an if")
            stack[-1] = (block, block.orelse)
        elif value == "end":
            if block is None:
                raise TemplateError("end without a block")
            stack.pop()
        elif value.startswith("/*"):
            continue  # a comment
        else:
            into.append(Node("expr", value))
    if len(stack) != 1:
        raise TemplateError("a block is not closed")
    return root


@dataclass
class Context:
    values: dict[str, Any]
    release: dict[str, str]
    chart: dict[str, str]
    dot: Any = None


def _lookup(path: str, context: Context) -> Any:
    if path == ".":
        return context.dot
    parts = path.split(".")[1:]
    roots = {"Values": context.values, "Release": context.release, "Chart": context.chart}
    if parts[0] not in roots:
        raise TemplateError(f"unknown value {path}")
    current: Any = roots[parts[0]]
    for part in parts[1:]:
        if not isinstance(current, dict) or part not in current:
            raise TemplateError(f"{path}: no {part!r}")
        current = current[part]
    return current


def _atom(word: str, context: Context) -> Any:
    if word.startswith("."):
        return _lookup(word, context)
    if word.startswith('"'):
        return shlex.split(word)[0]
    if re.fullmatch(r"-?\d+", word):
        return int(word)
    raise TemplateError(f"unsupported term {word!r}")


def _to_yaml(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=False, sort_keys=False).rstrip("\n")


_FUNCTIONS = ("quote", "toYaml", "nindent", "indent")


def _apply(function: str, args: list[Any], value: Any) -> Any:
    if function == "quote":
        return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'
    if function == "toYaml":
        return _to_yaml(value)
    if function in ("nindent", "indent"):
        pad = " " * int(args[0])
        lines = str(value).split("\n")
        text = "\n".join(pad + line if line else line for line in lines)
        return "\n" + text if function == "nindent" else text
    raise TemplateError(f"unsupported function {function!r}")


def evaluate(expr: str, context: Context) -> Any:
    stages = [stage.split() for stage in expr.split("|")]
    first = stages[0]
    if first[0] == "not":
        value: Any = not _truthy(_atom(first[1], context))
    elif len(first) == 1:
        value = _atom(first[0], context)
    elif first[0] in _FUNCTIONS:  # a call: the last argument is the value
        args = [_atom(a, context) for a in first[1:]]
        value = _apply(first[0], args[:-1], args[-1])
    else:
        raise TemplateError(f"unsupported expression {expr!r}")
    for function, *args in stages[1:]:
        value = _apply(function, [_atom(a, context) for a in args], value)
    return value


def _truthy(value: Any) -> bool:
    return bool(value)


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        raise TemplateError("a map or list needs toYaml")
    return str(value)


def execute(nodes: list[Node], context: Context) -> str:
    out: list[str] = []
    for node in nodes:
        if node.kind == "text":
            out.append(node.value)
        elif node.kind == "expr":
            out.append(_scalar(evaluate(node.value, context)))
        elif node.kind == "if":
            chosen = node.body if _truthy(evaluate(node.value, context)) else node.orelse
            out.append(execute(chosen, context))
        else:  # range
            for item in evaluate(node.value, context) or []:
                inner = Context(context.values, context.release, context.chart, item)
                out.append(execute(node.body, inner))
    return "".join(out)


def merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """``override`` over ``base`` as Helm coalesces values: a map over a map merges key by
    key (recursively); anything else replaces (a list is never merged); ``None`` (YAML's
    ``null``) removes the key. Neither argument is changed."""
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = _without_nulls(value)
    return merged


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    return copy.deepcopy(value)


def _assignment(assignment: str) -> dict[str, Any]:
    """``a.b.c=VALUE`` (``--set``) as the values ``{a: {b: {c: VALUE}}}``, VALUE read as YAML."""
    path, equals, text = assignment.partition("=")
    if not equals or not path:
        raise TemplateError(f"--set {assignment!r}: expected path=value")
    value: Any = yaml.safe_load(text)
    for part in reversed(path.split(".")):
        value = {part: value}
    return dict(value)


def default_values() -> dict[str, Any]:
    return dict(yaml.safe_load((CHART / "values.yaml").read_text()))


def chart_values(files: list[Path], assignments: list[str]) -> dict[str, Any]:
    """The values Helm gives the templates: the chart's defaults, then each values file, then
    each ``--set``, in that order."""
    values = default_values()
    for path in files:
        values = merge(values, yaml.safe_load(path.read_text()) or {})
    for assignment in assignments:
        values = merge(values, _assignment(assignment))
    return values


def render(
    values: dict[str, Any] | None = None, release: str = "tritium", namespace: str = "default"
) -> str:
    """Every template of the chart, in name order, as one multi-document YAML stream; a
    template that renders to nothing is left out. ``values``: all of them, as Helm gives them
    to the templates (``chart_values``); the chart's defaults when None."""
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    if values is None:
        values = default_values()
    context = Context(
        values,
        {"Name": release, "Namespace": namespace},
        {"Name": chart["name"], "AppVersion": str(chart["appVersion"])},
    )
    documents = []
    for template in sorted((CHART / "templates").glob("*.yaml")):
        text = execute(parse(template.read_text()), context).strip()
        if text:
            documents.append(f"# Source: tritium/templates/{template.name}\n{text}\n")
    return "---\n" + "---\n".join(documents)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "-f",
        "--values",
        type=Path,
        action="append",
        default=[],
        metavar="FILE",
        help="a values file merged over the chart's (repeatable, later files win)",
    )
    parser.add_argument("--release", default="tritium")
    parser.add_argument("--set", action="append", default=[], metavar="PATH=VALUE")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    text = render(chart_values(args.values, args.set), args.release)
    if args.out:
        args.out.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
