"""CPU, memory and open files of a process and of its tree (a server, its workers, its stubs),
read from /proc (no psutil): the one reader every suite uses.

CPU is ``utime + stime`` of ``/proc/<pid>/stat`` (all the process's threads), in seconds, at one
clock tick's resolution; a process that is gone counts 0. The tree is found by parent pid (one
pass over ``/proc``), so children started by any thread of a process are in it.
"""

from __future__ import annotations

import os
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")


def stat_fields(pid: int) -> list[str] | None:
    """Fields 3 (state) on of ``/proc/<pid>/stat``; None once the process is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return text[text.rindex(")") + 2 :].split()  # comm may hold spaces and parentheses


def cpu_seconds(pid: int) -> float:
    """User + system CPU of ``pid`` (all its threads); 0.0 once it is gone."""
    fields = stat_fields(pid)
    if fields is None:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime (fields 14, 15)


def running(pid: int) -> bool:
    """The process exists and is not a zombie."""
    fields = stat_fields(pid)
    return fields is not None and fields[0] != "Z"


def parent_pids() -> dict[int, int]:
    """pid -> parent pid of every process (one pass over /proc)."""
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = stat_fields(int(entry))
            if fields is not None:
                out[int(entry)] = int(fields[1])  # ppid (field 4)
    return out


def children(pid: int) -> list[int]:
    """The live children of ``pid``, sorted."""
    return sorted(child for child, parent in parent_pids().items() if parent == pid)


def tree(pid: int) -> list[int]:
    """``pid`` and all its live descendants, parents first."""
    kids: dict[int, list[int]] = {}
    for child, parent in parent_pids().items():
        kids.setdefault(parent, []).append(child)
    found, todo = [], [pid]
    while todo:
        current = todo.pop(0)
        found.append(current)
        todo += sorted(kids.get(current, []))
    return found


def tree_cpu(pid: int) -> dict[int, float]:
    """CPU seconds of each process of the tree of ``pid``."""
    return {p: cpu_seconds(p) for p in tree(pid)}


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds of ``pid`` and all its live descendants."""
    return sum(tree_cpu(pid).values())


def status(pid: int) -> dict[str, int]:
    """``VmHWM``, ``VmRSS`` (KiB) and ``Threads`` of ``/proc/<pid>/status``; {} once gone."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return {}
    out = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key in ("VmHWM", "VmRSS", "Threads"):
            out[key] = int(value.split()[0])
    return out


def open_fds(pid: int) -> int | None:
    """How many files ``pid`` has open; None once it is gone."""
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def cmdline_has(pid: int, text: bytes) -> bool:
    try:
        return text in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def memory_mib(pid: int) -> dict[str, float] | None:
    """PSS and RSS (MiB) of ``pid`` from ``smaps_rollup``; None once it is gone."""
    try:
        lines = Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in lines)
    return {
        "pss_mib": int(fields["Pss"].split()[0]) / 1024,
        "rss_mib": int(fields["Rss"].split()[0]) / 1024,
    }


def machine_busy_seconds() -> float:
    """user + nice + system + irq + softirq + steal of all CPUs, from /proc/stat."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return 0.0
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[:8])
    return (user + nice + system + irq + softirq + steal) / CLK_TCK


def load_average() -> float:
    """The machine's one-minute load average."""
    return float(Path("/proc/loadavg").read_text().split()[0])


def thread_cpu(pid: int) -> dict[int, tuple[str, float]]:
    """Each thread of ``pid``: (its name, CPU seconds run): the scheduler's own count in
    nanoseconds (/proc/<pid>/task/<tid>/schedstat), not utime + stime in clock ticks (10 ms:
    too coarse for a window of a few slow requests)."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            text = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
            ran = int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
        out[int(tid)] = (text[text.index("(") + 1 : text.rindex(")")], ran / 1e9)
    return out


def established(pid: int, port: int) -> int | None:
    """How many ESTABLISHED TCP connections to local ``port`` ``pid`` holds (its own sockets);
    None once it is gone."""
    try:
        links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
        tables = [Path(f"/proc/{pid}/net/{t}").read_text() for t in ("tcp", "tcp6")]
    except OSError:
        return None
    inodes = {link[8:-1] for link in links if link.startswith("socket:[")}
    rows = [line.split() for text in tables for line in text.splitlines()[1:]]
    return sum(
        1
        for f in rows
        if int(f[1].rsplit(":", 1)[1], 16) == port and f[3] == "01" and f[9] in inodes
    )
