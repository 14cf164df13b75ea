"""The ``handoff`` list (issue 14 item 10): what handing a request to a Python model's stub
process costs, against the same ``model.py`` in-process, and what dynamic batching gains a
Python model.

Rows, all over binary HTTP on the run's server: ``simple`` (ONNX, answered inline on the
loop: the front-end's and scheduler's share) and ``add_sub_python`` at concurrency 1, then
``add_sub_python`` and its copy with ``dynamic_batching { }`` (``add_sub_python_dynbatch``,
in the bench's repository only; the same copy as the ``grpc`` list's) at concurrency 16.
One more row, ``add_sub_python`` at concurrency 1 on a server of its own (target
``one-cpu``) whose process, and so every stub it starts, may run only on the machine's last
CPU: the server and the stub then never wake each other across CPUs, which shows what those
wake-ups cost (the client is left the other CPUs).

Derived figures, printed under the table with the issue's targets as PASS/FAIL lines:

* **hand-off round trip** (c1): the server's own time per request around the stub, from the
  statistics extension (compute_input + compute_infer + compute_output: the request's
  tensors wired, the EXECUTE frame → EXEC_DONE back on the loop, the response built) minus
  the baseline, ``execute()`` of the same ``model.py`` in this process with its
  ``pb_utils`` request built per call (baselines.baseline_python). Target ≤ 80 µs.
* **end to end**: p50(``add_sub_python``) − p50(``simple``) at c1, the cost of a Python
  model over an ONNX one through the whole server (includes the model's own run: the
  baselines' difference is shown next to it).
* **batching gain** (c16): infer/s of ``add_sub_python_dynbatch`` ÷ ``add_sub_python``.
  Target ≥ 1.4.
* **batching ceiling** (c16, batching off): when the run is CPU-bound (the processes' CPU
  adds up to the machine's), throughput goes as 1 ÷ (server + stub + client CPU per
  inference); batching saves only part of the stub's share (the server still parses and
  answers every request, the client still sends each), so even a batch that made the stub
  free would gain at most (server + stub + client) ÷ (server + client), and with a client
  that cost nothing too (perf_analyzer's C++ on other cores), (server + stub) ÷ server.
* **hand-off on one CPU**: the hand-off round trip of the ``one-cpu`` row, as above.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

from bench.common import Issue, Rows, Scenario, Target
from bench.report import CONC, CPU, MODEL, PROTOCOL, RATE, Column, rows_table
from bench.server import Server

PYTHON_MODEL = "add_sub_python"
DYNBATCH = PYTHON_MODEL + "_dynbatch"
HANDOFF_TARGET_US = 80.0
BATCHING_TARGET = 1.4
BASELINE_SAME_AS = {DYNBATCH: PYTHON_MODEL}
ONE_CPU = "one-cpu"


def handoff_scenarios() -> list[Scenario]:
    return [
        Scenario("simple", "http", 1),
        Scenario(PYTHON_MODEL, "http", 1),
        Scenario(PYTHON_MODEL, "http", 16),
        Scenario(DYNBATCH, "http", 16),
        Scenario(PYTHON_MODEL, "http", 1, target=ONE_CPU),
    ]


def one_cpu_server(repo: Path, workdir: Path, args: tuple[str, ...], models: list[str]) -> Server:
    """tritium with only ``models`` loaded, its process (and so its stubs) on the last CPU."""
    load = ("--model-control-mode=explicit", *(f"--load-model={m}" for m in models))
    last = max(os.sched_getaffinity(0))
    return Server(repo, workdir, (*args, *load), cpus=frozenset({last}))


def build_models(repo: Path) -> None:
    """``add_sub_python_dynbatch``: ``add_sub_python`` with ``dynamic_batching { }`` (queue
    delay 0: a batch is what queued while the instance was busy)."""
    variant = repo / DYNBATCH
    shutil.copytree(repo / PYTHON_MODEL, variant, dirs_exist_ok=True)
    config = (repo / PYTHON_MODEL / "config.pbtxt").read_text()
    config = re.sub(r'(?m)^name:\s*"[^"]*"', f'name: "{DYNBATCH}"', config)
    (variant / "config.pbtxt").write_text(config + "dynamic_batching { }\n")


def _row(rows: Rows, model: str, conc: int, target: str = "") -> dict[str, Any] | None:
    for row in rows:
        if (
            row["model"] == model
            and row["concurrency"] == conc
            and row.get("target", "") == target
            and "infer_per_s" in row
        ):
            return row
    return None


def batching_ceiling(row: dict[str, Any]) -> float | None:
    """(server + stub + client) ÷ (server + client) CPU per inference of a batching-off
    row: the most a batch that made the stub's work free could gain a CPU-bound run."""
    parts = [row.get(k) for k in ("server_cpu_us", "stub_cpu_us", "client_cpu_us")]
    if any(p is None for p in parts) or not (parts[0] + parts[2]):
        return None
    return float(sum(parts)) / (parts[0] + parts[2])


def free_client_ceiling(row: dict[str, Any]) -> float | None:
    """(server + stub) ÷ server CPU per inference: the batching ceiling when the client's
    CPU is not the machine's (a C++ client on other cores)."""
    server, stub = row.get("server_cpu_us"), row.get("stub_cpu_us")
    if not server or stub is None:
        return None
    return float(server + stub) / server


def _cpus_busy(row: dict[str, Any]) -> float:
    keys = ("server_cpu_util", "stub_cpu_util", "client_cpu_util", "other_cpu_util")
    return float(sum(row.get(k) or 0.0 for k in keys))


