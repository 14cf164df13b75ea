"""The audit log (``--audit-log FILE``): one JSON object per line, appended, never buffered.

What is recorded: every control-plane action (model load/unload, shared-memory
register/unregister, trace/log setting changes) with its outcome, and every request refused
by access control, authentication or a per-client bound. Each line has ``time`` (ISO 8601,
UTC), ``protocol``, ``peer`` (``host:port``), ``identity`` (a token's name, never the token;
null without tokens), ``action``, ``target`` (a model or region name; empty for "all"),
``outcome`` (``ok``, ``error`` or ``refused``) and, unless ok, ``message`` (for a refusal,
``reason`` too). Never tensor data, headers or request bodies.

Each record is one ``write(2)`` on an ``O_APPEND`` descriptor, so lines from concurrent
writers never interleave and a crash loses nothing that was acknowledged.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from datetime import UTC, datetime

import orjson

log = logging.getLogger("tritium")

MAX_FIELD = 512  # client-chosen text (model names, messages) is cut to this many characters


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


class AuditLog:
    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._fd: int | None = os.open(
            self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600
        )

    def record(self, event: AuditEvent) -> None:
        if self._fd is None:
            return
        doc: dict[str, object] = {
            "time": datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
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
        try:
            os.write(self._fd, orjson.dumps(doc) + b"\n")
        except OSError as exc:  # a full disk must not fail the request; say so loudly
            log.error("cannot write the audit log %s: %s", self.path, exc)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
