"""Triton's trace file: a JSON array of trace objects (``trace.py:triton_entries``) that
Triton's trace summary tool reads.

Where a trace goes follows Triton's ``TraceSetting::WriteTrace``: with ``log_frequency`` N,
every N traces of a setting go to ``<file>.<index>`` (the index counts per file); when a
``count`` limit is reached, the traces collected under it go to the next indexed file too;
otherwise traces go to ``<file>`` itself, an array closed when the server stops. A setting
replaced through the trace extension writes what it still holds the same way. Memory stays
bounded: traces are kept only up to ``log_frequency`` or ``count`` of them; unlimited ones are
appended to the file as they complete.
"""

from __future__ import annotations

import logging
import os
from typing import IO, Any

import orjson

from .settings import TraceSetting

log = logging.getLogger("tritium")


class TraceFile:
    """One trace file path: the open array at ``path`` and the next index for its
    indexed files."""

    __slots__ = ("path", "index", "_handle", "_failed")

    def __init__(self, path: str) -> None:
        self.path = path
        self.index = 0
        self._handle: IO[bytes] | None = None
        self._failed = False

    def append(self, traces: list[list[dict[str, Any]]]) -> None:
        """Add traces to the array at ``path``."""
        if not traces or self._failed:
            return
        try:
            handle = self._handle
            if handle is None:
                handle = self._handle = open(self.path, "wb")  # noqa: SIM115 - kept open
                handle.write(b"[")
            else:
                handle.write(b",")
            handle.write(_joined(traces))  # buffered: the array is whole once closed
        except OSError as exc:
            self._failed = True
            log.error("failed writing trace file '%s': %s", self.path, exc)

    def write_indexed(self, traces: list[list[dict[str, Any]]]) -> None:
        """Write traces as a whole array to ``<path>.<index>``, the next index."""
        name = f"{self.path}.{self.index}"
        self.index += 1
        try:  # whole or not at all: a reader never sees half a file
            with open(name + ".tmp", "wb") as handle:
                handle.write(b"[" + _joined(traces) + b"]")
            os.replace(name + ".tmp", name)
        except OSError as exc:
            log.error("failed writing trace file '%s': %s", name, exc)

    def close(self) -> None:
        handle, self._handle = self._handle, None
        if handle is not None:
            try:
                handle.write(b"]")
                handle.close()
            except OSError as exc:
                log.error("failed closing trace file '%s': %s", self.path, exc)


def _joined(traces: list[list[dict[str, Any]]]) -> bytes:
    return b",".join(orjson.dumps(entry) for entries in traces for entry in entries)


class TraceStream:
    """The traces of one setting on their way to its file."""

    __slots__ = ("setting", "file", "kept", "collected")

    def __init__(self, setting: TraceSetting, file: TraceFile) -> None:
        self.setting = setting
        self.file = file
        self.kept: list[list[dict[str, Any]]] = []
        self.collected = 0

    def write(self, entries: list[dict[str, Any]]) -> None:
        """One completed trace (a group's entries)."""
        setting = self.setting
        values = setting.values
        self.collected += 1
        if values.count < 0 and values.log_frequency == 0:
            self.file.append([entries])
            return
        self.kept.append(entries)
        limit_reached = setting.count == 0 and self.collected >= setting.created
        if limit_reached or (values.log_frequency and len(self.kept) >= values.log_frequency):
            kept, self.kept = self.kept, []
            self.file.write_indexed(kept)

    def retire(self) -> None:
        """The setting is replaced or the server stops: write what is still kept."""
        kept, self.kept = self.kept, []
        if not kept:
            return
        if self.setting.values.log_frequency:
            self.file.write_indexed(kept)
        else:
            self.file.append(kept)
