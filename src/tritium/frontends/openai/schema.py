"""An OpenAI request body read and checked, once: ``/v1/completions`` and
``/v1/chat/completions`` become one ``Generation`` (a prompt and the sampling settings), or an
``OpenAIError`` naming the parameter at fault.

Every key is known: one this server implements is checked (type, range); one it cannot honour
is refused with ``unsupported_parameter`` (a ``null`` value, or the value that means "off",
is the same as leaving it out); any other key is refused as OpenAI refuses it
("Unrecognized request argument supplied"). Whether a *model* can honour a setting is decided
later, by its request format (formats.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import orjson

from .chat import Message
from .errors import OpenAIError, invalid_value, unsupported_parameter

MAX_N: Final = 16  # choices per request: each is one inference
MAX_STOP: Final = 4  # stop sequences, as OpenAI
MAX_TOKENS: Final = (1 << 31) - 1
_ROLES: Final = frozenset(("system", "developer", "user", "assistant", "tool"))

# Keys both endpoints implement, and those each adds.
_COMMON: Final = frozenset(
    (
        "model",
        "stream",
        "stream_options",
        "n",
        "stop",
        "max_tokens",
        "seed",
        "temperature",
        "top_p",
        "frequency_penalty",
        "presence_penalty",
    )
)
_COMPLETION: Final = _COMMON | {"prompt", "echo"}
_CHAT: Final = _COMMON | {"messages", "max_completion_tokens"}
# Keys accepted only with the value that leaves the feature off (anything else is refused).
_OFF: Final[dict[str, tuple[object, ...]]] = {
    "logprobs": (False, 0),
    "top_logprobs": (0,),
    "best_of": (1,),
    "suffix": ("",),
    "logit_bias": ({},),
    "tools": ([],),
    "tool_choice": ("none",),
    "parallel_tool_calls": (),
    "functions": ([],),
    "function_call": ("none",),
    "response_format": ({"type": "text"},),
    "store": (False,),
    "metadata": ({},),
    "user": (),
    "service_tier": (),
    "modalities": (["text"],),
    "audio": (),
    "prediction": (),
    "reasoning_effort": (),
    "web_search_options": (),
}


@dataclass(frozen=True, slots=True)
class Generation:
    """What one completion or chat request asks of a model (None: not given)."""

    chat: bool
    model: str
    prompt: str  # a completion's ("" for a chat: its messages, rendered by the model's template)
    stream: bool = False
    include_usage: bool = False
    n: int = 1
    stop: tuple[str, ...] = ()
    max_tokens: int | None = None
    seed: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    echo: bool = False
    messages: tuple[Message, ...] = ()


def parse_body(body: bytes | bytearray, chat: bool) -> Generation:
    """The request body as a ``Generation`` (run off the loop for a large body)."""
    doc = load_object(body)
    check_keys(doc, _CHAT if chat else _COMPLETION)
    model = model_name(doc)
    messages = _messages(doc.get("messages")) if chat else ()
    prompt = "" if chat else _prompt(doc.get("prompt"))
    stream = _bool(doc, "stream")
    return Generation(
        chat,
        model,
        prompt,
        stream,
        _include_usage(doc.get("stream_options"), stream),
        int_value(doc, "n", 1, MAX_N) or 1,
        _stop(doc.get("stop")),
        _max_tokens(doc, chat),
        int_value(doc, "seed", -(1 << 63), (1 << 64) - 1),
        _number(doc, "temperature", 0.0, 2.0),
        _number(doc, "top_p", 0.0, 1.0),
        _number(doc, "frequency_penalty", -2.0, 2.0),
        _number(doc, "presence_penalty", -2.0, 2.0),
        False if chat else _bool(doc, "echo"),
        messages,
    )


def load_object(body: bytes | bytearray) -> dict[str, Any]:
    """The body's JSON object."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise OpenAIError(f"We could not parse the JSON body of your request: {exc}") from None
    if not isinstance(doc, dict):
        raise OpenAIError("The request body must be a JSON object")
    return doc


def model_name(doc: dict[str, Any]) -> str:
    model = doc.get("model")
    if not isinstance(model, str) or not model:
        raise invalid_value("model", "'model' must be a non-empty string")
    return model


