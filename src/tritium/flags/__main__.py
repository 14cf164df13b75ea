"""``python -m tritium.flags``: print docs/flags.md."""

from . import markdown

print(markdown(), end="")
