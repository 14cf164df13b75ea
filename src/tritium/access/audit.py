"""The audit log (``--audit-log FILE``): one JSON object per line, appended, never buffered.

What is recorded: every control-plane action (model load/unload, shared-memory
register/unregister, trace/log setting changes) with its outcome, and requests refused by
access control, authentication or a per-client bound. Each line has ``time`` (ISO 8601,
UTC), ``protocol``, ``peer`` (``host:port``), ``identity`` (a token's name, never the token;
null without tokens), ``action``, ``target`` (a model or region name; empty for "all"),
``outcome`` (``ok``, ``error`` or ``refused``) and, unless ok, ``message`` (for a refusal,
``reason`` too). Never tensor data, headers or request bodies.

Refusals are rate-limited, since a client needs no credentials to cause them and each line
costs disk: per (protocol, client host, action, reason) at most ``REFUSED_BURST`` lines per
``REFUSED_WINDOW_S`` window (``RefusalLimiter``); the rest are counted, and when the window
ends (or the log closes) one summary line says how many: ``peer`` is the host, ``suppressed``
the count, ``message`` "N more refused requests from HOST". At most ``MAX_TRACKED`` keys
are kept at once; refusals beyond them share one key per (protocol, action, reason), whose
summary names "other clients". Control actions that were admitted (``ok``/``error``) are
always written, whatever the rate.

Each record is one ``write(2)`` on an ``O_APPEND`` descriptor, so lines from concurrent
writers never interleave and a crash loses nothing that was acknowledged.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import orjson

log = logging.getLogger("tritium")

MAX_FIELD = 512  # client-chosen text (model names, messages) is cut to this many characters
REFUSED_BURST = 10  # refusal lines per key and window
REFUSED_WINDOW_S = 60.0
MAX_TRACKED = 1024  # refusal keys tracked at once
OTHERS = "*"  # the host of the shared key beyond MAX_TRACKED


@dataclass(frozen=True, slots=True)
class AuditEvent:
    protocol: str  # "http" | "grpc"
    peer: str
    identity: str | None
    action: str  # e.g. "load", "system_shm_register", or the refused request's action
    target: str
    outcome: str  # "ok" | "error" | "refused"
    message: str = ""
    reason: str = ""  # a refusal's kind: restricted, unauthenticated, forbidden, ...


RefusalKey = tuple[str, str, str, str]  # (protocol, client host, action, reason)


@dataclass(slots=True)
class _Window:
    start: float
    written: int = 0
    suppressed: int = 0


class RefusalLimiter:
    """Which refusals get a line: per key at most ``burst`` per ``window`` seconds, with the
    windows that ended and the refusals they did not write. Pure: times are passed in.

    Windows are kept in the order they started, so those that ended are at the front and
    finding them costs only what is found."""

    def __init__(
        self, burst: int = REFUSED_BURST, window: float = REFUSED_WINDOW_S, keys: int = MAX_TRACKED
    ) -> None:
        self.burst = burst
        self.window = window
        self._keys = keys
        self._windows: dict[RefusalKey, _Window] = {}

    def admit(self, key: RefusalKey, now: float) -> tuple[RefusalKey, bool]:
        """(the key the refusal counts under, whether it gets a line). Call ``ended`` first:
        a key whose window has ended starts a new one here."""
        current = self._windows.get(key)
        if current is None:
            if len(self._windows) >= self._keys and key[1] != OTHERS:
                return self.admit((key[0], OTHERS, key[2], key[3]), now)
            current = self._windows[key] = _Window(now)
        if current.written < self.burst:
            current.written += 1
            return key, True
        current.suppressed += 1
        return key, False

    def ended(self, now: float) -> list[tuple[RefusalKey, int]]:
        """The windows over by ``now`` (forgotten) with a count of unwritten refusals."""
        over = []
        windows = self._windows
        while windows:
            key, oldest = next(iter(windows.items()))
            if now - oldest.start < self.window:
                break
            del windows[key]
            if oldest.suppressed:
                over.append((key, oldest.suppressed))
        return over

    def next_end(self) -> float | None:
        """When the oldest window with unwritten refusals ends (None: none has any)."""
        for current in self._windows.values():
            if current.suppressed:
                return current.start + self.window
        return None

    def drain(self) -> list[tuple[RefusalKey, int]]:
        """Every unwritten count, windows over or not (the log is closing)."""
        counts = [(k, w.suppressed) for k, w in self._windows.items() if w.suppressed]
        self._windows.clear()
        return counts


def _now_text() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def peer_host(peer: str) -> str:
    """The client host of a ``host:port`` / ``[v6]:port`` peer: what per-client bounds (and
    the refusal lines' limits) count."""
    if peer.startswith("["):
        return peer[1:].split("]", 1)[0]
    host, sep, port = peer.rpartition(":")
    return host if sep and port.isdigit() and ":" not in host else peer


class AuditLog:
    def __init__(
        self,
        path: str | os.PathLike[str],
        limiter: RefusalLimiter | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = os.fspath(path)
        self._fd: int | None = os.open(
            self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600
        )
        self._limiter = limiter or RefusalLimiter()
        self._clock = clock
        self._timer: asyncio.TimerHandle | None = None  # writes summaries when windows end

    def record(self, event: AuditEvent) -> None:
        if self._fd is None:
            return
        if event.outcome == "refused" and not self._refusal_written(event):
            return
        doc: dict[str, object] = {
            "time": _now_text(),
            "protocol": event.protocol,
            "peer": event.peer,
            "identity": event.identity,
            "action": event.action,
            "target": event.target[:MAX_FIELD],
            "outcome": event.outcome,
        }
        if event.reason:
            doc["reason"] = event.reason
        if event.message:
            doc["message"] = event.message[:MAX_FIELD]
        self._write(doc)

    def _refusal_written(self, event: AuditEvent) -> bool:
        """Whether the refusal gets its line (summaries of windows that ended go first)."""
        now = self._clock()
        self._summarise(self._limiter.ended(now))
        key = (event.protocol, peer_host(event.peer), event.action, event.reason)
        _, written = self._limiter.admit(key, now)
        if not written:
            self._arm()
        return written

    def _arm(self) -> None:
        """A timer for the summary of the oldest window holding back lines (on the running
        loop; without one, summaries wait for the next refusal or ``close``)."""
        if self._timer is not None:
            return
        end = self._limiter.next_end()
        if end is None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._timer = loop.call_later(max(end - self._clock(), 0.0), self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        if self._fd is not None:
            self._summarise(self._limiter.ended(self._clock()))
            self._arm()

    def _summarise(self, counts: list[tuple[RefusalKey, int]]) -> None:
        for (protocol, host, action, reason), count in counts:
            who = "other clients" if host == OTHERS else host
            window = self._limiter.window
            self._write(
                {
                    "time": _now_text(),
                    "protocol": protocol,
                    "peer": host,
                    "identity": None,
                    "action": action,
                    "target": "",
                    "outcome": "refused",
                    "reason": reason,
                    "suppressed": count,
                    "message": f"{count} more refused requests from {who} (at most "
                    f"{self._limiter.burst} lines per {window:g} s)",
                }
            )

    def _write(self, doc: dict[str, object]) -> None:
        assert self._fd is not None
        try:
            os.write(self._fd, orjson.dumps(doc) + b"\n")
        except OSError as exc:  # a full disk must not fail the request; say so loudly
            log.error("cannot write the audit log %s: %s", self.path, exc)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._fd is not None:
            self._summarise(self._limiter.drain())
            os.close(self._fd)
            self._fd = None
