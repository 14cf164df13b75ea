#!/usr/bin/env python3
"""Soak: moderate HTTP + gRPC load with 1 % hostile requests mixed in; does the server last?

    PYTHONPATH=src .venv/bin/python bench/soak.py [--seconds 600] [--rate 400] [--workers 8]
        [--hostile-every 100] [--hostile KIND,...] [--bomb-mib 1280] [--rss-cap-mib 4096]
        [--settle 15] [--label NAME]

Issue 10, "Figures to report": a fresh server over ``simple`` and ``add_sub_python`` under
paced, checked HTTP and gRPC load, with every ``--hostile-every``-th request a hostile one
(issue 10's HTTP requests and issue 22's HTTP/2, gRPC and hostile-model attacks, in rotation);
its RSS, fds, threads and stubs are sampled. Results: a summary on stdout and
``bench/results/soak.json``; the exit status is 1 when the server did not last. See
bench/README.md "Soak with hostile requests". This script is the entry point only: the command
line is bench/soak_cli.py, the load bench/soak_load.py, the hostile requests
bench/hostile_clients.py and bench/soak_attacks.py.
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
    from bench.soak_cli import main

    sys.exit(main())
