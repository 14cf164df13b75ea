"""Soak: moderate HTTP + gRPC load with 1 % hostile requests mixed in; does the server last?

The command line of the soak suite (issue 10, "Figures to report"). A fresh server
(bench/server.py ``start_ready``: bench/process.py ``ServerProcess``, 127.0.0.1, port 0,
``SERVER_ARGS``) over a repository holding the examples
``simple`` (ONNX) and ``add_sub_python`` (Python backend: one stub) for the normal load, and
the models the hostile requests use (``soak_repository``: ``simple_sequence``, the hostile
models of testkit/hostile_models.py with the children they call, ``big_output``, and
bench/soak_models.py's), in explicit model control mode with every model loaded by name.
Server flags go through ``--server-arg`` (e.g. ``--server-arg=--workers=2``; this script's own
``--workers`` is its client coroutines). This process is the client:

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
  the bound, Health.Watch streams, unended sequences, hostile models); then issue 44's
  (bench/soak_resource_attacks.py and bench/soak_shared_state_attacks.py: 500,000 empty
  inputs, a costly request on a model that looks fast, zero-window connections held,
  crafted client addresses, cache poisoning, large uploads then kill -9 of a worker).
  ``--hostile`` keeps only the kinds it names. At most
  ``HOSTILE_IN_FLIGHT`` run at once; a slot finding them all busy is counted as skipped (the
  rotation waits for it); a kind with a ``gap_s`` is passed over until that long after its
  last run.

Reported: requests answered per protocol/model, wrong answers, lost requests (no answer: a
client timeout, a broken or refused connection) and error answers by kind (HTTP status / gRPC
code / client exception, with one message each), per hostile kind its runs, longest run and
outcomes (and the streams or sockets of each outcome, summed; the largest of its ``max``
figures), its findings, the workers restarted, and the server's RSS, open fds and threads,
its workers' and its stub processes' (count, RSS), and each process's (supervisor, each
worker, the stubs under each) before the load, after a 10 s warm-up, every
``--sample-every`` seconds, at the end, and after ``--settle`` idle seconds; the maximum of
each and the growth from the warm-up to the end and to the settled sample. A
watchdog polls ``/v2/health/ready`` every second (400, not ready, is an answer: a hostile
model's stub restarting makes a strict server not ready).

The exit status is 1 when the server died, stopped answering (health unanswered 10 s twice
in a row, not ready for 60 s, or no inference answered for 30 s), passed ``--rss-cap-mib``
(the supervisor and its workers together; killed then), gave a wrong answer, a hostile
kind saw a finding (an outcome with ``!`` or ``WRONG``), or does not serve at the end; 0
otherwise.
Results: a summary on stdout and ``bench/results/soak.json`` (one entry per ``--label``).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import RESULTS_DIR
from bench.hostile_clients import HostileKind, hostile_kinds
from bench.probes import process_tree, raise_own_nofile, server_rss_kib
from bench.raw_http import HOST, bomb_body, http_status, serves_after
from bench.server import Server, model_subset, start_ready
from bench.soak_attacks import SEQUENCE_MODEL, attack_kinds
from bench.soak_load import REQUEST_TIMEOUT_S, HostileMixer, Load, Tally, sample, worker
from bench.soak_models import MODELS as RESOURCE_MODELS
from bench.soak_models import write_models
from bench.soak_report import markdown, save
from bench.soak_resource_attacks import resource_attack_kinds
from bench.soak_shared_state_attacks import Target, crafted_hosts, metric
from testkit.grpc_raw import BIG_OUTPUT, write_big_output
from bench.kit.models import build_test_repository

MODELS = ("simple", "add_sub_python")  # the normal load's
# What the hostile requests use (bench/soak_attacks.py): an example sequence model, the
# hostile Python models of testkit/hostile_models.py and the children they call.
EXAMPLE_HOSTILE_MODELS = (SEQUENCE_MODEL,)
TEST_HOSTILE_MODELS = (
    "hostile_truncate",
    "hostile_frames",
    "hostile_self_call",
    "hostile_fork",
    "identity_onnx_queued",
    "identity_fp32",
)
# and issue 44's attacks (bench/soak_resource_attacks.py): bench/soak_models.py
ALL_MODELS = (
    *MODELS,
    *EXAMPLE_HOSTILE_MODELS,
    *TEST_HOSTILE_MODELS,
    BIG_OUTPUT,
    *RESOURCE_MODELS,
)
# The soak server's own flags, so that the bounds under test exist and act within a run:
# the sequence backlog is unbounded by default (as Triton's); stalled streams are reset at
# 60 s by default (longer than a hostile run holds them); hostile models crash their stubs
# more often than the default 5 restarts a minute.
# Explicit model control, every model loaded by name at the start: the upload kind loads and
# unloads a model of its own. The response cache and the per-client bound exist for the
# cache-poisoning and crafted-hosts kinds (the bound well above what 127.0.0.1 holds: the
# zero-window kind keeps 1,200 calls in flight).
SERVER_ARGS = (
    "--allow-client-shm=true",
    "--sequence-backlog-limit=16",
    "--grpc-stall-timeout-secs=5",
    "--model-instance-max-restarts=1000000",
    "--model-control-mode=explicit",
    *(f"--load-model={model}" for model in ALL_MODELS),
    "--cache-config=local,size=16777216",
    "--max-inflight-per-client=2048",
)
START_S = 240.0  # every model ready, in every worker, on a busy machine
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
    """Why the soak must stop now (died, over the RSS cap, no inference answered), or None.
    The cap is on the server's RSS: the process, or the supervisor and its workers."""
    if server.proc.poll() is not None:
        return f"server died (exit {server.proc.returncode})"
    rss = server_rss_kib(server.pid)
    if rss > cap_mib * 1024:
        for pid, _, _ in reversed(process_tree(server.pid)):
            os.kill(pid, signal.SIGKILL)
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


