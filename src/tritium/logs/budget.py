"""A budget of log lines for events a client can cause at will (a connection closed for
sending no preface, a stalled stream reset, a call ended at a connection's bound): at most
``burst`` lines per ``window`` seconds for one kind of event, whoever causes it, so a client
cannot grow the server log by repeating it. The first line written after some were left out
says how many. Pure: times are passed in. ``ErrorDigest``: the same for unexpected errors
(500 / INTERNAL), one traceback per kind of error and window."""

from __future__ import annotations

import logging
import time

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


_OTHER_KIND = ("", "", 0)  # the kinds past ErrorDigest's table share this one


class ErrorDigest:
    """Unexpected errors (a bug, answered 500 / INTERNAL) that a client may cause again and
    again: the first of each kind (its exception type and the line that raised it) is logged
    with its traceback; later ones of that kind within ``window`` seconds of the last one
    logged are only counted, and the next one logged says how many there were. At most
    ``kinds`` kinds are told apart (any further kind shares one entry), so the table and the
    log stay bounded whatever clients send."""

    __slots__ = ("_log", "window", "_kinds", "_seen")

    def __init__(
        self, logger: logging.Logger, window: float = WINDOW_SECONDS, kinds: int = 64
    ) -> None:
        self._log = logger
        self.window = window
        self._kinds = kinds
        self._seen: dict[tuple[str, str, int], _Seen] = {}

    def report(self, what: str, exc: BaseException, now: float | None = None) -> None:
        """Log ``what`` with ``exc``'s traceback, or count it (see the class)."""
        now = time.monotonic() if now is None else now
        kind = _kind(exc)
        if kind not in self._seen and len(self._seen) >= self._kinds:
            kind = _OTHER_KIND
        seen = self._seen.get(kind)
        if seen is None:
            seen = self._seen[kind] = _Seen(now)
        elif now - seen.logged_at < self.window:
            seen.count += 1
            return
        suffix = ""
        if seen.count:
            suffix = (
                f" ({seen.count} more unexpected errors like this in the "
                f"{now - seen.logged_at:.0f} s before, not logged)"
            )
        seen.logged_at, seen.count = now, 0
        self._log.error("%s%s", what, suffix, exc_info=exc)


class _Seen:
    """One kind of unexpected error: when it was last logged, how many were not since."""

    __slots__ = ("logged_at", "count")

    def __init__(self, logged_at: float) -> None:
        self.logged_at = logged_at
        self.count = 0


def _kind(exc: BaseException) -> tuple[str, str, int]:
    """An exception's type and where it was raised (the innermost frame of its traceback)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return type(exc).__qualname__, "", 0
    return type(exc).__qualname__, tb.tb_frame.f_code.co_filename, tb.tb_lineno


# The one digest of the server's unexpected errors: every front-end's 500 / INTERNAL.
UNEXPECTED_ERRORS = ErrorDigest(logging.getLogger("tritium"))
