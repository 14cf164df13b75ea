"""What clients that read nothing make the server hold (issue 44, finding S3): ``--connections``
raw HTTP/2 connections advertising a zero stream window each ask ``--calls`` answers of
``--answer-mib`` MiB from the ``big_output`` Python model and read none of them. The server's
RSS (VmRSS) before, at its peak while they hold their streams (sampled until ``--hold``
seconds pass or every stream has ended), and how the streams ended, are printed as JSON.

    python -m bench zero-window [--connections 4] [--calls 300]
        [--hold 20] [--server-arg=--grpc-memory-budget-bytes=...]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MIB = 1 << 20


def _rss(pid: int) -> int:
    from bench import proctree

    return proctree.status(pid).get("VmRSS", 0) * 1024


def _outcome(result: object) -> str:
    status, reset = getattr(result, "status", None), getattr(result, "reset", None)
    if reset is not None:
        return f"reset {reset}"
    return "open" if status is None else f"status {status}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--answer-mib", type=int, default=1)
    parser.add_argument("--hold", type=float, default=20.0)
    parser.add_argument("--server-arg", action="append", default=[])
    args = parser.parse_args(argv)
    from h2.settings import SettingCodes

    from testkit.grpc_raw import (
        BIG_OUTPUT,
        INFER,
        big_output_request,
        start_server,
        write_big_output,
    )
    from testkit.h2client import H2Client

    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "repo"
        repo.mkdir()
        write_big_output(repo, delay_ms=2)
        proc = start_server([repo], [BIG_OUTPUT], *args.server_arg)
        clients: list[H2Client] = []
        try:
            pid = proc.proc.pid
            time.sleep(1.0)
            before = peak = _rss(pid)
            settings = {SettingCodes.INITIAL_WINDOW_SIZE: 0}
            request = big_output_request(args.answer_mib * MIB)
            sids: list[list[int]] = []
            for _ in range(args.connections):
                h2 = H2Client(proc.grpc_url, settings=settings, auto_ack=False)
                clients.append(h2)
                sids.append([h2.call_async(INFER, request) for _ in range(args.calls)])
            deadline = time.monotonic() + args.hold
            while time.monotonic() < deadline:
                for h2 in clients:
                    h2.pump(0.05)
                peak = max(peak, _rss(pid))
            outcomes: Counter[str] = Counter()
            for h2, ids in zip(clients, sids, strict=True):
                outcomes.update(_outcome(h2.streams[s]) for s in ids)
            print(json.dumps({
                "connections": args.connections, "calls": args.calls,
                "answer_mib": args.answer_mib, "server_args": args.server_arg,
                "rss_before_mib": round(before / MIB), "rss_peak_mib": round(peak / MIB),
                "held_mib": round((peak - before) / MIB), "outcomes": dict(outcomes),
            }, indent=1))  # fmt: skip
        finally:
            for h2 in clients:
                h2.close()
            proc.stop()
    return 0
