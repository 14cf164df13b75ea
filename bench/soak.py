#!/usr/bin/env python3
"""Soak: moderate HTTP + gRPC load with 1 % hostile requests mixed in; does the server last?

    PYTHONPATH=src .venv/bin/python bench/soak.py [--seconds 600] [--rate 400] [--workers 8]
        [--hostile-every 100] [--bomb-mib 1280] [--rss-cap-mib 4096] [--label NAME]

Issue 10, "Figures to report". A fresh server (``tests/server_process.py`` ``ServerProcess``,
127.0.0.1, port 0, ``--allow-client-shm=true``) over a repository holding the examples
``simple`` (ONNX) and ``add_sub_python`` (Python backend: one stub), built with
``examples/build_models.py``. This process is the client:

* ``--workers`` coroutines on tritonclient's asyncio clients, spread over HTTP (binary) and
  gRPC × the two models (one client each), paced together at ``--rate`` requests/s (open
  loop: a worker more than 1 s behind its schedule drops the backlog rather than bursting).
  Every answer is checked (``OUTPUT0 = INPUT0 + INPUT1``, ``OUTPUT1 = INPUT0 - INPUT1``).
* every ``--hostile-every``-th request slot (1 %) is a hostile request instead, run on a
  thread with raw sockets (``bench/hostile.py``'s helpers), in rotation: gzip and deflate
  bombs (``--bomb-mib`` inflated), a truncated body (Content-Length 64 KiB, 32 KiB sent, the
  write side shut), a disconnect mid-body, a 1 MiB header, and system shared-memory
  registrations with a key escaping /dev/shm (``/../../etc/passwd``) over HTTP and gRPC
  (registration only; one that is accepted is unregistered at once and reported). At most
  ``HOSTILE_IN_FLIGHT`` run at once; a slot finding them all busy is counted as skipped.

Reported: requests answered per protocol/model, errors by kind (HTTP status / gRPC code /
client exception, with one message each), wrong answers, the hostile requests' outcomes, and
the server's RSS, open fds and threads and its stub processes (count, RSS) before the load,
after a 10 s warm-up, every ``--sample-every`` seconds, at the end, and after 5 s idle; the
maximum of each. A watchdog polls ``/v2/health/ready`` every second.

The exit status is 1 when the server died, stopped answering (health unanswered 10 s, or no
inference answered for 30 s), passed ``--rss-cap-mib`` (it is killed then), gave a wrong
answer, or does not serve at the end; 0 otherwise. Results: a summary on stdout and
``bench/results/soak.json`` (one entry per ``--label``).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import itertools
import json
import os
import signal
import socket
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hostile as h  # noqa: E402 - bench/hostile.py: server, /proc and raw-socket helpers

MODELS = ("simple", "add_sub_python")
PROTOCOLS = ("http", "grpc")
RESULTS = h.ROOT / "bench" / "results" / "soak.json"
REQUEST_TIMEOUT_S = 30.0
HOSTILE_TIMEOUT_S = 30.0
HOSTILE_IN_FLIGHT = 8
HEALTH_TIMEOUT_S = 10.0
STALL_S = 30.0  # no inference answered for this long: the server stopped answering
WARMUP_S = 10.0
SETTLE_S = 5.0
SHM_KEYS = ("/../../etc/passwd", "../../../../etc/passwd")


# ---------------------------------------------------------------------------------------------
# What happened
# ---------------------------------------------------------------------------------------------
@dataclass
class Tally:
    answered: Counter[str] = field(default_factory=Counter)  # "http/simple" -> answers
    errors: Counter[str] = field(default_factory=Counter)  # "http/simple 400" -> count
    examples: dict[str, str] = field(default_factory=dict)  # one message per error kind
    wrong: Counter[str] = field(default_factory=Counter)
    hostile: Counter[str] = field(default_factory=Counter)  # "gzip_bomb: 400" -> count
    hostile_skipped: int = 0
    last_answer: float = field(default_factory=time.monotonic)
    failure: str | None = None

    def error(self, key: str, kind: str, message: str) -> None:
        self.errors[f"{key} {kind}"] += 1
        self.examples.setdefault(f"{key} {kind}", message[:200])

    def fail(self, why: str) -> None:
        self.failure = self.failure or why


def children_of(pid: int) -> list[int]:
    """The server's child processes (the Python-backend stubs), from /proc/*/stat."""
    kids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if int(stat[stat.rindex(")") + 2 :].split()[1]) == pid:
            kids.append(int(entry))
    return kids


