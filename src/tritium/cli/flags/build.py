"""``ServerOptions`` from the parsed command line: each flag definition's target
(``table.py``) says where its value goes."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from ...options import ServerOptions
from .parser import check_table_flags
from .spec import Combine, Flag, Into, Style, Target
from .table import FLAGS


def options_from_args(args: argparse.Namespace) -> ServerOptions:
    """``SystemExit`` with the message for a refused flag or a bad value."""
    check_table_flags(args)
    values: dict[str, Any] = {}
    for flag, target in _targets():
        values.update(_fields(flag, target, args))
    options: ServerOptions = assemble(ServerOptions(), values)
    return options


def _targets() -> Iterator[tuple[Flag, Target]]:
    """Each implemented flag's target, in the table's order; a ``Combine`` once, at the first
    flag that names it."""
    seen: set[int] = set()
    for flag in FLAGS:
        target = flag.to
        if target is None or id(target) in seen:
            continue
        seen.add(id(target))
        yield flag, target


def _fields(flag: Flag, target: Target, args: argparse.Namespace) -> dict[str, Any]:
    """{field path: value} of one target."""
    if isinstance(target, Combine):
        return target.build(args)
    value = getattr(args, flag.dest)
    if isinstance(target, Into):
        return {target.path: target.convert(value)}
    if flag.arg is not None and flag.arg.style is Style.REPEAT:
        value = tuple(value)
    return {target: value}


def assemble(base: Any, values: dict[str, Any]) -> Any:
    """``base`` (a frozen dataclass) with the values of ``values``' dotted field paths
    (``"http.cors.max_age_secs"``), nested groups rebuilt with ``replace``."""
    groups: dict[str, dict[str, Any]] = {}
    top: dict[str, Any] = {}
    for path, value in values.items():
        head, _, rest = path.partition(".")
        if rest:
            groups.setdefault(head, {})[rest] = value
        else:
            top[head] = value
    for head, inner in groups.items():
        top[head] = assemble(getattr(base, head), inner)
    return replace(base, **top)
