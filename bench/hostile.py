#!/usr/bin/env python3
"""Hostile HTTP clients against the real server: what does one bad client cost everyone else?

    PYTHONPATH=src .venv/bin/python bench/hostile.py [--cases gzip_bomb,idle_connections]
        [--case-seconds 30] [--rss-cap-mib 4096] [--label before] [--server-arg=--flag=value]

Issue 10, items 3 and 4. Each case starts a **fresh** server (``tests/server_process.py``
``ServerProcess``, 127.0.0.1, port 0) over a repository holding only the example ``simple``
model (built with ``examples/build_models.py``), then runs one hostile client on raw sockets
while two watchers run next to it:

* the server's memory, from ``/proc/<pid>/status``: ``VmHWM`` (peak RSS; monotonic, hence a
  fresh server per case) and ``VmRSS``, every 20 ms. Above ``--rss-cap-mib`` the server is
  killed (SIGKILL) and the case says so, so that no case can take the machine's memory;
* a health poller: ``GET /v2/health/ready`` on a **new** connection every ~10 ms (the next poll
  10 ms after the previous answer). The longest latency is reported; a poll still unanswered
  when the case ends counts with the time it has waited and is reported as unanswered.

Every case is bounded by ``--case-seconds`` (the hostile client gives up, then the server is
checked and stopped). Afterwards, with the hostile sockets closed, the server must answer
``/v2/health/ready`` and a ``simple`` inference within 10 s ("serves after"). The server is
then stopped (SIGTERM, SIGKILL if it does not exit).

Cases (``CASES``): gzip and deflate bombs (a ~1.3 MB body inflating to ``--bomb-mib`` of
zeros), a 64 MiB header block, 100,000 headers, an 8 MiB URL, 24 pipelined requests with
32 MiB bodies on one connection, a Content-Length larger than the body then silence, and
1,000 idle connections against a server limited to 1,024 open files (``prlimit``).

Results: a markdown table on stdout and ``bench/results/hostile.json`` (one entry per
``--label``; other labels already in the file are kept).
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "examples"))
from build_models import build_examples  # noqa: E402
from server_process import ServerProcess  # noqa: E402

HOST = "127.0.0.1"
MODEL = "simple"
INFER_PATH = f"/v2/models/{MODEL}/infer"
RESULTS = ROOT / "bench" / "results" / "hostile.json"
MIB = 1 << 20
AFTER_TIMEOUT_S = 10.0
POLL_INTERVAL_S = 0.01
WATCH_INTERVAL_S = 0.02
SERVER_NOFILE = 1024


# ---------------------------------------------------------------------------------------------
# Repository, server and /proc
# ---------------------------------------------------------------------------------------------
def build_repository(target: Path, models: Iterable[str]) -> Path:
    """The example repository built in ``target/full``; ``target/repo`` holds only ``models``
    (symlinks), so the server starts in seconds and runs no stub it does not need."""
    full = target / "full"
    build_examples(full)
    repo = target / "repo"
    repo.mkdir()
    for model in models:
        (repo / model).symlink_to(full / model, target_is_directory=True)
    return repo


def proc_status(pid: int) -> dict[str, int]:
    """``Vm*`` sizes (KiB) and ``Threads`` of ``/proc/<pid>/status``; {} once it is gone."""
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
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def raise_own_nofile() -> int:
    """This process opens ~1,000 sockets at once: soft RLIMIT_NOFILE up to the hard limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def start_server(
    repo: Path, args: Iterable[str], nofile: int | None = None, models: Iterable[str] = (MODEL,)
) -> ServerProcess:
    """A server over ``repo``, ready with ``models``; ``nofile`` sets its RLIMIT_NOFILE."""
    server = ServerProcess([repo], *args)
    if nofile is not None:  # as `ulimit -n` before the start: accept() is what runs out
        resource.prlimit(server.proc.pid, resource.RLIMIT_NOFILE, (nofile, nofile))
    server.wait_live(endpoint="ready")
    deadline = time.monotonic() + 60
    for model in models:
        while http_status(server.ports["http"], f"/v2/models/{model}/ready") != 200:
            if time.monotonic() > deadline:
                stop_server(server)
                raise RuntimeError(f"{model} not ready within 60 s")
            time.sleep(0.1)
    return server


