"""The flag table on ``tritium serve``'s argparse parser.

``add_table_flags`` defines every flag of the table that no ``cli.py`` function defined (the
GPU-only, tuning, built-in, refused and not-yet ones), with Triton's value syntax checked as
Triton checks it; ``check_table_flags`` turns what was given into refusals (``SystemExit`` with
the reason) and notices (log lines for start-up: a warning for GPU-only and built-in ones, a
verbose line for tuning ones); ``group_help`` files every flag under its Triton group so
``--help`` reads as ``tritonserver --help`` does.
"""

from __future__ import annotations

import argparse
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .table import BY_NAME, FLAGS, GROUPS, Decision, Flag

_DEST_PREFIX = "table_"


@dataclass(frozen=True, slots=True)
class Notice:
    """A log line for start-up: ``level`` is a ``logging`` level."""

    level: int
    message: str


def non_negative_int(text: str) -> int:
    """An integer >= 0 (counts, sizes, timeouts)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got '{text}'")
    return value


def bool_flag(
    parser: argparse.ArgumentParser, name: str, default: bool, help_text: str
) -> None:
    """A Triton boolean flag: ``--flag`` (true), ``--flag=true|false`` (and 1/0, yes/no)."""
    parser.add_argument(
        name, type=parse_bool, nargs="?", const=True, default=default, help=help_text
    )


def parse_bool(text: str) -> bool:
    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got '{text}'")


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got '{text}'") from None


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got '{text}'") from None


def _pattern(syntax: str, regex: str) -> Callable[[str], str]:
    compiled = re.compile(regex)

    def parse(text: str) -> str:
        if compiled.fullmatch(text) is None:
            raise argparse.ArgumentTypeError(f"expected {syntax}, got '{text}'")
        return text

    return parse


_INTEGER = r"-?[0-9]+"
_PARSERS: dict[str, Callable[[str], Any]] = {
    "boolean": parse_bool,
    "integer": _int,
    "float": _float,
    "string": str,
    "<integer>:<integer>": _pattern("<integer>:<integer>", f"{_INTEGER}:{_INTEGER}"),
    "<integer>-<integer>": _pattern("<integer>-<integer>", f"{_INTEGER}-{_INTEGER}"),
    "<device_id>:<fraction>": _pattern(
        "<device_id>:<fraction>", rf"{_INTEGER}:[0-9]*\.?[0-9]+(e-?[0-9]+)?"
    ),
    "<string>,<string>=<string>": _pattern("<name>,<setting>=<value>", r"[^,=]+,[^=]+=.+"),
    "<string>=<string>": _pattern("<setting>=<value>", r"[^,=]+=.+"),
    "<string>:<integer>:<integer>": _pattern(
        "<name>:<count>[:<device>]", rf"[^:]+:{_INTEGER}(:{_INTEGER})?"
    ),
}


def _dest(flag: Flag) -> str:
    return _DEST_PREFIX + flag.name.replace("-", "_")


def add_table_flags(parser: argparse.ArgumentParser) -> None:
    """Define the table's flags that the parser does not define yet. Each keeps every value
    given (repeatable, as Triton's are) and is absent from the namespace unless given."""
    for flag in FLAGS:
        option = "--" + flag.name
        if option in parser._option_string_actions:  # defined by its own cli.py function
            continue
        extra: dict[str, Any] = {}
        if flag.value == "boolean":
            extra = {"nargs": "?", "const": True}
        # A flag not implemented yet is refused as such, whatever its value says.
        kind = str if flag.decision is Decision.NOT_YET else _PARSERS[flag.value]
        parser.add_argument(
            option,
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


def group_help(parser: argparse.ArgumentParser) -> None:
    """File every table flag under its Triton group (argparse argument groups), in Triton's
    group order; what the table does not name stays under the parser's own options."""
    groups = {name: parser.add_argument_group(name) for name in GROUPS}
    general = parser._optionals
    for action in list(general._group_actions):
        flag = _flag_of(action)
        if flag is None:
            continue
        general._group_actions.remove(action)
        groups[flag.group]._group_actions.append(action)
        if action.help is None:
            action.help = flag.help


def _flag_of(action: argparse.Action) -> Flag | None:
    for option in action.option_strings:
        flag = BY_NAME.get(option.removeprefix("--"))
        if flag is not None:
            return flag
    return None


def parser_flags(parser: argparse.ArgumentParser) -> set[str]:
    """Every long flag the parser defines, without '--' (for the tests)."""
    return {
        option.removeprefix("--")
        for option in parser._option_string_actions
        if option.startswith("--") and option != "--help"
    }
