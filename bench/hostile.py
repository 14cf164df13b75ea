#!/usr/bin/env python3
"""Hostile HTTP clients against the real server: what does one bad client cost everyone else?

    PYTHONPATH=src .venv/bin/python bench/hostile.py [--cases gzip_bomb,idle_connections]
        [--case-seconds 30] [--rss-cap-mib 4096] [--label before] [--server-arg=--flag=value]

Issue 10, items 3 and 4: each case starts a fresh server over the example ``simple`` model and
runs one hostile client on raw sockets (gzip/deflate bombs, huge headers, a long URL, pipelined
big bodies, a slow body, 1,000 idle connections) while the server's peak RSS and the latency of
a health poller are measured. Results: a markdown table on stdout and
``bench/results/hostile.json``. See bench/README.md "Hostile clients". This script is the entry
point only: the command line is bench/hostile_cli.py, the cases bench/hostile_clients.py.
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
    from bench.hostile_cli import main

    sys.exit(main())
