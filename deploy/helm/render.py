"""Render deploy/helm/tritium without Helm: the plain manifests in deploy/kubernetes/.

The chart's templates use a small subset of Helm's template language, and this script
implements exactly that subset (anything else is an error, so the chart cannot drift into
syntax rendered here differently from Helm):

- actions ``{{ ... }}``, with ``{{-`` / ``-}}`` trimming the whitespace before / after;
- values: ``.Values.a.b``, ``.Release.Name``, ``.Release.Namespace``, ``.Chart.Name``,
  ``.Chart.AppVersion``, ``.`` (the item inside ``range``), integers and "strings";
- functions: ``not X``, and in pipelines ``quote``, ``toYaml``, ``nindent N``, ``indent N``;
- blocks: ``if X`` / ``else`` / ``end`` and ``range X`` / ``end``.

Usage: ``python deploy/helm/render.py [--values FILE] [--release NAME] [--namespace NS]
[--set path=value ...] [--out FILE]`` (default: the chart's values, release ``tritium`` in
``default``, to stdout). Needs PyYAML.
"""

from __future__ import annotations

import argparse
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


def _set(values: dict[str, Any], assignment: str) -> None:
    path, _, text = assignment.partition("=")
    *parents, last = path.split(".")
    current = values
    for part in parents:
        current = current[part]
    current[last] = yaml.safe_load(text)


def render(
    values: dict[str, Any] | None = None, release: str = "tritium", namespace: str = "default"
) -> str:
    """Every template of the chart, in name order, as one multi-document YAML stream; a
    template that renders to nothing is left out."""
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    if values is None:
        values = yaml.safe_load((CHART / "values.yaml").read_text())
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
    parser.add_argument("--values", type=Path, default=CHART / "values.yaml")
    parser.add_argument("--release", default="tritium")
    parser.add_argument("--namespace", default="default")
    parser.add_argument("--set", action="append", default=[], metavar="PATH=VALUE")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    values = yaml.safe_load(args.values.read_text())
    for assignment in args.set:
        _set(values, assignment)
    text = render(values, args.release, args.namespace)
    if args.out:
        args.out.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
