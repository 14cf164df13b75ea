"""The server under test, started with bench/process.py ``ServerProcess`` (``python -m
tritium serve`` on 127.0.0.1, every port 0, ``--ports-file``), and what the bench reads from
it: readiness of its models, their statistics, its idle CPU. Also the bench's copy of the
example model repository, and a repository of only some of its models with a server started
ready over it (the hostile and soak suites)."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path

from bench.common import BUILD_MODELS, CpuSnapshot
from bench.process import ServerProcess

START_TIMEOUT = 120.0  # loading every example model (Python stubs included) and binding


class Server(ServerProcess):
    """The bench's ServerProcess with its ports file and log in the bench's work directory (the
    log tail is read after ``stop`` for the report). The constructor returns once the ports
    are bound; ``wait_ready`` then waits for the server and the scenarios' models."""

    statistics = True  # answers the statistics extension (a bare gRPC floor does not)

    def __init__(
        self,
        repository: Path,
        workdir: Path,
        extra_args: tuple[str, ...] = (),
        cpus: frozenset[int] | None = None,
        start_timeout: float = START_TIMEOUT,
        env: dict[str, str] | None = None,
    ) -> None:
        super().__init__(
            [repository],
            *extra_args,
            wait_ready=False,
            workdir=workdir,
            start_timeout=start_timeout,
            cpus=cpus,
            env=env,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def wait_ready(self, models: list[str], timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        paths = ["/v2/health/ready"] + [f"/v2/models/{m}/ready" for m in models]
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited ({self.proc.returncode}):\n{self.log_tail()}")
            if all(self._http_ok(p) for p in paths):
                return
            time.sleep(0.1)
        raise RuntimeError(f"server not ready within {timeout}s:\n{self.log_tail()}")

    def healthy(self) -> bool:
        return self.proc.poll() is None and self._http_ok("/v2/health/ready")

    def _http_ok(self, path: str) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.url('http')}{path}", timeout=2) as r:
                return r.status == 200
        except (urllib.error.URLError, ConnectionError):
            return False


def model_stats(server: Server, model: str) -> dict[str, int] | None:
    """The model's inference and execution counts and the rows its executions computed
    (statistics extension), None if absent."""
    try:
        url = f"http://{server.url('http')}/v2/models/{model}/stats"
        with urllib.request.urlopen(url, timeout=5) as r:
            stats = json.loads(r.read())["model_stats"]
        return {
            "inference_count": sum(int(s.get("inference_count", 0)) for s in stats),
            "execution_count": sum(int(s.get("execution_count", 0)) for s in stats),
            "batch_rows": sum(batch_rows(s) for s in stats),
            **{k: sum(compute_ns(s, k) for s in stats) for k in COMPUTE_KEYS},
        }
    except (urllib.error.URLError, ConnectionError, ValueError, KeyError, TypeError):
        return None


COMPUTE_KEYS = ("compute_input", "compute_infer", "compute_output")


def compute_ns(stats: dict, key: str) -> int:
    """The total ns of one ``inference_stats`` duration (compute_input etc.) of a model."""
    return int(((stats.get("inference_stats") or {}).get(key) or {}).get("ns", 0))


def batch_rows(stats: dict) -> int:
    """The rows a model's executions computed: batch size × executions of that size, summed
    over its ``batch_stats`` (Triton's statistics extension)."""
    return sum(
        int(b.get("batch_size", 0)) * int((b.get("compute_infer") or {}).get("count", 0))
        for b in stats.get("batch_stats") or []
    )


def models_stats(server: Server, models: tuple[str, ...]) -> dict[str, dict[str, int] | None]:
    if not server.statistics:
        return dict.fromkeys(models)
    return {model: model_stats(server, model) for model in models}


def idle_cpu(server: Server, seconds: float = 1.0) -> dict[str, float]:
    """Server CPU use while nothing is sent: should be ~0 (no spinning pools, no polling)."""
    start = CpuSnapshot.take(server.pid)
    time.sleep(seconds)
    end = CpuSnapshot.take(server.pid)
    wall = end.wall - start.wall
    return {
        "server_cpu_util": (end.server - start.server) / wall,
        "stub_cpu_util": end.stub_delta(start) / wall,
        "stub_processes": len(end.stubs),
    }


def build_repository(target: Path, extras: Iterable[Callable[[Path], None]] = ()) -> None:
    """The example repository (examples/build_models.py) built into ``target``, plus the
    models ``extras`` add (``Issue.repository_extra``)."""
    subprocess.run(
        [sys.executable, str(BUILD_MODELS), "--repository", str(target)],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    for extra in extras:
        extra(target)


def model_subset(target: Path, models: Iterable[str]) -> Path:
    """The example repository built in ``target/full``; ``target/repo`` holds only ``models``
    (symlinks), so the server starts in seconds and runs no stub it does not need."""
    full = target / "full"
    build_repository(full)
    repo = target / "repo"
    repo.mkdir()
    for model in models:
        (repo / model).symlink_to(full / model, target_is_directory=True)
    return repo


def start_ready(  # noqa: PLR0913 (keyword options of one start)
    repository: Path,
    workdir: Path,
    args: Iterable[str] = (),
    models: Iterable[str] = ("simple",),
    nofile: int | None = None,
    timeout: float = 90.0,
    env: dict[str, str] | None = None,
) -> Server:
    """A server over ``repository`` (ports file and log in ``workdir``), ready with ``models``;
    ``nofile`` sets its RLIMIT_NOFILE right after the start, as ``ulimit -n`` would (accept()
    is what runs out). ``timeout``: for the ports, then for the models' readiness. ``env``:
    variables set for the server (``PYTHONPATH`` of another source tree for an A/B)."""
    workdir.mkdir(parents=True, exist_ok=True)
    server = Server(
        repository, workdir, tuple(args), start_timeout=max(timeout, START_TIMEOUT), env=env
    )
    try:
        if nofile is not None:
            resource.prlimit(server.pid, resource.RLIMIT_NOFILE, (nofile, nofile))
        server.wait_ready(list(models), timeout=timeout)
    except BaseException:
        server.stop()
        raise
    return server
