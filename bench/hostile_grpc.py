#!/usr/bin/env python3
"""Hostile gRPC clients against the real server: what does one bad client cost everyone else?

    PYTHONPATH=src .venv/bin/python bench/hostile_grpc.py [--cases grpc_zero_window]
        [--case-seconds 20] [--label before] [--server-arg=--flag=value]

Issue 22, findings 3 and 4: silent sockets on the gRPC port against a low descriptor limit,
unary messages declared large and never finished, a client with a zero stream window. Each
case runs on a fresh server while the server's RSS and the latency of other HTTP and gRPC
clients (fresh connections) are measured. Results: a markdown table on stdout and
``bench/results/hostile_grpc.json``. See bench/README.md "Hostile gRPC clients". This script
is the entry point only: the command line is bench/hostile_grpc_cli.py, the cases
bench/hostile_grpc_clients.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

if __name__ == "__main__":
    # As a script, this file's folder is sys.path[0]: import the bench as the package
    # ``bench`` from the repository root instead (as bench/run.py does).
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
    sys.path.insert(0, str(ROOT))
    from bench.hostile_grpc_cli import main

    sys.exit(main())
