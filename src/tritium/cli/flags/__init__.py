"""Every ``tritonserver`` flag and tritium's own, one definition each (``table.py``), with its
decision; the parser (``parser.py``), ``ServerOptions`` (``build.py``) and ``docs/flags.md``
(``markdown()``, ``python -m tritium.cli.flags``) are made from the definitions."""

from __future__ import annotations

from .backend_config import SETTINGS
from .table import FLAGS, GROUPS, Decision, Flag

__all__ = ["FLAGS", "GROUPS", "Decision", "Flag", "markdown"]

_HEAD = """# Flags

Generated from `src/tritium/cli/flags/table.py` by `python -m tritium.cli.flags`; a unit test keeps
this page equal to it. Every flag of `tritonserver --help` (Triton's
`src/command_line_parser.cc`) is listed under Triton's group, with tritium's decision:

- **implemented**: it does what it does in Triton;
- **accepted: tuning only**: in Triton it only sizes a pool or a thread count that tritium
  does not have; accepted, logged once at `--log-verbose=1`;
- **GPU only**: accepted, one warning at start says it has no effect without a GPU;
- **accepted: built in**: a directory of shared libraries (backends, repository agents) that
  tritium has built in; accepted so Triton's command lines start, one warning at start says the
  directory is not read;
- **refused**: the server does not start, and says why;
- **not implemented yet**: refused with "not implemented yet in tritium" until the work that
  owns it lands.

Flags marked *(tritium)* are tritium's own; Triton has no such flag. Boolean flags take
`--flag=true|false` (a bare `--flag` means true).
"""


def markdown() -> str:
    lines = [_HEAD]
    for group in GROUPS:
        members = [f for f in FLAGS if f.group == group]
        if not members:
            continue
        lines += [f"## {group}", "", "| Flag | Value | tritium | Why |", "|---|---|---|---|"]
        for flag in members:
            name = f"`--{flag.name}`" + ("" if flag.triton else " *(tritium)*")
            value = f"`{flag.value}`" if flag.value else ""
            lines.append(f"| {name} | {value} | {flag.decision.value} | {flag.reason} |")
        lines.append("")
    lines += [
        "## `--backend-config` settings",
        "",
        "| Backend | Setting | tritium | Why |",
        "|---|---|---|---|",
    ]
    for (backend, setting), (decision, reason) in SETTINGS.items():
        lines.append(f"| {backend or '(all)'} | `{setting}` | {decision.value} | {reason} |")
    lines.append("")
    lines.append("Any other setting, or a backend tritium does not serve, is refused at start.")
    return "\n".join(lines) + "\n"
