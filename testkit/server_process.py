"""Start the real tritium server as a child process on 127.0.0.1 with port 0.

The server writes its bound ports to ``--ports-file``; readiness is then found by polling
the HTTP health endpoint, never by reading logs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path


# A test's clients keep their pooled keep-alive connections open: a server stopped under
# them would serve those for --http-drain-idle-secs (5 s) before it exits. Test servers close
# idle ones at once, unless a test names the flag (tests/integration/test_shutdown.py).
DRAIN_IDLE = "--http-drain-idle-secs"


def server_command(repositories: list[Path], *args: str, fast_stop: bool = True) -> list[str]:
    """``python -m tritium serve`` on 127.0.0.1 with every port 0 (``fast_stop``: idle
    connections closed at once at shutdown, unless ``args`` name the flag)."""
    command = [sys.executable, "-m", "tritium", "serve"]
    for repo in repositories:
        command += ["--model-repository", str(repo)]
    for service in ("http", "grpc", "metrics"):
        command += [f"--{service}-address", "127.0.0.1", f"--{service}-port", "0"]
    if fast_stop and not any(arg.startswith(DRAIN_IDLE) for arg in args):
        command.append(f"{DRAIN_IDLE}=0")
    return [*command, *args]


_ON_CPUS = (
    "import os, sys; os.sched_setaffinity(0, {int(c) for c in sys.argv[1].split(',')}); "
    "os.execv(sys.argv[2], sys.argv[2:])"
)


class ServerProcess:
    """``workdir``: where the ports file and the log go, kept after ``stop`` (the benchmark
    reads the log tail after stopping); by default a temporary directory removed by ``stop``.
    ``start_timeout``: how long the server may take to load its models and bind. ``cpus``:
    the CPUs the server (and the stub processes it starts, which inherit them) may run on;
    None: all of them. ``env``: variables set for the server over this process's.
    ``fast_stop``: see ``server_command`` (the benchmarks' servers run with the server's own
    defaults, and may be another commit's tritium, which has no such flag)."""

    def __init__(
        self,
        repositories: list[Path],
        *args: str,
        wait_ready: bool = True,
        workdir: Path | None = None,
        start_timeout: float = 60.0,
        cpus: frozenset[int] | None = None,
        env: dict[str, str] | None = None,
        fast_stop: bool = True,
    ) -> None:
        self._dir = None if workdir else tempfile.TemporaryDirectory(prefix="tritium-test-")
        directory = workdir or Path(self._dir.name)
        self.ports_file = directory / "ports.json"
        self.log_path = directory / "server.log"
        command = server_command(
            repositories, "--ports-file", str(self.ports_file), *args, fast_stop=fast_stop
        )
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        if cpus is not None:  # set in a small Python that then becomes the server (exec)
            command = [sys.executable, "-c", _ON_CPUS, ",".join(map(str, sorted(cpus))), *command]
        self.proc = subprocess.Popen(
            command, stdout=self._log, stderr=subprocess.STDOUT,
            env=None if env is None else {**os.environ, **env},
        )
        self.ports: dict[str, int] = {}
        try:
            self._wait_ports(start_timeout)
            if wait_ready:
                self.wait_live()
        except BaseException:
            self.stop()  # close the log and remove the directory even when it never came up
            raise

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.ports['http']}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.ports['grpc']}"

    def url(self, protocol: str) -> str:
        return self.http_url if protocol == "http" else self.grpc_url

    def log_text(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def _wait_ports(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.ports_file.exists():
                self.ports = json.loads(self.ports_file.read_text())
                return
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log_text()}")
            time.sleep(0.05)
        raise RuntimeError(f"server did not bind within {timeout}s:\n{self.log_text()}")

    def wait_live(self, timeout: float = 30.0, endpoint: str = "live") -> None:
        """Poll ``/v2/health/<endpoint>`` until it answers 200."""
        deadline = time.monotonic() + timeout
        url = f"http://{self.http_url}/v2/health/{endpoint}"
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError):
                pass
            time.sleep(0.05)
        raise RuntimeError(f"server not {endpoint} within {timeout}s:\n{self.log_text()}")

    def stop(self, timeout: float = 30.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        if self._dir is not None:
            self._dir.cleanup()
        return self.proc.returncode
