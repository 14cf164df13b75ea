"""``--trace-config triton,file=PATH`` with ``--workers N``: each worker writes its own
traces (a request is traced where it runs) to ``PATH.w<index>``, the same JSON array a
single server writes to ``PATH`` (indexed files, with ``log_frequency``:
``PATH.w<index>.<n>``). Nothing crosses processes per trace. When the server stops, the
supervisor joins the workers' arrays into ``PATH`` (one array, Triton's file) and removes
them; a part that is not a closed array (a worker killed at the exit timeout) is left in
place, and said so. Indexed files stay per worker (each worker counts its own).
"""

from __future__ import annotations

import logging
import os
from typing import BinaryIO

log = logging.getLogger("tritium")

_CHUNK = 1 << 20


def part_suffix(index: int) -> str:
    return f".w{index}"


def join_parts(path: str, workers: int) -> None:
    """``PATH.w0`` .. ``PATH.w<N-1>`` (those that exist) as one array at ``PATH``."""
    parts = [f"{path}{part_suffix(i)}" for i in range(workers)]
    whole = [p for p in parts if os.path.exists(p) and _closed_array(p)]
    for part in parts:
        if os.path.exists(part) and part not in whole:
            log.error("trace file part '%s' is not a closed JSON array: left as it is", part)
    if not whole:
        return
    try:
        with open(path + ".tmp", "wb") as out:
            out.write(b"[")
            for number, part in enumerate(whole):
                if number:
                    out.write(b",")
                _copy_inside(part, out)
            out.write(b"]")
        os.replace(path + ".tmp", path)
    except OSError as exc:
        log.error("failed joining the trace file '%s': %s (the parts are kept)", path, exc)
        return
    for part in whole:
        os.unlink(part)


def _closed_array(part: str) -> bool:
    try:
        with open(part, "rb") as handle:
            first = handle.read(1)
            handle.seek(-1, os.SEEK_END)
            return first == b"[" and handle.read(1) == b"]" and handle.tell() > 2
    except OSError:
        return False


def _copy_inside(part: str, out: BinaryIO) -> None:
    """The part's entries: everything between its brackets."""
    size = os.path.getsize(part)
    with open(part, "rb") as handle:
        handle.seek(1)
        left = size - 2
        while left > 0:
            chunk = handle.read(min(_CHUNK, left))
            if not chunk:
                break
            out.write(chunk)
            left -= len(chunk)
