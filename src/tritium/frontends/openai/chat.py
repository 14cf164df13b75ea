"""A chat's messages as one prompt, by the model's chat template.

A model's config may give its template as two ``parameters``: ``chat_template``, the text of
one message, where ``{role}`` and ``{content}`` stand for the message's role and content
(``{{`` and ``}}`` for braces), written once per message; and ``chat_generation_prompt``, the
text after the last message that opens the model's turn. Only those two fields are read: a
template with any other field, a format spec or a conversion is refused when a chat request
reaches the model (the file is never executed, nothing is downloaded). Without them, the
default: one line ``role: content`` per message, then ``assistant:``."""

from __future__ import annotations

from dataclasses import dataclass
from string import Formatter
from typing import Any, Final

TEMPLATE_KEY: Final = "chat_template"
PROMPT_KEY: Final = "chat_generation_prompt"
_FIELDS: Final = frozenset(("role", "content"))


@dataclass(frozen=True, slots=True)
class Message:
    role: str
    content: str


@dataclass(frozen=True, slots=True)
class ChatTemplate:
    """One message's text (with ``{role}`` and ``{content}``) and the generation prompt."""

    message: str = "{role}: {content}\n"
    generation: str = "assistant:"

    def render(self, messages: tuple[Message, ...]) -> str:
        parts = [self.message.format(role=m.role, content=m.content) for m in messages]
        parts.append(self.generation)
        return "".join(parts)


DEFAULT_TEMPLATE: Final = ChatTemplate()


def template_of(parameters: dict[str, Any]) -> ChatTemplate | str:
    """A model's chat template from its config's ``parameters`` (the default when it gives
    none), or why the one it gives cannot be used."""
    message = _string(parameters, TEMPLATE_KEY)
    generation = _string(parameters, PROMPT_KEY)
    if message is None and generation is None:
        return DEFAULT_TEMPLATE
    if message is None or generation is None:
        return f"its config gives '{TEMPLATE_KEY}' or '{PROMPT_KEY}' without the other"
    try:
        fields = [(name, spec, conv) for _, name, spec, conv in Formatter().parse(message)]
    except ValueError as exc:
        return f"its '{TEMPLATE_KEY}' is not a valid template: {exc}"
    for name, spec, conv in fields:
        if name is None:
            continue
        if name not in _FIELDS or spec or conv:
            return f"its '{TEMPLATE_KEY}' may use only {{role}} and {{content}}, not {{{name}}}"
    return ChatTemplate(message, generation)


def _string(parameters: dict[str, Any], key: str) -> str | None:
    value = parameters.get(key)
    if not isinstance(value, dict):
        return None
    text = value.get("string_value")
    return text if isinstance(text, str) else None
