"""``tritium serve``'s argparse parser, built from the flag definitions (``table.py``).

``add_flags`` puts every flag on the parser under its Triton group (argument groups, in
Triton's group order, so ``--help`` reads as ``tritonserver --help`` does): an implemented
flag as its ``Arg`` says, every other one (GPU-only, tuning, built-in, refused, not-yet) with
Triton's value syntax checked as Triton checks it; ``check_table_flags`` turns what was given
of the latter into refusals (``SystemExit`` with the reason) and notices (log lines for
start-up: a warning for GPU-only and built-in ones, a verbose line for tuning ones).
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import fields
from typing import Any

from ...options import ServerOptions
from .spec import FROM_OPTIONS, Arg, Combine, Decision, Flag, Into, Notice, Style
from .table import FLAGS, GROUPS
from .values import PLAIN, TRITON_SYNTAX

__all__ = ["Notice", "add_flags", "check_table_flags", "option_default", "parser_flags"]

_DEST_PREFIX = "table_"


def add_flags(parser: argparse.ArgumentParser) -> None:
    """Every flag of ``FLAGS`` on the parser, each under its group."""
    groups = {name: parser.add_argument_group(name) for name in GROUPS}
    for flag in FLAGS:
        group = groups[flag.group]
        if flag.alias_of:
            continue  # an option string of the flag it spells
        if flag.decision is Decision.IMPLEMENTED:
            _add_implemented(group, flag)
        else:
            _add_table_flag(group, flag)


def _add_implemented(group: argparse._ArgumentGroup, flag: Flag) -> None:
    if flag.arg is None or flag.to is None:
        raise TypeError(f"--{flag.name} is implemented: it needs an arg and a target")
    aliases = [other.option for other in FLAGS if other.alias_of == flag.name]
    group.add_argument(
        flag.option, *aliases, dest=flag.dest, help=flag.help or None, **_keywords(flag, flag.arg)
    )


def _keywords(flag: Flag, arg: Arg) -> dict[str, Any]:
    """``add_argument``'s keywords for the flag's ``Arg``."""
    extra: dict[str, Any] = {"required": arg.required} if arg.required else {}
    if arg.choices is not None:
        extra["choices"] = arg.choices
    if arg.metavar is not None:
        extra["metavar"] = arg.metavar
    if arg.style is Style.PRESENT:
        return {"action": "store_true", **extra}
    parse = arg.parse or PLAIN.get(flag.value)
    if parse is not None:
        extra["type"] = parse
    if arg.style is Style.REPEAT:
        return {"action": "append", "default": [], **extra}
    if arg.style is Style.BOOL:
        extra.update(nargs="?", const=True)  # --flag alone: true
    return {"default": _default(flag, arg), **extra}


def _default(flag: Flag, arg: Arg) -> Any:
    """The flag's default: its own, or its target field's in ``ServerOptions()``."""
    if arg.default is not FROM_OPTIONS:
        return arg.default
    target = flag.to
    if isinstance(target, Combine) or target is None:
        raise TypeError(f"--{flag.name}: a Combine target needs a default")
    path = target.path if isinstance(target, Into) else target
    return option_default(path)


def option_default(path: str) -> Any:
    """The default of a ``ServerOptions`` field given by its dotted path."""
    value: Any = ServerOptions()
    for name in path.split("."):
        if name not in {field.name for field in fields(value)}:
            raise TypeError(f"ServerOptions has no field {path!r}")
        value = getattr(value, name)
    return value


def _dest(flag: Flag) -> str:
    return _DEST_PREFIX + flag.name.replace("-", "_")


def _add_table_flag(group: argparse._ArgumentGroup, flag: Flag) -> None:
    """A flag tritium does not implement. It keeps every value given (repeatable, as Triton's
    are) and is absent from the namespace unless given."""
    extra: dict[str, Any] = {}
    if flag.value == "boolean":
        extra = {"nargs": "?", "const": True}
    # A flag not implemented yet is refused as such, whatever its value says.
    kind = str if flag.decision is Decision.NOT_YET else TRITON_SYNTAX[flag.value]
    group.add_argument(
        flag.option,
        dest=_dest(flag),
        type=kind,
        action="append",
        default=argparse.SUPPRESS,
        metavar=f"<{flag.value}>",
        help=f"{flag.help} [{flag.decision.value}: {flag.reason}]",
        **extra,
    )


def check_table_flags(args: argparse.Namespace) -> list[Notice]:
    """Refuse (``SystemExit``) what tritium does not do; the notices to log for the rest."""
    notices: list[Notice] = []
    for flag in FLAGS:
        if flag.decision is Decision.IMPLEMENTED:
            continue
        values = getattr(args, _dest(flag), None)
        if values is None:
            continue
        last = values[-1]
        shown = f"--{flag.name}={str(last).lower() if isinstance(last, bool) else last}"
        decision = flag.decision
        if decision is Decision.NOT_YET:
            raise SystemExit(f"error: --{flag.name} is not implemented yet in tritium")
        if decision is Decision.REFUSED:
            if flag.value == "boolean" and not any(values):
                continue  # "no such front-end" is what tritium does
            raise SystemExit(f"error: {shown}: {flag.reason}")
        _check_value(flag, values)
        if decision in (Decision.GPU_ONLY, Decision.BUILT_IN):
            notices.append(Notice(logging.WARNING, f"{shown}: {flag.reason}"))
        elif decision is Decision.TUNING:
            notices.append(Notice(logging.DEBUG, f"{shown} accepted: {flag.reason}"))
    return notices


def _check_value(flag: Flag, values: list[Any]) -> None:
    """Triton's own range checks of the flags tritium accepts without acting on them."""
    if flag.name == "grpc-infer-thread-count" and not all(2 <= v <= 128 for v in values):
        raise SystemExit(
            "error: invalid argument for --grpc_infer_thread_count. Must be in the range 2 to 128."
        )
    if flag.name == "grpc-max-response-pool-size" and not all(v > 0 for v in values):
        raise SystemExit("error: --grpc-max-response-pool-size must be greater than 0.")


def parser_flags(parser: argparse.ArgumentParser) -> set[str]:
    """Every long flag the parser defines, without '--' (for the tests)."""
    return {
        option.removeprefix("--")
        for option in parser._option_string_actions
        if option.startswith("--") and option != "--help"
    }