def handoff_us(row: dict[str, Any]) -> float | None:
    """The server's time per request around the stub minus the in-process execute()."""
    compute = row.get("compute_us")
    if not compute or "baseline_us" not in row:
        return None
    return sum(compute.values()) - row["baseline_us"]


def compare(rows: Rows) -> None:
    """The derived figures on the rows they belong to (JSON): ``handoff_us`` on the c1 Python
    row, ``vs_simple_p50_ms`` next to it, ``batching_gain`` on the dynbatch row."""
    python1, simple1 = _row(rows, PYTHON_MODEL, 1), _row(rows, "simple", 1)
    pinned = _row(rows, PYTHON_MODEL, 1, ONE_CPU)
    if pinned is not None:
        pinned["handoff_us"] = handoff_us(pinned)
    if python1 is not None:
        python1["handoff_us"] = handoff_us(python1)
        if simple1 is not None:
            python1["vs_simple_p50_ms"] = python1["p50_ms"] - simple1["p50_ms"]
            if "baseline_us" in simple1 and "baseline_us" in python1:
                python1["baselines_diff_us"] = python1["baseline_us"] - simple1["baseline_us"]
    off, on = _row(rows, PYTHON_MODEL, 16), _row(rows, DYNBATCH, 16)
    if off is not None and on is not None:
        on["batching_gain"] = on["infer_per_s"] / off["infer_per_s"]
    if off is not None:
        off["batching_ceiling"] = batching_ceiling(off)


def _verdict(value: float | None, ok: bool) -> str:
    return "not measured" if value is None else ("PASS" if ok else "FAIL")


def goal_lines(rows: Rows) -> list[str]:
    python1, on = _row(rows, PYTHON_MODEL, 1), _row(rows, DYNBATCH, 16)
    lines = [""]
    if python1 is not None:
        hand = python1.get("handoff_us")
        compute = python1.get("compute_us") or {}
        parts = ", ".join(f"{k} {v:.1f}" for k, v in compute.items())
        lines.append(
            f"- hand-off round trip at c1: {hand:.1f} µs (server per request: {parts} µs; "
            f"in-process execute(): {python1.get('baseline_us', 0):.1f} µs) — target ≤ "
            f"{HANDOFF_TARGET_US:g} µs: "
            f"{_verdict(hand, hand is not None and hand <= HANDOFF_TARGET_US)}"
            if hand is not None
            else "- hand-off round trip at c1: not measured (no statistics or baseline)"
        )
        if "vs_simple_p50_ms" in python1:
            lines.append(
                f"- end to end at c1: p50 {PYTHON_MODEL} − p50 simple = "
                f"{python1['vs_simple_p50_ms'] * 1e3:.0f} µs (in-process baselines differ by "
                f"{python1.get('baselines_diff_us', 0):.0f} µs)"
            )
    pinned = _row(rows, PYTHON_MODEL, 1, ONE_CPU)
    if pinned is not None and pinned.get("handoff_us") is not None:
        lines.append(
            f"- hand-off round trip at c1, server and stub on one CPU ({ONE_CPU}): "
            f"{pinned['handoff_us']:.1f} µs (no wake-up of one CPU by the other)"
        )
    gain = None if on is None else on.get("batching_gain")
    lines.append(
        f"- dynamic batching at c16 over HTTP: {gain:.2f}× batching off (avg batch "
        f"{on.get('avg_batch') or 0:.2f}) — target ≥ {BATCHING_TARGET:g}×: "
        f"{_verdict(gain, gain >= BATCHING_TARGET)}"
        if gain is not None
        else "- dynamic batching at c16: not measured"
    )
    off = _row(rows, PYTHON_MODEL, 16)
    ceiling = None if off is None else off.get("batching_ceiling")
    free = None if off is None else free_client_ceiling(off)
    if off is not None and ceiling is not None and free is not None:
        lines.append(
            f"- batching ceiling at c16: server {off['server_cpu_us']:.0f} + stub "
            f"{off['stub_cpu_us']:.0f} + client {off['client_cpu_us']:.0f} µs of CPU per "
            f"inference with batching off ({_cpus_busy(off):.2f} of {os.cpu_count()} CPUs "
            f"busy); a batch that made the stub free would gain at most {ceiling:.2f}×, "
            f"{free:.2f}× with a client that cost nothing too"
        )
    return lines


COLUMNS = [
    MODEL,
    PROTOCOL,
    CONC,
    Column("server", lambda r: r.get("target") or "run's", left=True),
    *RATE,
    *CPU,
    Column("avg batch", "avg_batch", 2),
    Column("server µs/req", lambda r: sum((r.get("compute_us") or {}).values()) or None, 1),
    Column("other cores", "other_cpu_util", 2),
]


def table(rows: Rows) -> list[str]:
    return rows_table(COLUMNS, rows) + goal_lines(rows)


NOTE = (
    "All rows over binary HTTP, closed loop, on the run's server except the `one-cpu` row (a "
    "server of its own whose process and stubs run on the machine's last CPU only). "
    "server µs/req: the server's "
    "compute_input + compute_infer + compute_output per request (statistics extension), for "
    "a Python model the stub round trip around execute(). The hand-off round trip is that "
    "minus the in-process execute() of the same model.py (the baseline). "
    f"`{DYNBATCH}` is the bench's copy of `{PYTHON_MODEL}` with `dynamic_batching {{ }}`. "
    "bench/channel_floor.py gives the floor: a small frame's round trip between two processes."
)
ISSUE = Issue(
    "handoff",
    handoff_scenarios,
    note=NOTE,
    table=table,
    row_ratios=compare,
    repository_extra=build_models,
    targets={
        ONE_CPU: Target(
            one_cpu_server, "tritium on the last CPU only (its stubs too: they inherit it)"
        )
    },
)
