"""``python -m tritium.cli.flags``: print docs/flags.md."""

from . import markdown

print(markdown(), end="")