def soak_kinds(args: argparse.Namespace, target: Target | None = None) -> list[HostileKind]:
    """The hostile rotation: issue 10's requests, then issue 22's and issue 44's attacks
    (those needing the server's pid or calibration read ``target``, filled once it is up);
    ``--hostile`` keeps only the kinds it names."""
    target = target or Target()
    kinds = [*hostile_kinds(args.bomb_mib), *attack_kinds(), *resource_attack_kinds(target)]
    if not args.hostile:
        return kinds
    wanted = args.hostile.split(",")
    unknown = sorted(set(wanted) - {k.name for k in kinds})
    if unknown:
        known = ", ".join(k.name for k in kinds)
        raise SystemExit(f"--hostile: unknown kind(s) {', '.join(unknown)}; known: {known}")
    return [k for k in kinds if k.name in wanted]


async def soak(server: Server, args: argparse.Namespace, target: Target) -> dict[str, Any]:
    pid, ports = server.pid, {p: server.ports[p] for p in PROTOCOLS}
    tally, stop = Tally(), asyncio.Event()
    mixer = HostileMixer(args.hostile_every, soak_kinds(args, target), ports, tally)
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
    restarts = metric(server.ports["metrics"], "tritium_worker_restarts_total ")
    if server.proc.poll() is None:
        await asyncio.sleep(args.settle)
        samples.append(sample("settled", pid, started, tally))
    samples[0].pop("started")
    return {**summarise(server, tally, mixer, samples, elapsed), "worker_restarts": restarts}


GROWN = ("rss_mib", "fds", "threads", "workers", "worker_rss_mib", "worker_fds", "stubs",
         "stub_rss_mib", "total_rss_mib")  # fmt: skip


def growth(samples: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, float]]]:
    """Each resource at the end and at the settled sample (after ``--settle`` idle seconds),
    against the sample before the load (``start``) and the one after the warm-up (``warm``,
    which may hold hostile connections in flight): flat means settled = start, or = warm."""
    by_label = {s["label"]: s for s in samples}
    return {
        label: {
            f"from_{base}": {
                k: round((by_label[label].get(k) or 0) - (by_label[base].get(k) or 0), 1)
                for k in GROWN
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
    if tally.findings:
        tally.fail(f"hostile findings: {dict(tally.findings)}")
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
        "lost": dict(tally.lost),
        "server_workers": samples[0]["workers"] or 1,
        "request_slots": mixer.slots,
        "hostile_launched": mixer.launched,
        "hostile_skipped": tally.hostile_skipped,
        "hostile_unfinished": mixer.launched - sum(tally.hostile.values()),
        "hostile": dict(sorted(tally.hostile.items())),
        "health_polls": dict(tally.health),
        "hostile_runs": dict(sorted(tally.hostile_runs.items())),
        "hostile_items": dict(sorted(tally.hostile_items.items())),
        "hostile_max_s": dict(sorted(tally.hostile_max_s.items())),
        "hostile_peaks": dict(sorted(tally.hostile_peaks.items())),
        "findings": dict(sorted(tally.findings.items())),
        "samples": samples,
        "max": {k: max(s[k] or 0 for s in samples) for k in GROWN},
        "growth": growth(samples),
        "serves_at_end": serves,
        "failure": tally.failure,
    }


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


def soak_repository(tmp: Path) -> tuple[Path, dict[str, int]]:
    """The example models the soak uses (bench/server.py ``model_subset``) with the test
    models of the hostile requests linked in next to them, and bench/soak_models.py's; the
    calibration of its costly models."""
    repo = model_subset(tmp, (*MODELS, *EXAMPLE_HOSTILE_MODELS))
    test_repo = build_test_repository(tmp / "test", TEST_HOSTILE_MODELS)
    write_big_output(test_repo)
    for model in (*TEST_HOSTILE_MODELS, BIG_OUTPUT):
        (repo / model).symlink_to(test_repo / model, target_is_directory=True)
    return repo, write_models(repo)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    raise_own_nofile()
    for encoding in ("gzip", "deflate"):  # seconds of CPU each: not during the load
        bomb_body(encoding, args.bomb_mib)
    target = Target()
    soak_kinds(args, target)  # an unknown --hostile kind: refused before the server starts
    crafted_hosts()  # ~0.5 s of hashing: not during the load
    with tempfile.TemporaryDirectory(prefix="tritium-soak-") as tmp:
        repo, target.calibration = soak_repository(Path(tmp))
        server_args = [*SERVER_ARGS, *args.server_arg]
        server = start_ready(repo, Path(tmp) / "server", server_args, ALL_MODELS, timeout=START_S)
        target.pid, target.ports = server.pid, dict(server.ports)
        try:
            report = asyncio.run(soak(server, args, target))
            report["server_log_tail"] = server.log_tail(20).splitlines()
        finally:
            server.stop(10.0)
    print(markdown(report, args))
    save(args.label, report, args)
    return 1 if report["failure"] else 0
