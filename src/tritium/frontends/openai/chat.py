"""A chat's messages as one prompt. The default template (a model without its own) writes a
line ``role: content`` per message and ends with ``assistant:``, the turn the model is to
write."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Message:
    role: str
    content: str


def render_prompt(messages: list[Message]) -> str:
    lines = [f"{m.role}: {m.content}" for m in messages]
    lines.append("assistant:")
    return "\n".join(lines)