def stop_server(server: ServerProcess) -> int | None:
    if server.proc.poll() is None:
        server.proc.send_signal(signal.SIGTERM)
        try:
            server.proc.wait(10)
        except subprocess.TimeoutExpired:
            server.proc.kill()
            server.proc.wait()
    server.stop()  # closes the log, removes its directory
    return server.proc.returncode


# ---------------------------------------------------------------------------------------------
# Minimal HTTP/1.1 on raw sockets
# ---------------------------------------------------------------------------------------------
class ResponseReader:
    """Reads consecutive HTTP/1.1 responses (status line, headers, Content-Length body) from
    one socket until a deadline; ``None`` for a response that did not come."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.buf, self.eof = sock, b"", False

    def _fill(self, deadline: float) -> bool:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or self.eof:
            return False
        self.sock.settimeout(min(remaining, 0.25))
        try:
            chunk = self.sock.recv(1 << 16)
        except TimeoutError:
            return True
        except OSError:
            chunk = b""
        self.eof = not chunk
        self.buf += chunk
        return bool(chunk)

    def read(self, deadline: float) -> tuple[int, bytes] | None:
        while b"\r\n\r\n" not in self.buf:
            if not self._fill(deadline) and (self.eof or time.monotonic() >= deadline):
                return None
        head, _, rest = self.buf.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        status = int(lines[0].split()[1])
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(rest) < length:
            if not self._fill(deadline) and (self.eof or time.monotonic() >= deadline):
                return None
            rest = self.buf.partition(b"\r\n\r\n")[2]
        self.buf = rest[length:]
        return status, rest[:length]


def request_head(method: str, path: str, headers: dict[str, Any] | None = None) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: {HOST}"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def http_call(port: int, payload: bytes, timeout: float) -> tuple[int, bytes] | None:
    """One request on a new connection; the answer, or None (refused, closed, timed out)."""
    deadline = time.monotonic() + timeout
    try:
        with socket.create_connection((HOST, port), timeout=timeout) as sock:
            sock.sendall(payload)
            return ResponseReader(sock).read(deadline)
    except (OSError, ValueError, IndexError):
        return None


def http_status(port: int, path: str, timeout: float = 2.0) -> int | None:
    answer = http_call(port, request_head("GET", path, {"Connection": "close"}), timeout)
    return answer[0] if answer else None


INPUT0 = list(range(16))
INPUT1 = [3] * 16


def infer_json(pad_to: int = 0) -> bytes:
    """A valid ``simple`` JSON inference body, padded with spaces (valid JSON) to ``pad_to``."""
    tensors = [
        {"name": name, "shape": [1, 16], "datatype": "INT32", "data": data}
        for name, data in (("INPUT0", INPUT0), ("INPUT1", INPUT1))
    ]
    body = json.dumps({"inputs": tensors}).encode()
    return body + b" " * max(0, pad_to - len(body))


def infer_request(body: bytes, headers: dict[str, Any] | None = None) -> bytes:
    base = {"Content-Type": "application/json", "Content-Length": len(body)}
    return request_head("POST", INFER_PATH, {**base, **(headers or {})}) + body


def serves_after(port: int) -> str:
    """``yes`` when ready and a ``simple`` inference answers correctly within 10 s."""
    deadline = time.monotonic() + AFTER_TIMEOUT_S
    while time.monotonic() < deadline:
        if http_status(port, "/v2/health/ready") == 200:
            break
        time.sleep(0.1)
    else:
        return "no: /v2/health/ready unanswered for 10 s"
    answer = http_call(port, infer_request(infer_json(), {"Connection": "close"}), 10.0)
    if answer is None or answer[0] != 200:
        return f"no: inference answered {answer[0] if answer else 'nothing'}"
    outputs = {o["name"]: o["data"] for o in json.loads(answer[1])["outputs"]}
    if outputs.get("OUTPUT0") != [a + b for a, b in zip(INPUT0, INPUT1, strict=True)]:
        return "no: wrong OUTPUT0"
    return "yes"


# ---------------------------------------------------------------------------------------------
# Watchers
# ---------------------------------------------------------------------------------------------
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


# ---------------------------------------------------------------------------------------------
# Hostile clients: each takes (port, deadline) and returns what it saw
# ---------------------------------------------------------------------------------------------
def exchange(port: int, chunks: Iterable[bytes], deadline: float, responses: int = 1) -> dict:
    """Send ``chunks`` on one connection (a thread: the server may stop reading) while reading
    up to ``responses`` answers until ``deadline``."""
    started = time.monotonic()
    sock = socket.create_connection((HOST, port), timeout=5)
    sent = {"bytes": 0, "error": None}

    def send() -> None:
        try:
            for chunk in chunks:
                view = memoryview(chunk)
                for start in range(0, len(view), MIB):  # pieces: sent_mib says how far it got
                    sock.settimeout(max(0.1, deadline - time.monotonic()))
                    sock.sendall(view[start : start + MIB])
                    sent["bytes"] += min(MIB, len(view) - start)
        except OSError as exc:
            sent["error"] = type(exc).__name__

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    reader, statuses, first = ResponseReader(sock), [], None
    try:
        while len(statuses) < responses:
            answer = reader.read(deadline)
            if answer is None:
                break
            statuses.append(answer[0])
            first = first or round(time.monotonic() - started, 2)
    finally:
        try:
            sock.shutdown(socket.SHUT_RDWR)  # wakes the sender if it is blocked in send()
        except OSError:
            pass
        sender.join(5)
        sock.close()
    return {
        "expected": responses,
        "statuses": statuses,
        "first_answer_s": first,
        "closed_by_server": reader.eof,
        "sent_mib": round(sent["bytes"] / MIB, 1),
        "send_error": sent["error"],
    }


_BOMBS: dict[str, bytes] = {}


def bomb_body(encoding: str, inflated_mib: int) -> bytes:
    """``inflated_mib`` MiB of zeros, gzip (wbits 31) or zlib-wrapped deflate (wbits 15)."""
    key = f"{encoding}/{inflated_mib}"
    if key not in _BOMBS:
        packer = zlib.compressobj(9, zlib.DEFLATED, 31 if encoding == "gzip" else 15)
        zeros = bytes(16 * MIB)
        parts = [packer.compress(zeros) for _ in range(inflated_mib // 16)]
        _BOMBS[key] = b"".join(parts) + packer.flush()
    return _BOMBS[key]


def bomb_case(encoding: str, inflated_mib: int) -> Callable[[int, float], dict]:
    def run(port: int, deadline: float) -> dict:
        body = bomb_body(encoding, inflated_mib)  # built by Case.prepare, before the server
        payload = infer_request(body, {"Content-Encoding": encoding})
        return {"body_mib": round(len(body) / MIB, 2), **exchange(port, [payload], deadline)}

    return run


def header_block_case(port: int, deadline: float) -> dict:
    head = request_head("GET", "/v2/health/ready")[:-2]  # without the blank line
    return exchange(port, [head, b"X-Pad: ", b"a" * (64 * MIB), b"\r\n\r\n"], deadline)


def many_headers_case(port: int, deadline: float) -> dict:
    head = request_head("GET", "/v2/health/ready")[:-2]
    many = b"".join(b"X-H%d: 1\r\n" % i for i in range(100_000))
    return exchange(port, [head, many, b"\r\n"], deadline)


def long_url_case(port: int, deadline: float) -> dict:
    path = "/v2/health/ready?pad=" + "a" * (8 * MIB)
    return exchange(port, [request_head("GET", path)], deadline)


PIPELINED, PIPELINED_MIB = 24, 32


def pipelined_case(port: int, deadline: float) -> dict:
    body = infer_json(PIPELINED_MIB * MIB)
    head = request_head("POST", INFER_PATH, {"Content-Length": len(body)})

    def chunks() -> Iterator[bytes]:
        for _ in range(PIPELINED):
            yield head
            yield body

    return exchange(port, chunks(), deadline, responses=PIPELINED)


def slow_body_case(port: int, deadline: float) -> dict:
    """Content-Length says 1 MiB, 1 KiB comes, then nothing (the client keeps the socket)."""
    head = request_head("POST", INFER_PATH, {"Content-Length": MIB})
    return exchange(port, [head, b" " * 1024], deadline)


IDLE_CONNECTIONS = 1000


def idle_connections_case(port: int, deadline: float) -> dict:
    """1,000 connections that send nothing, held until the deadline; how many the server
    closed meanwhile, and how many could not even connect."""
    socks, refused = [], 0
    for _ in range(IDLE_CONNECTIONS):
        if time.monotonic() >= deadline:
            break
        try:
            socks.append(socket.create_connection((HOST, port), timeout=0.5))
        except OSError:
            refused += 1
    try:
        closed = hold_idle(socks, deadline)
    finally:
        for sock in socks:
            sock.close()
    return {"connected": len(socks), "connect_failed": refused, "closed_by_server": closed}


def hold_idle(socks: list[socket.socket], deadline: float) -> int:
    """Wait until ``deadline``; count the sockets the server closed (EOF or reset)."""
    import selectors

    selector, closed = selectors.DefaultSelector(), 0
    for sock in socks:
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ)
    while (remaining := deadline - time.monotonic()) > 0:
        for key, _ in selector.select(min(remaining, 0.5)):
            try:
                data = key.fileobj.recv(4096)
            except OSError:
                data = b""
            if not data:
                closed += 1
                selector.unregister(key.fileobj)
    selector.close()
    return closed


@dataclass(frozen=True)
class Case:
    name: str
    item: int  # the item
    what: str
    run: Callable[[int, float], dict]
    nofile: int | None = None  # the server's RLIMIT_NOFILE
    prepare: Callable[[], object] | None = None  # slow client-side set-up, before the server


def cases(bomb_mib: int) -> list[Case]:
    bomb = f"{bomb_mib / 1024:.2f} GiB"
    return [
        *(
            Case(
                f"{encoding}_bomb",
                3,
                f"{encoding} body inflating to {bomb}",
                bomb_case(encoding, bomb_mib),
                prepare=functools.partial(bomb_body, encoding, bomb_mib),
            )
            for encoding in ("gzip", "deflate")
        ),
        Case("header_block", 4, "one 64 MiB header", header_block_case),
        Case("many_headers", 4, "100,000 headers", many_headers_case),
        Case("long_url", 4, "8 MiB URL", long_url_case),
        Case("pipelined", 4, f"{PIPELINED} pipelined {PIPELINED_MIB} MiB infers", pipelined_case),
        Case("slow_body", 4, "Content-Length 1 MiB, 1 KiB sent, silence", slow_body_case),
        Case(
            "idle_connections",
            4,
            f"{IDLE_CONNECTIONS} idle connections, server nofile {SERVER_NOFILE}",
            idle_connections_case,
            nofile=SERVER_NOFILE,
        ),
    ]


# ---------------------------------------------------------------------------------------------
# Running a case
# ---------------------------------------------------------------------------------------------
@dataclass
class Settings:
    case_seconds: float = 30.0
    rss_cap_mib: int = 4096
    server_args: list[str] = field(default_factory=list)


def run_case(case: Case, repo: Path, settings: Settings) -> dict[str, Any]:
    if case.prepare is not None:
        case.prepare()
    server = start_server(repo, settings.server_args, case.nofile)
    pid, port = server.proc.pid, server.ports["http"]
    idle, load_before = proc_status(pid), os.getloadavg()[0]
    memory, health = MemoryWatch(pid, settings.rss_cap_mib), HealthPoller(port)
    memory.start()
    health.start()
    started = time.monotonic()
    try:
        client = case.run(port, started + settings.case_seconds)
    except Exception as exc:  # noqa: BLE001 - a failing client is a result, not a crash
        client = {"error": f"{type(exc).__name__}: {exc}"}
    elapsed = time.monotonic() - started
    polls = health.finish()
    memory.stop_event.set()
    memory.join(5)
    alive = server.proc.poll() is None
    after = serves_after(port) if alive else f"no: server exited ({server.proc.returncode})"
    peak = max(memory.peak_kib, proc_status(pid).get("VmHWM", 0))
    result = {
        "case": case.name,
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "item": case.item,
        "what": case.what,
        "seconds": round(elapsed, 1),
        "loadavg_1m": [load_before, os.getloadavg()[0]],
        "client": client,
        "idle_rss_mib": round(idle.get("VmRSS", 0) / 1024, 1),
        "peak_rss_mib": round(peak / 1024, 1),
        "max_fds": memory.max_fds,
        "killed_at_rss_cap": memory.killed,
        "health": polls,
        "serves_after": after,
    }
    result["server_log_tail"] = server_log_tail(server)
    result["exit_code"] = stop_server(server)
    return result


def server_log_tail(server: ServerProcess, lines: int = 8) -> list[str]:
    try:
        return server.log_path.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return []


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------
def client_outcome(client: dict[str, Any]) -> str:
    if "error" in client:
        return client["error"]
    if "connected" in client:
        return (
            f"{client['connected']} connected, {client['connect_failed']} failed, "
            f"{client['closed_by_server']} closed by server"
        )
    statuses = client["statuses"]
    if client["expected"] > 1:
        kinds = ", ".join(sorted({str(s) for s in statuses})) or "-"
        text = f"{len(statuses)}/{client['expected']} answered ({kinds})"
    elif statuses:
        text = f"{statuses[0]} after {client['first_answer_s']} s"
    else:
        text = "closed, no answer" if client["closed_by_server"] else "no answer"
    if client.get("send_error"):
        text += f"; send {client['send_error']} after {client['sent_mib']} MiB"
    return text


def health_outcome(health: dict[str, Any]) -> str:
    text = f"{health['answered']}/{health['polls']}"
    if health["failed"]:
        why = ", ".join(f"{n} {k}" for k, n in health["failures"].items())
        text += f" ({why})"
    if health["unanswered"]:
        text += ", last unanswered"
    return text


def markdown(results: list[dict[str, Any]]) -> str:
    rows = [
        "| case | item | hostile client got | idle → peak RSS MiB | longest health ms |"
        " health answered | serves after | load 1m |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        peak = f"{r['idle_rss_mib']:.0f} → {r['peak_rss_mib']:.0f}"
        if r["killed_at_rss_cap"]:
            peak += " (killed at cap)"
        rows.append(
            f"| {r['case']}: {r['what']} | {r['item']} | {client_outcome(r['client'])} | {peak} "
            f"| {r['health']['longest_ms']:.0f} | {health_outcome(r['health'])} "
            f"| {r['serves_after']} | {r['loadavg_1m'][0]:.1f} |"
        )
    return "\n".join(rows)


def git_commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            text=True,
            capture_output=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return "?"
    return out.stdout.strip()


def save(label: str, results: list[dict[str, Any]], settings: Settings, path: Path) -> None:
    data = json.loads(path.read_text()) if path.exists() else {}
    ran = {r["case"] for r in results}  # a run of some cases replaces only those of the label
    kept = [r for r in data.get(label, {}).get("results", []) if r["case"] not in ran]
    order = [c.name for c in cases(1)]
    results = sorted(kept + results, key=lambda r: order.index(r["case"]))
    data[label] = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "commit": git_commit(),
        "nproc": os.cpu_count(),
        "case_seconds": settings.case_seconds,
        "rss_cap_mib": settings.rss_cap_mib,
        "server_args": settings.server_args,
        "results": results,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    parser.add_argument("--case-seconds", type=float, default=30.0)
    parser.add_argument("--rss-cap-mib", type=int, default=4096)
    parser.add_argument("--bomb-mib", type=int, default=1280, help="inflated size of the bombs")
    parser.add_argument("--label", default="run", help="the key of this run in the JSON")
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument(
        "--server-arg", action="append", default=[], help="extra server flag (repeatable)"
    )
    return parser.parse_args(argv)


SUMMARY = ("client", "peak_rss_mib", "killed_at_rss_cap", "health", "serves_after")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    settings = Settings(args.case_seconds, args.rss_cap_mib, args.server_arg)
    wanted = args.cases.split(",") if args.cases else []
    selected = [c for c in cases(args.bomb_mib) if not wanted or c.name in wanted]
    raise_own_nofile()
    results = []
    with tempfile.TemporaryDirectory(prefix="tritium-hostile-") as tmp:
        repo = build_repository(Path(tmp), [MODEL])
        for case in selected:
            print(f"{case.name}: {case.what} ...", flush=True)
            results.append(run_case(case, repo, settings))
            print("  " + json.dumps({k: results[-1][k] for k in SUMMARY}), flush=True)
    table = markdown(results)
    print(table)
    save(args.label, results, settings, args.output)
    return 0 if all(r["serves_after"] == "yes" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
