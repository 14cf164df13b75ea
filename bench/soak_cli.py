"""Soak: moderate HTTP + gRPC load with 1 % hostile requests mixed in; does the server last?

The command line of bench/soak.py (issue 10, "Figures to report"; bench/README.md "Soak with
hostile requests"). A fresh server (bench/server.py ``start_ready``: the tests'
``ServerProcess``, 127.0.0.1, port 0, ``SERVER_ARGS``) over a repository holding the examples
``simple`` (ONNX) and ``add_sub_python`` (Python backend: one stub) for the normal load, and
the models the hostile requests use (``soak_repository``: ``simple_sequence``, the hostile
models of tests/support/hostile_models.py with the children they call, ``big_output``). This
process is the client:

* ``--workers`` coroutines on tritonclient's asyncio clients, spread over HTTP (binary) and
  gRPC × the two models (one client each), paced together at ``--rate`` requests/s (open
  loop: a worker more than 1 s behind its schedule drops the backlog rather than bursting).
  Every answer is checked (``OUTPUT0 = INPUT0 + INPUT1``, ``OUTPUT1 = INPUT0 - INPUT1``).
  bench/soak_load.py has the workers and the mixer.
* every ``--hostile-every``-th request slot (1 %) is a hostile request instead, run on a
  thread with raw sockets (bench/hostile_clients.py ``hostile_kinds``), in rotation: gzip and
  deflate bombs (``--bomb-mib`` inflated), a truncated body (Content-Length 64 KiB, 32 KiB
  sent, the write side shut), a disconnect mid-body, a 1 MiB header, and system shared-memory
  registrations with a key escaping /dev/shm (``/../../etc/passwd``) over HTTP and gRPC
  (registration only; one that is accepted is unregistered at once and reported); then issue
  22's attacks (bench/soak_attacks.py: control-frame floods, a DATA frame packed with empty
  messages, silent sockets and partial prefaces, stalled streams, a burst of streams beyond
  the bound, Health.Watch streams, unended sequences, hostile models). ``--hostile`` keeps
  only the kinds it names. At most ``HOSTILE_IN_FLIGHT`` run at once; a slot finding them
  all busy is counted as skipped (the rotation waits for it).

Reported: requests answered per protocol/model, errors by kind (HTTP status / gRPC code /
client exception, with one message each), wrong answers, per hostile kind its runs, longest
run and outcomes (and the streams or sockets of each outcome, summed), and the server's RSS,
open fds and threads and its stub processes (count, RSS) before the load, after a 10 s
warm-up, every ``--sample-every`` seconds, at the end, and after ``--settle`` idle seconds;
the maximum of each and the growth from the warm-up to the end and to the settled sample. A
watchdog polls ``/v2/health/ready`` every second (400, not ready, is an answer: a hostile
model's stub restarting makes a strict server not ready).

The exit status is 1 when the server died, stopped answering (health unanswered 10 s twice
in a row, not ready for 60 s, or no inference answered for 30 s), passed ``--rss-cap-mib``
(it is killed then), gave a wrong answer, or does not serve at the end; 0 otherwise.
Results: a summary on stdout and ``bench/results/soak.json`` (one entry per ``--label``).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import itertools
import json
import os
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import RESULTS_DIR
from bench.hostile_clients import HostileKind, hostile_kinds
from bench.probes import proc_status, raise_own_nofile
from bench.raw_http import HOST, bomb_body, http_status, serves_after
from bench.report import git_describe
from bench.server import Server, model_subset, start_ready
from bench.soak_attacks import SEQUENCE_MODEL, attack_kinds
from bench.soak_load import REQUEST_TIMEOUT_S, HostileMixer, Load, Tally, sample, worker
from tests.support.grpc_raw import BIG_OUTPUT, write_big_output
from tests.support.models import build_test_repository

MODELS = ("simple", "add_sub_python")  # the normal load's
# What the hostile requests use (bench/soak_attacks.py): an example sequence model, the
# hostile Python models of tests/support/hostile_models.py and the children they call.
EXAMPLE_HOSTILE_MODELS = (SEQUENCE_MODEL,)
TEST_HOSTILE_MODELS = (
    "hostile_truncate",
    "hostile_frames",
    "hostile_self_call",
    "hostile_fork",
    "identity_onnx_queued",
    "identity_fp32",
)
ALL_MODELS = (*MODELS, *EXAMPLE_HOSTILE_MODELS, *TEST_HOSTILE_MODELS, BIG_OUTPUT)
# The soak server's own flags, so that the bounds under test exist and act within a run:
# the sequence backlog is unbounded by default (as Triton's); stalled streams are reset at
# 60 s by default (longer than a hostile run holds them); hostile models crash their stubs
# more often than the default 5 restarts a minute.
SERVER_ARGS = (
    "--allow-client-shm=true",
    "--sequence-backlog-limit=16",
    "--grpc-stall-timeout-secs=5",
    "--model-instance-max-restarts=1000000",
)
PROTOCOLS = ("http", "grpc")
RESULTS = RESULTS_DIR / "soak.json"
HEALTH_TIMEOUT_S = 10.0
NOT_READY_S = 60.0
STALL_S = 30.0  # no inference answered for this long: the server stopped answering
WARMUP_S = 10.0


# ---------------------------------------------------------------------------------------------
# Watching the server
# ---------------------------------------------------------------------------------------------
def guard_check(server: Server, cap_mib: int, tally: Tally) -> str | None:
    """Why the soak must stop now (died, over the RSS cap, no inference answered), or None."""
    if server.proc.poll() is not None:
        return f"server died (exit {server.proc.returncode})"
    rss = proc_status(server.pid).get("VmRSS", 0)
    if rss > cap_mib * 1024:
        os.kill(server.pid, signal.SIGKILL)
        return f"server RSS {rss / 1024:.0f} MiB passed --rss-cap-mib {cap_mib}: killed"
    if time.monotonic() - tally.last_answer > STALL_S:
        return f"no inference answered for {STALL_S:.0f} s"
    return None


async def guard(server: Server, load: Load, args: argparse.Namespace, samples: list) -> None:
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
            samples.append(sample(label, server.pid, started, load.tally))
            next_sample += args.sample_every
        await asyncio.sleep(0.5)


async def health_watch(port: int, load: Load) -> None:
    """``/v2/health/ready`` every second; two misses in a row (no answer in 10 s, or an
    answer other than 200 and 400) stop the soak. 400 is "not ready": with strict readiness
    (the default) while a hostile model's stub restarts; counted, and more than
    ``NOT_READY_S`` of it in a row stops the soak too."""
    loop, misses, not_ready_since = asyncio.get_running_loop(), 0, None
    while not load.stop.is_set():
        path = "/v2/health/ready"
        status = await loop.run_in_executor(None, http_status, port, path, HEALTH_TIMEOUT_S)
        misses = 0 if status in (200, 400) else misses + 1
        load.tally.health[str(status)] += 1
        now = time.monotonic()
        not_ready_since = (not_ready_since or now) if status == 400 else None
        why = None
        if misses >= 2:
            why = f"/v2/health/ready answered {status} twice in a row (10 s timeout)"
        elif not_ready_since is not None and now - not_ready_since > NOT_READY_S:
            why = f"/v2/health/ready not ready for more than {NOT_READY_S:.0f} s"
        if why and not load.stop.is_set():
            load.tally.fail(why)
            load.stop.set()
            return
        await asyncio.sleep(1.0)


def grpc_ready(grpc_port: int) -> bool:
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(f"{HOST}:{grpc_port}")
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


def soak_kinds(args: argparse.Namespace) -> list[HostileKind]:
    """The hostile rotation: issue 10's requests, then issue 22's attacks; ``--hostile``
    keeps only the kinds it names."""
    kinds = [*hostile_kinds(args.bomb_mib), *attack_kinds()]
    if not args.hostile:
        return kinds
    wanted = args.hostile.split(",")
    unknown = sorted(set(wanted) - {k.name for k in kinds})
    if unknown:
        known = ", ".join(k.name for k in kinds)
        raise SystemExit(f"--hostile: unknown kind(s) {', '.join(unknown)}; known: {known}")
    return [k for k in kinds if k.name in wanted]


async def soak(server: Server, args: argparse.Namespace) -> dict[str, Any]:
    pid, ports = server.pid, {p: server.ports[p] for p in PROTOCOLS}
    tally, stop = Tally(), asyncio.Event()
    mixer = HostileMixer(args.hostile_every, soak_kinds(args), ports, tally)
    urls = {p: f"{HOST}:{port}" for p, port in ports.items()}
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
        await asyncio.sleep(args.settle)
        samples.append(sample("settled", pid, started, tally))
    samples[0].pop("started")
    return summarise(server, tally, mixer, samples, elapsed)


GROWN = ("rss_mib", "fds", "threads", "stubs", "stub_rss_mib")


def growth(samples: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, float]]]:
    """Each resource at the end and at the settled sample (after ``--settle`` idle seconds),
    against the sample before the load (``start``) and the one after the warm-up (``warm``,
    which may hold hostile connections in flight): flat means settled = start, or = warm."""
    by_label = {s["label"]: s for s in samples}
    return {
        label: {
            f"from_{base}": {
                k: round((by_label[label][k] or 0) - (by_label[base][k] or 0), 1) for k in GROWN
            }
            for base in ("start", "warm")
            if base in by_label
        }
        for label in ("end", "settled")
        if label in by_label
    }


def summarise(
    server: Server, tally: Tally, mixer: HostileMixer, samples: list, elapsed: float
) -> dict[str, Any]:
    alive = server.proc.poll() is None
    serves = serves_after(server.ports["http"]) if alive else "no: server exited"
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
        "health_polls": dict(tally.health),
        "hostile_runs": dict(sorted(tally.hostile_runs.items())),
        "hostile_items": dict(sorted(tally.hostile_items.items())),
        "hostile_max_s": dict(sorted(tally.hostile_max_s.items())),
        "samples": samples,
        "max": {k: max(s[k] or 0 for s in samples) for k in ("rss_mib", "fds", "threads", "stubs")},
        "growth": growth(samples),
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
        f"{report['hostile_unfinished']}); health polls {report['health_polls']}; {verdict}",
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
        "| hostile kind | runs | longest s | outcomes (runs) | streams/sockets (summed) |",
        "|---|---|---|---|---|",
        *kind_rows(report),
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


def kind_rows(report: dict[str, Any]) -> list[str]:
    rows = []
    for kind, runs in report["hostile_runs"].items():
        outcomes = "; ".join(
            f"{k.split(': ', 1)[1]} ×{n}" for k, n in report["hostile"].items()
            if k.split(": ", 1)[0] == kind
        )  # fmt: skip
        items = "; ".join(
            f"{k.split(': ', 1)[1]} {n}" for k, n in report["hostile_items"].items()
            if k.split(": ", 1)[0] == kind
        )  # fmt: skip
        rows.append(f"| {kind} | {runs} | {report['hostile_max_s'][kind]} | {outcomes} "
                    f"| {items} |")  # fmt: skip
    return rows


def save(label: str, report: dict[str, Any], args: argparse.Namespace) -> None:
    data = json.loads(args.output.read_text()) if args.output.exists() else {}
    settings = {k: v for k, v in vars(args).items() if k not in ("output", "label")}
    data[label] = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "commit": git_describe(),
        "nproc": os.cpu_count(),
        "settings": settings,
        **report,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(data, indent=2) + "\n")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--rate", type=float, default=400.0, help="request slots per second")
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--hostile-every", type=int, default=100, help="0: none")
    parser.add_argument("--bomb-mib", type=int, default=1280, help="inflated size of the bombs")
    parser.add_argument("--rss-cap-mib", type=int, default=4096)
    parser.add_argument("--sample-every", type=float, default=30.0)
    parser.add_argument(
        "--settle", type=float, default=15.0, help="idle seconds before the settled sample"
    )
    parser.add_argument(
        "--hostile", default="", help="comma-separated hostile kinds (default: all)"
    )
    parser.add_argument("--label", default="run", help="the key of this run in the JSON")
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument(
        "--server-arg", action="append", default=[], help="extra server flag (repeatable)"
    )
    return parser.parse_args(argv)


def soak_repository(tmp: Path) -> Path:
    """The example models the soak uses (bench/server.py ``model_subset``) with the test
    models of the hostile requests linked in next to them."""
    repo = model_subset(tmp, (*MODELS, *EXAMPLE_HOSTILE_MODELS))
    test_repo = build_test_repository(tmp / "test", TEST_HOSTILE_MODELS)
    write_big_output(test_repo)
    for model in (*TEST_HOSTILE_MODELS, BIG_OUTPUT):
        (repo / model).symlink_to(test_repo / model, target_is_directory=True)
    return repo


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    raise_own_nofile()
    for encoding in ("gzip", "deflate"):  # seconds of CPU each: not during the load
        bomb_body(encoding, args.bomb_mib)
    soak_kinds(args)  # an unknown --hostile kind: refused before the server starts
    with tempfile.TemporaryDirectory(prefix="tritium-soak-") as tmp:
        repo = soak_repository(Path(tmp))
        server_args = [*SERVER_ARGS, *args.server_arg]
        server = start_ready(repo, Path(tmp) / "server", server_args, ALL_MODELS)
        try:
            report = asyncio.run(soak(server, args))
            report["server_log_tail"] = server.log_tail(20).splitlines()
        finally:
            server.stop(10.0)
    print(markdown(report, args))
    save(args.label, report, args)
    return 1 if report["failure"] else 0
