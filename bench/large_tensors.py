"""Large tensors through a server's identity model (issue 43): inferences per second per size,
over HTTP binary and HTTP with client system shared memory, at a few concurrencies.

    python bench/large_tensors.py --url 127.0.0.1:8000 --model identity_fp32 \
        --sizes 16384,65536,262144,1048576 --concurrency 1,4 --seconds 4

Each client thread has its own connection (and, with ``shm``, its own input and output
regions); every answer is checked against the input. Works against tritium
(``--allow-client-shm=true``) and Triton alike; prints one line per row and, with ``--json``,
writes them out."""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from typing import Any

import numpy as np


def _client(url: str) -> Any:
    import tritonclient.http as httpclient

    return httpclient.InferenceServerClient(url, connection_timeout=60, network_timeout=60)


class Worker(threading.Thread):
    """One client: infers until ``stop`` is set; counts the answers that matched."""

    def __init__(self, url: str, model: str, n: int, mode: str, tag: str) -> None:
        super().__init__(daemon=True)
        self.url, self.model, self.n, self.mode, self.tag = url, model, n, mode, tag
        self.count = 0
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.latencies: list[float] = []

    def run(self) -> None:
        try:
            self._loop()
        except Exception as exc:  # reported, the row fails
            self.errors.append(repr(exc))

    def _loop(self) -> None:
        import tritonclient.http as httpclient
        import tritonclient.utils.shared_memory as shm

        client = _client(self.url)
        x = np.arange(self.n, dtype=np.float32) + float(os.getpid() % 7)
        inp = httpclient.InferInput("INPUT0", [self.n], "FP32")
        out = httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)
        regions = []
        if self.mode == "shm":
            for role in ("in", "out"):
                name = f"{self.tag}_{role}"
                handle = shm.create_shared_memory_region(name, f"/{name}", x.nbytes)
                client.register_system_shared_memory(name, f"/{name}", x.nbytes)
                regions.append((name, handle))
            shm.set_shared_memory_region(regions[0][1], [x])
            inp.set_shared_memory(regions[0][0], x.nbytes)
            out.set_shared_memory(regions[1][0], x.nbytes)
        else:
            inp.set_data_from_numpy(x, binary_data=True)
        try:
            while not self.stop.is_set():
                began = time.perf_counter()
                result = client.infer(self.model, [inp], outputs=[out])
                self.latencies.append(time.perf_counter() - began)
                if self.mode == "shm":
                    got = shm.get_contents_as_numpy(regions[1][1], np.float32, [self.n])
                else:
                    got = result.as_numpy("OUTPUT0")
                if not np.array_equal(got, x):
                    self.errors.append("wrong answer")
                    return
                self.count += 1
        finally:
            for name, handle in regions:
                client.unregister_system_shared_memory(name)
                shm.destroy_shared_memory_region(handle)


def tree_cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its children (the server and its stubs)."""
    if not pid:
        return 0.0
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    pids = [pid]
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            pids += [int(p) for p in f.read().split()]
    except OSError:
        pass
    for p in pids:
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
        except OSError:
            pass
    return total


def row(  # noqa: PLR0913 (one row's settings)
    url: str, model: str, n: int, mode: str, conc: int, seconds: float, pid: int = 0
) -> dict[str, Any]:
    tag = f"lt{os.getpid()}_{n}_{mode}_{conc}"
    workers = [Worker(url, model, n, mode, f"{tag}_{i}") for i in range(conc)]
    for w in workers:
        w.start()
    time.sleep(min(1.0, seconds / 4))  # warm-up
    start_counts = [w.count for w in workers]
    cpu = tree_cpu_s(pid)
    began = time.perf_counter()
    time.sleep(seconds)
    done = sum(w.count for w in workers) - sum(start_counts)
    elapsed = time.perf_counter() - began
    cpu = tree_cpu_s(pid) - cpu
    for w in workers:
        w.stop.set()
    for w in workers:
        w.join(60)
    lat = sorted(x for w in workers for x in w.latencies)
    errors = [e for w in workers for e in w.errors]
    return {
        "elements": n,
        "bytes": n * 4,
        "mode": mode,
        "concurrency": conc,
        "infer_per_s": round(done / elapsed, 1),
        "p50_ms": round(lat[len(lat) // 2] * 1000, 2) if lat else None,
        "server_cpu_us": round(cpu / done * 1e6) if done and pid else None,
        "errors": errors[:3],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="127.0.0.1:8000")
    parser.add_argument("--model", default="identity_fp32")
    parser.add_argument("--sizes", default="16384,65536,262144,1048576")
    parser.add_argument("--modes", default="http,shm")
    parser.add_argument("--concurrency", default="1,4")
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--json", default="")
    parser.add_argument(
        "--pid", type=int, default=0, help="the server's, for its CPU per inference"
    )
    args = parser.parse_args()
    rows = []
    for mode in args.modes.split(","):
        for n in map(int, args.sizes.split(",")):
            for conc in map(int, args.concurrency.split(",")):
                r = row(args.url, args.model, n, mode, conc, args.seconds, args.pid)
                rows.append(r)
                print(json.dumps(r), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"load": os.getloadavg(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
