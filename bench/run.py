#!/usr/bin/env python3
"""tritium benchmark: closed-loop load over HTTP/gRPC against the real server.

    .venv/bin/python bench/run.py [--quick] [--issue foundation] [--models simple]
                                  [--protocols http,grpc] [--concurrency 1,16] [--seconds 5]

The example model repository is built into a temporary directory, the server is started as
a child process (127.0.0.1, port 0, ``--ports-file``), and this process is the client:
N coroutines on tritonclient's asyncio clients each send the next request as soon as the
previous answer arrives. After a warm-up, a fixed window is measured: throughput, latency
percentiles and the server's CPU time per inference (server process and Python stub
processes separately, from /proc). An in-process baseline of the bare backend call is
measured in the same run, and each scenario is reported relative to it.

Results go to ``bench/results/<issue>.json`` and ``.md`` (``<issue>-quick.*`` with
``--quick``). See bench/README.md. This script is the entry point only: the bench is the
package ``bench`` (bench/cli.py has the command line).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

if __name__ == "__main__":
    # As a script, this file's folder is sys.path[0]: import the bench as the package
    # ``bench`` from the repository root instead (bench/common.py is not a module ``common``).
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
    sys.path.insert(0, str(ROOT))
    from bench.cli import main

    sys.exit(main())
