"""A budget of log lines for events a client can cause at will (a connection closed for
sending no preface, a stalled stream reset, a call ended at a connection's bound): at most
``burst`` lines per ``window`` seconds for one kind of event, whoever causes it, so a client
cannot grow the server log by repeating it. The first line written after some were left out
says how many. Pure: times are passed in."""

from __future__ import annotations

LINES_PER_WINDOW = 10
WINDOW_SECONDS = 60.0


class LineBudget:
    """Which of one kind of event get a log line."""

    __slots__ = ("burst", "window", "_start", "_written", "_left_out")

    def __init__(self, burst: int = LINES_PER_WINDOW, window: float = WINDOW_SECONDS) -> None:
        self.burst = burst
        self.window = window
        self._start = float("-inf")
        self._written = 0
        self._left_out = 0

    def admit(self, now: float) -> int | None:
        """None: write no line for this event. Else write one, and the count returned is how
        many events of this kind got none since the last line written (0: none left out)."""
        if now - self._start >= self.window:
            self._start, self._written = now, 0
        if self._written >= self.burst:
            self._left_out += 1
            return None
        self._written += 1
        left_out, self._left_out = self._left_out, 0
        return left_out


def left_out_text(count: int) -> str:
    """The suffix of a line written after ``count`` of its kind got none."""
    return f" ({count} more like this not logged)" if count else ""
