"""Watching a server under hostile load (the hostile-http suite, the soak suite): its memory, open
files and threads and those of each of its processes (supervisor, workers, stubs) from /proc
(no psutil), a memory watch that kills it above a cap (the machine is shared), and a health
poller on fresh raw-socket connections."""

from __future__ import annotations

import os
import resource
import signal
import socket
import threading
import time
from collections import Counter
from typing import Any

from bench.proctree import cmdline_has as _cmdline_has
from bench.proctree import open_fds, parent_pids
from bench.proctree import status as proc_status
from bench.raw_http import HOST, ResponseReader, request_head

POLL_INTERVAL_S = 0.01
WATCH_INTERVAL_S = 0.02


STUB_MODULE = "tritium.backends.python.stub"


def _is_stub(pid: int) -> bool:
    return _cmdline_has(pid, STUB_MODULE.encode())


def _below(role: str, pid: int) -> str:
    """The role of a child of a ``role`` process."""
    if role == "worker" and _is_stub(pid):
        return "stub"
    if role == "stub" and _cmdline_has(pid, b"os.killpg(0"):
        return "keeper"  # backends/python/stub_group.py: kills the stub's group with it
    return "other"


def process_tree(pid: int) -> list[tuple[int, str, int]]:
    """The server's processes, parents first, each with its role and its owner (the server or
    worker process whose descendant it is; 0 for the root): ``server`` (one process) or
    ``supervisor`` with its ``worker`` children (--workers N); the ``stub`` children of the
    server or of a worker (Python models); below a stub, its process group's ``keeper`` and
    ``other`` processes (what a model started)."""
    kids: dict[int, list[int]] = {}
    for child, parent in parent_pids().items():
        kids.setdefault(parent, []).append(child)
    top = sorted(kids.get(pid, []))
    workers = {k for k in top if not _is_stub(k)}
    out = [(pid, "supervisor" if workers else "server", 0)]
    out += [(k, "worker" if k in workers else "stub", pid) for k in top]
    at = 1
    while at < len(out):
        parent, role, owner = out[at]
        at += 1
        for kid in sorted(kids.get(parent, [])):
            out.append((kid, _below(role, kid), parent if role == "worker" else owner))
    return out


def process_usage(pid: int, role: str, owner: int) -> dict[str, Any]:
    status = proc_status(pid)
    return {
        "pid": pid,
        "role": role,
        "owner": owner,
        "rss_mib": round(status.get("VmRSS", 0) / 1024, 1),
        "fds": open_fds(pid),
        "threads": status.get("Threads"),
    }


def _sum(processes: list[dict[str, Any]], role: str, key: str) -> float:
    return round(sum(p[key] or 0 for p in processes if p["role"] == role), 1)


def process_sample(pid: int) -> dict[str, Any]:
    """The server's RSS, open fds and threads; its stub processes' count and total RSS; with
    --workers N the workers' count, RSS and fds too; the RSS of the whole tree; and each
    process (``processes``: pid, role, RSS, fds, threads)."""
    processes = [process_usage(*entry) for entry in process_tree(pid)]
    root = processes[0]
    return {
        "rss_mib": root["rss_mib"],
        "fds": root["fds"],
        "threads": root["threads"],
        "workers": sum(p["role"] == "worker" for p in processes),
        "worker_rss_mib": _sum(processes, "worker", "rss_mib"),
        "worker_fds": int(_sum(processes, "worker", "fds")),
        "stubs": sum(p["role"] == "stub" for p in processes),
        "stub_rss_mib": _sum(processes, "stub", "rss_mib"),
        "total_rss_mib": round(sum(p["rss_mib"] for p in processes), 1),
        "processes": processes,
    }


def server_rss_kib(pid: int) -> int:
    """The RSS (KiB) of the server: the process, or the supervisor and its workers."""
    return sum(
        proc_status(p).get("VmRSS", 0)
        for p, role, _ in process_tree(pid)
        if role in ("server", "supervisor", "worker")
    )


def raise_own_nofile() -> int:
    """This process opens ~1,000 sockets at once: soft RLIMIT_NOFILE up to the hard limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


class MemoryWatch(threading.Thread):
    """Samples VmHWM / VmRSS; kills the server above the cap (the machine is shared)."""

    def __init__(self, pid: int, cap_mib: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.cap_kib = pid, cap_mib * 1024
        self.stop_event = threading.Event()
        self.peak_kib = self.max_fds = 0
        self.killed = False

    def run(self) -> None:
        while not self.stop_event.wait(WATCH_INTERVAL_S):
            status = proc_status(self.pid)
            if not status:
                return
            self.peak_kib = max(self.peak_kib, status["VmHWM"])
            self.max_fds = max(self.max_fds, open_fds(self.pid) or 0)
            if status["VmRSS"] > self.cap_kib:
                self.killed = True
                os.kill(self.pid, signal.SIGKILL)
                return


class HealthPoller(threading.Thread):
    """``GET /v2/health/ready`` on a new connection every ~10 ms until stopped. A poll in
    flight when the case ends gets ``grace`` seconds more; unanswered then, it counts with the
    time it waited (``unanswered``)."""

    PAYLOAD = request_head("GET", "/v2/health/ready", {"Connection": "close"})
    GAVE_UP = -1

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.port = port
        self.stop_event = threading.Event()
        self.give_up_at = float("inf")
        self.sent = self.answered = self.not_ready = self.failed = self.unanswered = 0
        self.longest = 0.0
        self.failures: Counter[str] = Counter()  # why polls failed: exception name or "EOF"

    def run(self) -> None:
        while not self.stop_event.is_set():
            start = time.monotonic()
            self.sent += 1
            status = self._poll()
            self.longest = max(self.longest, time.monotonic() - start)
            if status == self.GAVE_UP:
                self.unanswered += 1
            elif status is None:
                self.failed += 1
            else:
                self.answered += 1
                self.not_ready += status != 200
            self.stop_event.wait(POLL_INTERVAL_S)

    def _poll(self) -> int | None:
        """The status; None: refused, reset or closed unanswered; GAVE_UP."""
        try:
            with socket.create_connection((HOST, self.port), timeout=5) as sock:
                sock.sendall(self.PAYLOAD)
                reader = ResponseReader(sock)
                while (now := time.monotonic()) < self.give_up_at:
                    answer = reader.read(min(now + 0.25, self.give_up_at))
                    if answer is not None:
                        return answer[0]
                    if reader.eof:
                        self.failures["closed unanswered"] += 1
                        return None
        except (OSError, ValueError, IndexError) as exc:
            self.failures[type(exc).__name__] += 1
            return None
        return self.GAVE_UP

    def finish(self, grace: float = 2.0) -> dict[str, Any]:
        self.give_up_at = time.monotonic() + grace
        self.stop_event.set()
        self.join(grace + 10)
        return {
            "polls": self.sent,
            "answered": self.answered,
            "not_ready": self.not_ready,
            "failed": self.failed,
            "failures": dict(self.failures),
            "unanswered": self.unanswered,
            "longest_ms": round(self.longest * 1000, 1),
        }