def sample(label: str, pid: int, started: float, tally: Tally) -> dict[str, Any]:
    status = h.proc_status(pid)
    stubs = [h.proc_status(kid) for kid in children_of(pid)]
    return {
        "label": label,
        "t_s": round(time.monotonic() - started, 1),
        "answered": sum(tally.answered.values()),
        "rss_mib": round(status.get("VmRSS", 0) / 1024, 1),
        "fds": h.open_fds(pid),
        "threads": status.get("Threads"),
        "stubs": len(stubs),
        "stub_rss_mib": round(sum(s.get("VmRSS", 0) for s in stubs) / 1024, 1),
    }


# ---------------------------------------------------------------------------------------------
# Normal load
# ---------------------------------------------------------------------------------------------
def client_module(protocol: str) -> Any:
    if protocol == "http":
        import tritonclient.http.aio as module
    else:
        import tritonclient.grpc.aio as module
    return module


def prepare(protocol: str, seed: int) -> tuple[list, list, np.ndarray, np.ndarray]:
    module = client_module(protocol)
    rng = np.random.default_rng(seed)
    in0, in1 = (rng.integers(-1000, 1000, (1, 16), dtype=np.int32) for _ in range(2))
    inputs = []
    for name, array in (("INPUT0", in0), ("INPUT1", in1)):
        tensor = module.InferInput(name, [1, 16], "INT32")
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    outputs = [module.InferRequestedOutput(name) for name in ("OUTPUT0", "OUTPUT1")]
    return inputs, outputs, in0, in1


class Pace:
    """Open-loop schedule of one worker: one slot every ``interval`` seconds."""

    def __init__(self, interval: float) -> None:
        self.interval, self.next = interval, time.monotonic()

    async def wait(self) -> None:
        self.next += self.interval
        delay = self.next - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        elif delay < -1.0:  # more than 1 s behind: drop the backlog instead of bursting
            self.next = time.monotonic()


@dataclass
class Load:
    """What the workers share."""

    urls: dict[str, str]
    tally: Tally
    stop: asyncio.Event
    mixer: HostileMixer
    interval: float


async def worker(index: int, protocol: str, model: str, load: Load) -> None:
    from tritonclient.utils import InferenceServerException

    client = client_module(protocol).InferenceServerClient(load.urls[protocol])
    inputs, outputs, in0, in1 = prepare(protocol, index)
    key, pace = f"{protocol}/{model}", Pace(load.interval)
    try:
        while not load.stop.is_set():
            await pace.wait()
            if load.mixer.take_slot():
                continue
            try:
                result = await asyncio.wait_for(
                    client.infer(model, inputs, outputs=outputs), REQUEST_TIMEOUT_S
                )
            except TimeoutError:
                load.tally.error(key, "client timeout", f"no answer in {REQUEST_TIMEOUT_S} s")
            except InferenceServerException as exc:
                load.tally.error(key, str(exc.status()), str(exc.message()))
            except Exception as exc:  # noqa: BLE001 - a broken connection is a finding
                load.tally.error(key, type(exc).__name__, str(exc))
            else:
                record_answer(load.tally, key, result, in0, in1)
    finally:
        await client.close()


def record_answer(tally: Tally, key: str, result: Any, in0: np.ndarray, in1: np.ndarray) -> None:
    out0, out1 = result.as_numpy("OUTPUT0"), result.as_numpy("OUTPUT1")
    if np.array_equal(out0, in0 + in1) and np.array_equal(out1, in0 - in1):
        tally.answered[key] += 1
        tally.last_answer = time.monotonic()
    else:
        tally.wrong[key] += 1


# ---------------------------------------------------------------------------------------------
# Hostile requests (blocking, on threads)
# ---------------------------------------------------------------------------------------------
def answer_text(answer: tuple[int, bytes] | None, reader: h.ResponseReader) -> str:
    if answer is not None:
        return str(answer[0])
    return "closed unanswered" if reader.eof else f"no answer in {HOSTILE_TIMEOUT_S:.0f} s"


def exchange_text(result: dict[str, Any]) -> str:
    if result["statuses"]:
        return str(result["statuses"][0])
    return "closed unanswered" if result["closed_by_server"] else "no answer"


def bomb(encoding: str, inflated_mib: int) -> Callable[[int, int], str]:
    def run(port: int, _: int) -> str:
        body = h.bomb_body(encoding, inflated_mib)
        request = h.infer_request(body, {"Content-Encoding": encoding})
        return exchange_text(h.exchange(port, [request], time.monotonic() + HOSTILE_TIMEOUT_S))

    return run


