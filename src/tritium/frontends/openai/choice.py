"""One choice of a completion as its responses arrive: the text each response adds (cut at a
stop sequence the server applies itself), its token counts and its finish reason. Pure: no
I/O, no loop."""

from __future__ import annotations

from typing import Final

from ...types import DataType, InferenceResponse, Tensor

_REASONS: Final = frozenset(("stop", "length", "content_filter", "tool_calls"))


class Choice:
    """``feed`` each response in turn, then ``end``; ``done`` once a stop sequence was met
    (later responses are not read)."""

    __slots__ = (
        "index",
        "done",
        "finish",
        "prompt_tokens",
        "completion_tokens",
        "_stops",
        "_held",
        "_max_tokens",
        "_prefix",
        "_cut",
    )

    def __init__(
        self, index: int, stops: tuple[str, ...], max_tokens: int | None, prefix: str = ""
    ) -> None:
        self.index = index
        self.done = False
        self.finish: str | None = None  # the model's own finish reason, or the server's stop
        self.prompt_tokens: int | None = None
        self.completion_tokens = 0
        self._stops = stops  # empty: the model applies them (or none were asked)
        self._held = ""  # text that may begin a stop sequence, held back until it is known
        self._max_tokens = max_tokens
        self._prefix = prefix  # echo applied by the server: sent before the first text
        self._cut = False  # a stop sequence ended the text

    def feed(self, response: InferenceResponse) -> str:
        """The text this response adds (to send now)."""
        prefix, self._prefix = self._prefix, ""
        text = ""
        for tensor in response.outputs:
            name = tensor.name
            if name == "text_output":
                text += _text(tensor)
            elif name == "num_input_tokens":
                if self.prompt_tokens is None:
                    self.prompt_tokens = _count(tensor)
            elif name == "num_output_tokens":
                self.completion_tokens += _count(tensor)
            elif name == "finish_reason":
                reason = _text(tensor)
                if reason:
                    self.finish = reason if reason in _REASONS else "stop"
        return prefix + (self._scan(text) if self._stops else text)

    def end(self) -> str:
        """The text still held when the model's responses end."""
        text, self._held = self._prefix + self._held, ""
        self._prefix = ""
        self.done = True
        return text

    def stopped(self) -> bool:
        """Whether a stop sequence ended the text (its model's request is not needed)."""
        return self._cut

    def finish_reason(self) -> str:
        if self.finish is not None:
            return self.finish
        limit = self._max_tokens
        if limit is not None and self.completion_tokens >= limit:
            return "length"
        return "stop"

    def _scan(self, text: str) -> str:
        buffer = self._held + text
        cut = -1
        for stop in self._stops:
            at = buffer.find(stop)
            if at != -1 and (cut == -1 or at < cut):
                cut = at
        if cut != -1:
            self._held = ""
            self.done = self._cut = True
            self.finish = "stop"
            return buffer[:cut]
        keep = 0
        for stop in self._stops:
            for k in range(min(len(stop) - 1, len(buffer)), keep, -1):
                if buffer.endswith(stop[:k]):
                    keep = k
                    break
        self._held = buffer[len(buffer) - keep :] if keep else ""
        return buffer[: len(buffer) - keep]


def _text(tensor: Tensor) -> str:
    if tensor.datatype is not DataType.BYTES:
        return ""
    flat = tensor.data.reshape(-1)
    if flat.size == 1:  # the usual answer: one string
        one = flat[0]
        return one.decode("utf-8", "replace") if isinstance(one, bytes) else str(one)
    return "".join(v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in flat)


def _count(tensor: Tensor) -> int:
    flat = tensor.data.reshape(-1)
    if tensor.datatype is DataType.BYTES or flat.size == 0:
        return 0
    return int(flat[0])
