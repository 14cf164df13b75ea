"""The records a flag definition is made of (``table.py:FLAGS`` holds one ``Flag`` each).

A ``Flag`` says what the docs table shows (group, value syntax, decision, reason), how the
parser reads it (``Arg``, implemented flags only) and where its value goes in
``ServerOptions`` (``to``: a field path, an ``Into`` that converts the value first, or a
``Combine`` that several flags share because their values are read together).
"""

from __future__ import annotations

import argparse
import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


class Decision(enum.Enum):
    IMPLEMENTED = "implemented"
    TUNING = "accepted: tuning only"
    GPU_ONLY = "GPU only"
    BUILT_IN = "accepted: built in"
    REFUSED = "refused"
    NOT_YET = "not implemented yet"


@dataclass(frozen=True, slots=True)
class Notice:
    """A log line for start-up: ``level`` is a ``logging`` level."""

    level: int
    message: str


class Style(enum.Enum):
    """How a flag's values are written on the command line."""

    VALUE = "value"  # --flag V or --flag=V; the last one given wins
    BOOL = "bool"  # Triton's boolean: --flag (true), --flag=true|false (and 1/0, yes/no)
    PRESENT = "present"  # --flag, no value: true when given
    REPEAT = "repeat"  # --flag V, repeatable: every value, in order (a list)


class _FromOptions:
    def __repr__(self) -> str:
        return "FROM_OPTIONS"


FROM_OPTIONS: Any = _FromOptions()  # the default of the target field of ServerOptions()


@dataclass(frozen=True, slots=True)
class Arg:
    """How the parser reads an implemented flag (``argparse`` ``add_argument``)."""

    style: Style = Style.VALUE
    parse: Callable[[str], Any] | None = None  # None: from the value syntax (int, float, str)
    default: Any = FROM_OPTIONS  # REPEAT: always []
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    required: bool = False


@dataclass(frozen=True, slots=True)
class Into:
    """The flag's value, converted (or checked: ``SystemExit`` with the message), goes to
    ``path``."""

    path: str
    convert: Callable[[Any], Any]


@dataclass(frozen=True, slots=True, eq=False)
class Combine:
    """Options fields computed from several flags together (``build`` reads the argparse
    namespace and returns {field path: value}; ``SystemExit`` with the message for a bad
    value or combination). Every flag it reads names this same object as its ``to``; it
    runs once, at the first of them."""

    build: Callable[[argparse.Namespace], dict[str, Any]]


Target = str | Into | Combine  # a str is a field path: the value goes there as parsed


@dataclass(frozen=True, slots=True)
class Flag:
    name: str  # without the leading '--'
    group: str  # Triton's option group
    value: str  # Triton's value syntax ('' for a flag without a value)
    decision: Decision
    reason: str  # the docs table's "Why"
    help: str = ""  # the --help text
    triton: bool = True  # False: tritium's own flag
    owner: str = ""  # NOT_YET: the piece of work that implements it
    arg: Arg | None = None  # IMPLEMENTED: how the parser reads it
    to: Target | None = None  # IMPLEMENTED: where its value goes in ServerOptions
    alias_of: str = ""  # another spelling of that flag (same value, same target)

    @property
    def option(self) -> str:
        return "--" + self.name

    @property
    def dest(self) -> str:
        """The argparse attribute of an implemented flag's value."""
        return (self.alias_of or self.name).replace("-", "_")