def truncated_body(port: int, _: int) -> str:
    """Content-Length 64 KiB, 32 KiB sent, then the write side shut: the body never comes."""
    with socket.create_connection((h.HOST, port), timeout=5) as sock:
        sock.sendall(h.request_head("POST", h.INFER_PATH, {"Content-Length": 64 << 10}))
        sock.sendall(b" " * (32 << 10))
        sock.shutdown(socket.SHUT_WR)
        reader = h.ResponseReader(sock)
        return answer_text(reader.read(time.monotonic() + HOSTILE_TIMEOUT_S), reader)


def mid_body_disconnect(port: int, _: int) -> str:
    """Half of an announced 1 MiB body, then the connection closed at once."""
    with socket.create_connection((h.HOST, port), timeout=5) as sock:
        sock.sendall(h.request_head("POST", h.INFER_PATH, {"Content-Length": h.MIB}))
        sock.sendall(b" " * (h.MIB // 2))
    return "sent half, closed"


def big_header(port: int, _: int) -> str:
    head = h.request_head("GET", "/v2/health/ready")[:-2]
    deadline = time.monotonic() + HOSTILE_TIMEOUT_S
    return exchange_text(
        h.exchange(port, [head, b"X-Pad: " + b"a" * h.MIB + b"\r\n\r\n"], deadline)
    )


def shm_http(port: int, count: int) -> str:
    name, key = f"soak_bad_{count}", SHM_KEYS[count % len(SHM_KEYS)]
    body = json.dumps({"key": key, "offset": 0, "byte_size": 16}).encode()
    path = f"/v2/systemsharedmemory/region/{name}"
    head = {"Content-Type": "application/json", "Content-Length": len(body)}
    answer = h.http_call(port, h.request_head("POST", f"{path}/register", head) + body, 10)
    if answer is None:
        return "no answer"
    if answer[0] == 200:  # the key escaped /dev/shm: do not keep the host file mapped
        h.http_call(port, h.request_head("POST", f"{path}/unregister", {"Content-Length": 0}), 10)
        return "200 (registered!)"
    return str(answer[0])


def shm_grpc(grpc_port: int, count: int) -> str:
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    name, key = f"soak_bad_grpc_{count}", SHM_KEYS[count % len(SHM_KEYS)]
    client = grpcclient.InferenceServerClient(f"{h.HOST}:{grpc_port}")
    try:
        client.register_system_shared_memory(name, key, 16, client_timeout=10)
    except InferenceServerException as exc:
        return str(exc.status())
    else:
        client.unregister_system_shared_memory(name, client_timeout=10)
        return "OK (registered!)"
    finally:
        client.close()


@dataclass(frozen=True)
class HostileKind:
    name: str
    run: Callable[[int, int], str]  # (port, count) -> outcome
    protocol: str = "http"


def hostile_kinds(bomb_mib: int) -> list[HostileKind]:
    return [
        HostileKind("gzip_bomb", bomb("gzip", bomb_mib)),
        HostileKind("truncated_body", truncated_body),
        HostileKind("bad_shm_http", shm_http),
        HostileKind("deflate_bomb", bomb("deflate", bomb_mib)),
        HostileKind("mid_body_disconnect", mid_body_disconnect),
        HostileKind("big_header", big_header),
        HostileKind("bad_shm_grpc", shm_grpc, "grpc"),
    ]


class HostileMixer:
    """Every ``every``-th request slot (all workers together) becomes a hostile request."""

    def __init__(self, every: int, kinds: list[HostileKind], ports: dict[str, int], tally: Tally):
        self.every, self.ports, self.tally = every, ports, tally
        self.kinds = itertools.cycle(kinds)
        self.slots = self.launched = 0
        self.pool = ThreadPoolExecutor(HOSTILE_IN_FLIGHT, thread_name_prefix="hostile")
        self.tasks: set[asyncio.Future] = set()

    def take_slot(self) -> bool:
        """True when this slot went to a hostile request (or was skipped for one)."""
        self.slots += 1
        if self.every <= 0 or self.slots % self.every:
            return False
        if len(self.tasks) >= HOSTILE_IN_FLIGHT:
            self.tally.hostile_skipped += 1
            return True
        kind, count = next(self.kinds), self.launched
        self.launched += 1
        loop = asyncio.get_running_loop()
        task = loop.run_in_executor(self.pool, self._run, kind, count)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return True

    def _run(self, kind: HostileKind, count: int) -> None:
        try:
            outcome = kind.run(self.ports[kind.protocol], count)
        except Exception as exc:  # noqa: BLE001 - the client's own failure is an outcome
            outcome = f"client {type(exc).__name__}"
        self.tally.hostile[f"{kind.name}: {outcome}"] += 1

    async def drain(self) -> None:
        if self.tasks:
            await asyncio.wait(self.tasks, timeout=HOSTILE_TIMEOUT_S + 10)
        self.pool.shutdown(wait=False, cancel_futures=True)


# ---------------------------------------------------------------------------------------------
# Watching the server
# ---------------------------------------------------------------------------------------------
def guard_check(server: h.ServerProcess, cap_mib: int, tally: Tally) -> str | None:
    """Why the soak must stop now (died, over the RSS cap, no inference answered), or None."""
    if server.proc.poll() is not None:
        return f"server died (exit {server.proc.returncode})"
    rss = h.proc_status(server.proc.pid).get("VmRSS", 0)
    if rss > cap_mib * 1024:
        os.kill(server.proc.pid, signal.SIGKILL)
        return f"server RSS {rss / 1024:.0f} MiB passed --rss-cap-mib {cap_mib}: killed"
    if time.monotonic() - tally.last_answer > STALL_S:
        return f"no inference answered for {STALL_S:.0f} s"
    return None


async def guard(server: h.ServerProcess, load: Load, args: argparse.Namespace, samples: list):
    """Every 0.5 s: the checks above; a resource sample after the warm-up and then every
    ``--sample-every`` seconds."""
    started = samples[0]["started"]
    next_sample = started + WARMUP_S
    while not load.stop.is_set():
        why = guard_check(server, args.rss_cap_mib, load.tally)
        if why:
            load.tally.fail(why)
            load.stop.set()
            return
        if time.monotonic() >= next_sample:
            label = "warm" if len(samples) == 1 else "run"
            samples.append(sample(label, server.proc.pid, started, load.tally))
            next_sample += args.sample_every
        await asyncio.sleep(0.5)


async def health_watch(port: int, load: Load) -> None:
    """``/v2/health/ready`` every second; two misses in a row (each 10 s) stop the soak."""
    loop, misses = asyncio.get_running_loop(), 0
    while not load.stop.is_set():
        path = "/v2/health/ready"
        status = await loop.run_in_executor(None, h.http_status, port, path, HEALTH_TIMEOUT_S)
        misses = 0 if status == 200 else misses + 1
        if misses >= 2 and not load.stop.is_set():
            load.tally.fail(f"/v2/health/ready answered {status} twice in a row (10 s timeout)")
            load.stop.set()
            return
        await asyncio.sleep(1.0)


def grpc_ready(grpc_port: int) -> bool:
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(f"{h.HOST}:{grpc_port}")
    try:
        return bool(client.is_server_ready(client_timeout=10))
    except Exception:  # noqa: BLE001 - not ready is the answer
        return False
    finally:
        client.close()


# ---------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------
async def stop_load(workers: list[asyncio.Task], others: list[asyncio.Task], load: Load) -> None:
    load.stop.set()
    _, pending = await asyncio.wait(workers, timeout=REQUEST_TIMEOUT_S + 5)
    for task in [*pending, *others]:
        task.cancel()
    await load.mixer.drain()


async def soak(server: h.ServerProcess, args: argparse.Namespace) -> dict[str, Any]:
    pid, ports = server.proc.pid, {p: server.ports[p] for p in PROTOCOLS}
    tally, stop = Tally(), asyncio.Event()
    mixer = HostileMixer(args.hostile_every, hostile_kinds(args.bomb_mib), ports, tally)
    urls = {p: f"{h.HOST}:{port}" for p, port in ports.items()}
    load = Load(urls, tally, stop, mixer, args.workers / args.rate)
    started = time.monotonic()
    samples = [{**sample("start", pid, started, tally), "started": started}]
    combos = list(itertools.product(PROTOCOLS, MODELS))
    workers = [
        asyncio.create_task(worker(i, *combos[i % len(combos)], load)) for i in range(args.workers)
    ]
    others = [
        asyncio.create_task(guard(server, load, args, samples)),
        asyncio.create_task(health_watch(ports["http"], load)),
    ]
    try:
        await asyncio.wait_for(stop.wait(), args.seconds)
    except TimeoutError:
        pass
    elapsed = time.monotonic() - started
    await stop_load(workers, others, load)
    samples.append(sample("end", pid, started, tally))
    if server.proc.poll() is None:
        await asyncio.sleep(SETTLE_S)
        samples.append(sample("settled", pid, started, tally))
    samples[0].pop("started")
    return summarise(server, tally, mixer, samples, elapsed)


def summarise(
    server: h.ServerProcess, tally: Tally, mixer: HostileMixer, samples: list, elapsed: float
) -> dict[str, Any]:
    alive = server.proc.poll() is None
    serves = h.serves_after(server.ports["http"]) if alive else "no: server exited"
    if serves == "yes" and not grpc_ready(server.ports["grpc"]):
        serves = "no: gRPC ServerReady failed"
    if tally.wrong:
        tally.fail(f"wrong answers: {dict(tally.wrong)}")
    if serves != "yes":
        tally.fail(f"does not serve at the end ({serves})")
    answered = sum(tally.answered.values())
    return {
        "seconds": round(elapsed, 1),
        "answered": dict(tally.answered),
        "answered_total": answered,
        "answers_per_s": round(answered / elapsed, 1),
        "errors": dict(tally.errors),
        "error_examples": tally.examples,
        "wrong": dict(tally.wrong),
        "request_slots": mixer.slots,
        "hostile_launched": mixer.launched,
        "hostile_skipped": tally.hostile_skipped,
        "hostile_unfinished": mixer.launched - sum(tally.hostile.values()),
        "hostile": dict(sorted(tally.hostile.items())),
        "samples": samples,
        "max": {k: max(s[k] or 0 for s in samples) for k in ("rss_mib", "fds", "threads", "stubs")},
        "serves_at_end": serves,
        "failure": tally.failure,
    }


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------
def markdown(report: dict[str, Any], args: argparse.Namespace) -> str:
    verdict = f"FAILED: {report['failure']}" if report["failure"] else "OK"
    lines = [
        f"soak {report['seconds']} s, target {args.rate:g} req/s on {args.workers} workers, "
        f"{report['answers_per_s']} answers/s; hostile {report['hostile_launched']} of "
        f"{report['request_slots']} slots (skipped {report['hostile_skipped']}, unfinished "
        f"{report['hostile_unfinished']}); {verdict}",
        "",
        "| protocol/model | answered |",
        "|---|---|",
        *(f"| {k} | {n} |" for k, n in sorted(report["answered"].items())),
        "",
        "| error (normal requests) | count | example |",
        "|---|---|---|",
        *(
            f"| {k} | {n} | {report['error_examples'][k][:100]} |"
            for k, n in sorted(report["errors"].items())
        ),
        "",
        "| hostile request: outcome | count |",
        "|---|---|",
        *(f"| {k} | {n} |" for k, n in report["hostile"].items()),
        "",
        "| sample | t s | answered | server RSS MiB | fds | threads | stubs | stub RSS MiB |",
        "|---|---|---|---|---|---|---|---|",
    ]
    shown = [s for s in report["samples"] if s["label"] != "run"]
    for s in shown:
        lines.append(
            f"| {s['label']} | {s['t_s']} | {s['answered']} | {s['rss_mib']} | {s['fds']} "
            f"| {s['threads']} | {s['stubs']} | {s['stub_rss_mib']} |"
        )
    top = report["max"]
    lines.append(
        f"| max | | | {top['rss_mib']} | {top['fds']} | {top['threads']} | {top['stubs']} | |"
    )
    return "\n".join(lines)


def save(label: str, report: dict[str, Any], args: argparse.Namespace) -> None:
    data = json.loads(args.output.read_text()) if args.output.exists() else {}
    settings = {k: v for k, v in vars(args).items() if k not in ("output", "label")}
    data[label] = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "commit": h.git_commit(),
        "nproc": os.cpu_count(),
        "settings": settings,
        **report,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(data, indent=2) + "\n")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--rate", type=float, default=400.0, help="request slots per second")
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--hostile-every", type=int, default=100, help="0: none")
    parser.add_argument("--bomb-mib", type=int, default=1280, help="inflated size of the bombs")
    parser.add_argument("--rss-cap-mib", type=int, default=4096)
    parser.add_argument("--sample-every", type=float, default=30.0)
    parser.add_argument("--label", default="run", help="the key of this run in the JSON")
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument(
        "--server-arg", action="append", default=[], help="extra server flag (repeatable)"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    h.raise_own_nofile()
    for encoding in ("gzip", "deflate"):  # seconds of CPU each: not during the load
        h.bomb_body(encoding, args.bomb_mib)
    with tempfile.TemporaryDirectory(prefix="tritium-soak-") as tmp:
        repo = h.build_repository(Path(tmp), MODELS)
        server = h.start_server(repo, ["--allow-client-shm=true", *args.server_arg], models=MODELS)
        try:
            report = asyncio.run(soak(server, args))
            report["server_log_tail"] = h.server_log_tail(server, 20)
        finally:
            h.stop_server(server)
    print(markdown(report, args))
    save(args.label, report, args)
    return 1 if report["failure"] else 0


if __name__ == "__main__":
    sys.exit(main())
