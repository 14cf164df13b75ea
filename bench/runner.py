"""Running the chosen scenarios: each server (the run's tritium server, and those of their own
that scenarios name, ``Scenario.target``) is started for its first scenario and stopped after
its last, so a list that interleaves servers (the ``grpc`` list: the same row on each
transport, one after the other) compares them under the same load of the machine; one
report row per scenario."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

from bench.baselines import add_ratios
from bench.catalog import PAYLOAD_BYTES, TARGETS, drive
from bench.common import Scenario, Settings, Window
from bench.engine import summarize
from bench.report import scenario_line
from bench.server import Server, idle_cpu

Row = dict[str, Any]


def start_server(
    target: str, repo: Path, work: Path, server_args: tuple[str, ...], models: list[str]
) -> Any:
    """The run's tritium server (target ""), or a server of its own (TARGETS) in
    ``work/<target>``; returned ready with ``models``."""
    if not target:
        server = Server(repo, work, server_args)
    else:
        (work / target).mkdir(exist_ok=True)
        server = TARGETS[target].start(repo, work / target, server_args, models)
    try:
        server.wait_ready(models)
    except BaseException:
        server.stop()
        raise
    return server


class Servers:
    """The run's servers by target, started on demand and stopped after their last scenario.
    The run's own server's idle CPU and log tail go to ``info``, another's to
    ``info["targets"][name]`` (with what it is)."""

    def __init__(
        self,
        repo: Path,
        work: Path,
        scenarios: list[Scenario],
        settings: Settings,
        info: dict[str, Any],
        server_args: tuple[str, ...],
    ) -> None:
        self.repo, self.work, self.settings, self.info = repo, work, settings, info
        self.server_args = server_args
        self.models: dict[str, set[str]] = {}
        for sc in scenarios:
            self.models.setdefault(sc.target, set()).update(sc.models)
        self.last = {sc.target: sc for sc in scenarios}  # each target's last scenario
        self.running: dict[str, Any] = {}
        self.not_started: dict[str, str] = {}  # target -> why
        self.unhealthy: set[str] = set()  # targets stopped early: their scenarios are skipped
        self.failed: set[str] = set()  # targets with a failed scenario (their log tail kept)

    def record(self, target: str) -> dict[str, Any]:
        if not target:
            return self.info
        record = self.info.setdefault("targets", {}).setdefault(target, {})
        record["what"] = TARGETS[target].what
        return record

    def get(self, target: str) -> Any | None:
        """The target's server, started if it is not yet; None when it did not start
        (``not_started`` says why) or stopped being healthy."""
        if target in self.not_started or target in self.unhealthy:
            return None
        if target not in self.running:
            try:
                models = sorted(self.models[target])
                server = start_server(target, self.repo, self.work, self.server_args, models)
            except (RuntimeError, OSError) as exc:
                self.not_started[target] = f"server {target or 'tritium'} did not start: {exc}"
                print(self.not_started[target], file=sys.stderr)
                return None
            self.running[target] = server
            idle = idle_cpu(server, 0.5 if self.settings.quick else 2.0)
            self.record(target)["server_idle"] = idle
        return self.running[target]

    def done(self, sc: Scenario, row: Row) -> None:
        """After a scenario: its server stops after its last scenario, or when unhealthy."""
        server = self.running[sc.target]
        if row["errors"] or row["wrong"]:
            self.failed.add(sc.target)
        if not server.healthy():
            print(
                f"server not healthy after {sc.name}; stopping. Log tail:\n{server.log_tail()}",
                file=sys.stderr,
            )
            self.unhealthy.add(sc.target)
            self.failed.add(sc.target)
            self.stop(sc.target)
        elif self.last[sc.target] == sc:
            self.stop(sc.target)

    def stop(self, target: str) -> None:
        server = self.running.pop(target)
        server.stop()
        if target in self.failed:
            self.record(target)["server_log_tail"] = server.log_tail()

    def stop_all(self) -> None:
        for target in list(self.running):
            self.stop(target)


def run_scenario(sc: Scenario, server: Any, settings: Settings, baselines: dict[str, Any]) -> Row:
    print(f"scenario {sc.name} ...", flush=True)
    window = asyncio.run(drive(sc, server, settings))
    row = summarize(sc, window, PAYLOAD_BYTES.get(sc.model))
    add_ratios(row, baselines.get(sc.model))
    print("  " + scenario_line(row), flush=True)
    return row


def run_scenarios(
    repo: Path,
    work: Path,
    scenarios: list[Scenario],
    settings: Settings,
    info: dict[str, Any],
    server_args: tuple[str, ...] = (),
) -> list[Row]:
    """Every scenario in order, one row each. A scenario whose server did not start gets a
    failed row saying so; those after its server stopped being healthy are skipped."""
    servers, rows = Servers(repo, work, scenarios, settings, info, server_args), []
    try:
        for sc in scenarios:
            server = servers.get(sc.target)
            if server is not None:
                rows.append(run_scenario(sc, server, settings, info["baselines"]))
                servers.done(sc, rows[-1])
            elif sc.target in servers.not_started:
                window = Window()
                window.errors.append(servers.not_started[sc.target])
                rows.append(summarize(sc, window))
    finally:
        servers.stop_all()
    return rows
