"""The ``grpc`` list (issue 12): tritium's gRPC transport (its own HTTP/2 server on the event
loop, ``h2``) against the bare grpc.aio server of bench/grpc_floor.py (the floor) in one run,
under the same client (tritonclient's asyncio gRPC client, closed loop), with binary HTTP on
the h2 server as the reference. Each runs on a server of its own (``Target``); the issue's
targets are checked as PASS/FAIL lines under the table, never as assertions. grpcio's server,
the previous transport, is gone (bench/results/grpc.* keep its last side-by-side run)."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from bench.common import RESULTS_DIR, Issue, Rows, Scenario, Target
from bench.grpc_floor import start_server
from bench.report import CONC, CPU, MODEL, PROTOCOL, RATE, Column, rows_table
from bench.scenarios.shm import IDENTITY_MODEL, build_identity_model
from bench.server import Server

H2, FLOOR = "h2", "floor"
MODELS = ("simple", "add_sub_python")
DYNBATCH = "_dynbatch"  # the bench's copy of a model with ``dynamic_batching { }`` added
# (protocol, concurrency): unary at 1 and 16, one stream with 16 in flight, 16 streams
GRPC_MODES = (("grpc", 1), ("grpc", 16), ("grpc-stream", 16), ("grpc-streams", 16))
HTTP_MODES = (("http", 1), ("http", 16))
# What each h2 row is compared with (the JSON's ``vs``): the name and the reference row's key
# (model, protocol, concurrency, target) for an h2 row of model, protocol, concurrency.
REFERENCES: dict[str, Callable[[str, str, int], tuple[str, str, int, str]]] = {
    "floor": lambda model, protocol, conc: ("simple", protocol, conc, FLOOR),
    "http": lambda model, protocol, conc: (model, "http", conc, H2),
}
BASELINE_SAME_AS = {model + DYNBATCH: model for model in MODELS}


def transport_scenarios() -> list[Scenario]:
    """Per model (``simple``, ``add_sub_python``, and each with dynamic batching): unary gRPC
    at concurrency 1 and 16, one ModelStreamInfer stream with 16 in flight and 16 streams on
    the h2 server and on the floor (``simple`` only, it answers nothing else), binary HTTP at
    1 and 16 on the h2 server; then a 16 MiB FP32 round trip at concurrency 1 over unary gRPC
    and HTTP on the h2 server (the floor's grpc.aio takes 4 MiB at most)."""
    scenarios = []
    for model in (m + suffix for m in MODELS for suffix in ("", DYNBATCH)):
        for protocol, conc in GRPC_MODES:
            floor = (FLOOR,) if model == "simple" else ()
            scenarios += [Scenario(model, protocol, conc, target=t) for t in (H2, *floor)]
        scenarios += [Scenario(model, protocol, conc, target=H2) for protocol, conc in HTTP_MODES]
    return scenarios + [Scenario(IDENTITY_MODEL, p, 1, target=H2) for p in ("grpc", "http")]


# ---------------------------------------------------------------------------------------------
# The servers: tritium (only the models it needs loaded), the floor.
# ---------------------------------------------------------------------------------------------
def tritium(repo: Path, workdir: Path, args: tuple[str, ...], models: list[str]) -> Server:
    load = ("--model-control-mode=explicit", *(f"--load-model={m}" for m in models))
    return Server(repo, workdir, (*args, *load))


class FloorServer:
    """bench/grpc_floor.py's grpc.aio server (on uvloop): ``ModelInfer`` and
    ``ModelStreamInfer`` answer the ``simple`` contract for any model name, with no repository,
    validation or scheduling. gRPC only, no statistics."""

    statistics = False

    def __init__(self, workdir: Path) -> None:
        self.log_path = workdir / "floor.log"
        self._log: IO[bytes] = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        try:
            self.proc, self.port = start_server("aio", self._log)
        except BaseException:
            self._log.close()
            raise

    @property
    def pid(self) -> int:
        return self.proc.pid

    def url(self, key: str) -> str:
        return f"127.0.0.1:{self.port}"

    def wait_ready(self, models: list[str], timeout: float = 0.0) -> None:
        """Ready once its channel connected (``start_server``); it has no models."""

    def healthy(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        if not self._log.closed:
            self._log.flush()
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> int:
        self.proc.kill()
        self.proc.wait()
        self._log.close()
        return self.proc.returncode


TARGETS = {
    H2: Target(tritium, "tritium (its own HTTP/2 gRPC transport)"),
    FLOOR: Target(
        lambda repo, workdir, args, models: FloorServer(workdir),
        "bare grpc.aio server on uvloop (bench/grpc_floor.py)",
        grpc_only=True,
    ),
}


def build_models(repo: Path) -> None:
    """The 16 MiB ``identity_fp32`` (the shm list's) and a copy of each of MODELS with
    ``dynamic_batching { }`` (default queue delay 0) under ``<model>_dynbatch``, in the
    bench's repository only."""
    build_identity_model(repo)
    for model in MODELS:
        variant = repo / (model + DYNBATCH)
        shutil.copytree(repo / model, variant, dirs_exist_ok=True)
        config = (repo / model / "config.pbtxt").read_text()
        config = re.sub(r'(?m)^name:\s*"[^"]*"', f'name: "{variant.name}"', config)
        (variant / "config.pbtxt").write_text(config + "dynamic_batching { }\n")


# ---------------------------------------------------------------------------------------------
# Comparisons, tables and the issue's targets.
# ---------------------------------------------------------------------------------------------
# The measured rows by (model, protocol, concurrency, target).
Measured = dict[tuple[str, str, int, str], dict[str, Any]]


def _key(row: dict[str, Any]) -> tuple[str, str, int, str]:
    return row["model"], row["protocol"], row["concurrency"], row["target"]


def _measured(rows: Rows) -> Measured:
    return {_key(row): row for row in rows if "infer_per_s" in row}


def compare(rows: Rows) -> None:
    """Each measured h2 gRPC row gets ``vs``: for each of REFERENCES measured in the run, its
    infer/s, p50 and server CPU per inference ÷ the reference row's."""
    measured = _measured(rows)
    for (model, protocol, conc, target), row in measured.items():
        if target != H2 or not protocol.startswith("grpc"):
            continue
        vs = {}
        for name, reference in REFERENCES.items():
            ref = measured.get(reference(model, protocol, conc))
            if ref is not None:
                vs[name] = {
                    k: row[k] / ref[k] if ref[k] else None
                    for k in ("infer_per_s", "p50_ms", "server_cpu_us")
                }
        row["vs"] = vs


def _vs(name: str, key: str) -> Callable[[dict[str, Any]], Any]:
    return lambda row: (row.get("vs", {}).get(name) or {}).get(key)


SERVER = Column("server", "target", left=True)
COLUMNS = [
    MODEL,
    PROTOCOL,
    CONC,
    SERVER,
    *RATE,
    *CPU,
    Column("other cores", "other_cpu_util", 2),
    Column("thr ÷ floor", _vs("floor", "infer_per_s"), 2),
    Column("thr ÷ HTTP", _vs("http", "infer_per_s"), 2),
]
LARGE_COLUMNS = [
    MODEL,
    PROTOCOL,
    CONC,
    SERVER,
    Column("infer/s", "infer_per_s", 1),
    Column("MB/s", "mb_per_s"),
    Column("p50 ms", "p50_ms", 1),
    Column("p99 ms", "p99_ms", 1),
    Column("server CPU ms/inf", lambda r: r["server_cpu_us"] / 1e3, 1),
    Column("client CPU ms/inf", lambda r: r["client_cpu_us"] / 1e3, 1),
    Column("other cores", "other_cpu_util", 2),
    Column("p50 ÷ HTTP", _vs("http", "p50_ms"), 2),
]


# The committed result of the ``foundation`` list: its binary HTTP ``simple`` c16 row is what
# HTTP did before this work, the reference of the "no regression over HTTP" target.
FOUNDATION = RESULTS_DIR / "foundation.json"
HTTP_KEPT = 0.9  # this run's HTTP ÷ the recorded one: the machine is noisy, 10 % is noise


@dataclass(frozen=True)
class Goal:
    """One of the issue's targets for the h2 transport: ``value(measured)`` reads it from the
    run's rows (None when a row it needs is missing or failed); ``met(value)``."""

    text: str
    value: Callable[[Measured], float | None]
    met: Callable[[float], bool]
    unit: str  # a format for the value
    missing: str = "a row it needs is missing or failed"  # why a None value is n/a


def _read(protocol: str, conc: int, key: str, vs: str | None = None) -> Callable[..., Any]:
    """``simple``'s ``key`` on (protocol, conc) of the h2 server; with ``vs`` (a name of
    REFERENCES) its ratio to that reference row's."""

    def value(measured: Measured) -> float | None:
        row = measured.get(("simple", protocol, conc, H2))
        if row is None or vs is None:
            return None if row is None else row[key]
        ref = measured.get(REFERENCES[vs]("simple", protocol, conc))
        return row[key] / ref[key] if ref and ref[key] else None

    return value


def recorded_http(path: Path | None = None) -> float | None:
    """infer/s of the binary HTTP ``simple`` c16 row of the committed foundation result
    (``FOUNDATION``), or None when there is no such file or row."""
    try:
        report = json.loads((path or FOUNDATION).read_text())
    except (OSError, ValueError):
        return None
    for row in report.get("scenarios", []):
        key = (row.get("model"), row.get("protocol"), row.get("concurrency"))
        if key == ("simple", "http", 16) and row.get("infer_per_s"):
            return float(row["infer_per_s"])
    return None


def _http_kept(measured: Measured) -> float | None:
    """This run's binary HTTP ``simple`` c16 (h2 server) ÷ the recorded foundation figure."""
    row, before = measured.get(("simple", "http", 16, H2)), recorded_http()
    return row["infer_per_s"] / before if row is not None and before else None


GOALS = (
    Goal(
        "unary `simple` at c16 ≥ 1.8 × the grpc.aio floor in the same run (infer/s)",
        _read("grpc", 16, "infer_per_s", "floor"),
        lambda v: v >= 1.8,
        "{:.2f}×",
    ),
    Goal(
        "server CPU per unary call (`simple`, c16) ≤ 150 µs",
        _read("grpc", 16, "server_cpu_us"),
        lambda v: v <= 150,
        "{:.0f} µs",
    ),
    Goal(
        "p50 at c1 (unary `simple`) ≤ 0.45 ms",
        _read("grpc", 1, "p50_ms"),
        lambda v: v <= 0.45,
        "{:.3f} ms",
    ),
    Goal(
        "16 streams (`simple`, one request in flight each) ≥ 10,000 infer/s",
        _read("grpc-streams", 16, "infer_per_s"),
        lambda v: v >= 10_000,
        "{:,.0f}/s",
    ),
    Goal(
        f"no regression over HTTP: binary HTTP `simple` at c16 in this run ÷ the same row of "
        f"bench/results/foundation.json (infer/s) ≥ {HTTP_KEPT} (a noisy machine)",
        _http_kept,
        lambda v: v >= HTTP_KEPT,
        "{:.2f}×",
        "no binary HTTP `simple` c16 row in this run, or none recorded",
    ),
)


def goal_lines(rows: Rows) -> list[str]:
    """PASS/FAIL for each of GOALS on the h2 rows; a row whose machine was busy with other
    processes (> 0.1 cores) is flagged."""
    measured = _measured(rows)
    lines = ["", "Targets of issue 12 (h2 transport):", ""]
    for goal in GOALS:
        value = goal.value(measured)
        if value is None:
            verdict = f"n/a ({goal.missing})"
        else:
            verdict = f"{goal.unit.format(value)} → **{'PASS' if goal.met(value) else 'FAIL'}**"
        lines.append(f"- {goal.text}: {verdict}")
    busy = [r["other_cpu_util"] for r in measured.values() if r["other_cpu_util"] > 0.1]
    if busy:
        lines += [
            "",
            f"⚠ other processes used more than 0.1 cores during {len(busy)} of "
            f"{len(measured)} rows (up to {max(busy):.2f}): those figures are disturbed.",
        ]
    return lines


def table(rows: Rows) -> list[str]:
    small = [r for r in rows if r["model"] != IDENTITY_MODEL]
    large = [r for r in rows if r["model"] == IDENTITY_MODEL]
    return (
        rows_table(COLUMNS, small)
        + goal_lines(small)
        + rows_table(
            LARGE_COLUMNS,
            large,
            f"16 MiB tensors: `{IDENTITY_MODEL}` (ONNX Identity, FP32 [4194304] in and out), "
            "one client; MB/s counts input + output bytes.",
        )
    )


NOTE = (
    "Each server is its own process, started for its first row and stopped after its last; "
    "the rows alternate between them (the other idle meanwhile). `h2` = tritium, its own "
    "HTTP/2 gRPC transport (with only the rows' models loaded, "
    "`--model-control-mode=explicit`), `floor` = the "
    "bare grpc.aio server of bench/grpc_floor.py on uvloop (add/sub of the `simple` inputs "
    "for any model name, no repository, validation or scheduling; ModelStreamInfer answers "
    "one request after the other). The client is the same for all: tritonclient's asyncio "
    "gRPC client (binary HTTP: its aio HTTP client), closed loop, one client per in-flight "
    "request for unary; `grpc-stream` = one stream with `conc` requests in flight, "
    "`grpc-streams` = `conc` streams with one each. `*_dynbatch` is the bench's copy of the "
    "model with `dynamic_batching { }`. thr ÷ floor / HTTP (h2 rows): infer/s ÷ "
    "that of the floor's `simple` row of the same protocol and concurrency / the binary HTTP "
    "row of the same model and concurrency on the h2 server (the JSON's "
    "`vs` also has p50 and server CPU). other cores: CPU the machine's other processes used "
    "during the window."
)
ISSUE = Issue(
    "grpc",
    transport_scenarios,
    ratios="ratios between the servers' rows (see below); the baselines at the end are "
    "not used in them.",
    note=NOTE,
    table=table,
    row_ratios=compare,
    repository_extra=build_models,
    targets=TARGETS,
)
