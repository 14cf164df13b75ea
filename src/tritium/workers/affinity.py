"""``--worker-affinity``: the CPU each worker runs on (``cpu``), or none (``none``).

A worker is one event loop: pinned, it and its threads (ONNX Runtime's, the instance
thread, uvloop's) and its Python stubs stay on one CPU. Measured on this 2-core machine
(``python -m bench workers``, ONNX ``simple``, c16, 2 workers): the server's CPU per inference fell
from 1.5x one worker's to about one worker's, the HTTP throughput over one worker from
about 1.0 to about 1.5 (docs/architecture.md section 7). ``auto`` pins only when there are
as many workers as CPUs (``--workers auto``): with fewer, a pinned worker could not move
off a CPU that something else keeps busy; with more, the CPUs would not get as many each.
"""

from __future__ import annotations

import os


def worker_cpus(mode: str, workers: int, allowed: set[int] | None = None) -> list[int]:
    """The CPUs the workers run on in turn (worker i: the i-th modulo their count); empty:
    not pinned. ``allowed``: the CPUs this process may use (its affinity by default)."""
    cpus = sorted(os.sched_getaffinity(0) if allowed is None else allowed)
    if mode == "none" or (mode == "auto" and workers != len(cpus)):
        return []
    return cpus