def check_keys(doc: dict[str, Any], known: frozenset[str]) -> None:
    """Every key is ``known``, null, or one of ``_OFF`` with the value that leaves it off."""
    for key, value in doc.items():
        if key in known or value is None:
            continue
        off = _OFF.get(key)
        if off is None:
            raise OpenAIError(f"Unrecognized request argument supplied: {key}", key)
        if not any(type(v) is type(value) and v == value for v in off):
            raise unsupported_parameter(key, f"'{key}' is not supported by this server")


def _prompt(value: Any) -> str:
    if isinstance(value, list) and len(value) == 1:
        value = value[0]  # one prompt, given as a list
    if not isinstance(value, str):
        raise unsupported_parameter(
            "prompt",
            "'prompt' must be one string (lists of prompts and token ids are not supported)",
        )
    if not value:
        raise invalid_value("prompt", "'prompt' must be non-empty")
    return value


def _messages(value: Any) -> tuple[Message, ...]:
    if not isinstance(value, list) or not value:
        raise invalid_value("messages", "'messages' must be a non-empty array")
    return tuple(_message(i, m) for i, m in enumerate(value))


def _message(index: int, doc: Any) -> Message:
    where = f"messages[{index}]"
    if not isinstance(doc, dict):
        raise invalid_value(where, f"'{where}' must be an object")
    role = doc.get("role")
    if role not in _ROLES:
        raise invalid_value(f"{where}.role", f"'{where}.role' must be one of {sorted(_ROLES)}")
    for key, value in doc.items():
        if key not in ("role", "content", "name") and value is not None:
            raise unsupported_parameter(f"{where}.{key}", f"'{where}.{key}' is not supported")
    return Message(role, _content(where, doc.get("content")))


def _content(where: str, content: Any) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise invalid_value(f"{where}.content", f"'{where}.content' must be a string or array")
    texts = []
    for part in content:
        if not isinstance(part, dict) or part.get("type") != "text":
            raise unsupported_parameter(f"{where}.content", "only text content parts are supported")
        text = part.get("text")
        if not isinstance(text, str):
            raise invalid_value(f"{where}.content", "a text content part needs a string 'text'")
        texts.append(text)
    return "".join(texts)


def _bool(doc: dict[str, Any], key: str) -> bool:
    value = doc.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise invalid_value(key, f"'{key}' must be a boolean")
    return value


def int_value(doc: dict[str, Any], key: str, low: int, high: int) -> int | None:
    value = doc.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise invalid_value(key, f"'{key}' must be an integer")
    if not low <= value <= high:
        raise invalid_value(key, f"'{key}' must be between {low} and {high}, got {value}")
    return value


def _number(doc: dict[str, Any], key: str, low: float, high: float) -> float | None:
    value = doc.get(key)
    if value is None:
        return None
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise invalid_value(key, f"'{key}' must be a number")
    if not low <= value <= high:
        raise invalid_value(key, f"'{key}' must be between {low:g} and {high:g}, got {value}")
    return float(value)


def _max_tokens(doc: dict[str, Any], chat: bool) -> int | None:
    if chat and doc.get("max_completion_tokens") is not None:  # max_tokens is deprecated
        return int_value(doc, "max_completion_tokens", 1, MAX_TOKENS)
    return int_value(doc, "max_tokens", 1, MAX_TOKENS)


def _stop(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise invalid_value("stop", "'stop' must be a non-empty string or array of them")
    if len(stops) > MAX_STOP:
        raise invalid_value("stop", f"'stop' takes at most {MAX_STOP} sequences")
    return tuple(stops)


def _include_usage(value: Any, stream: bool) -> bool:
    if value is None:
        return False
    if not stream:
        raise invalid_value("stream_options", "'stream_options' needs 'stream': true")
    if not isinstance(value, dict):
        raise invalid_value("stream_options", "'stream_options' must be an object")
    for key in value:
        if key != "include_usage":
            raise unsupported_parameter(f"stream_options.{key}", f"'{key}' is not supported")
    return _bool(value, "include_usage")
