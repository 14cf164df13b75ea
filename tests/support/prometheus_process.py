"""A real Prometheus (Debian's ``prometheus`` package, installed by ``make test-ops``) on
127.0.0.1, scraping given targets every second, with its storage in a temporary directory.

Used by tests/integration/test_ops_prometheus.py to check the dashboard's and the alert rules'
PromQL against what tritium actually serves.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

INSTALL_HINT = "`make test-ops` installs them from Debian's prometheus package"


# Where `make test-ops` unpacks Debian's package when the system has no prometheus.
UNPACKED = Path(__file__).resolve().parents[2] / "build" / "prometheus" / "usr" / "bin"


def binary(name: str) -> str | None:
    """The path of ``promtool`` / ``prometheus`` (on PATH, else unpacked by
    ``make test-ops``), or None where neither has it."""
    return shutil.which(name) or shutil.which(name, path=str(UNPACKED))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def scrape_config(targets: list[str], rule_files: list[Path]) -> str:
    """A Prometheus configuration (JSON is YAML) with one job, ``tritium``, scraped every
    second, and ``rule_files`` evaluated every second."""
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(path) for path in rule_files],
        "scrape_configs": [
            {"job_name": "tritium", "static_configs": [{"targets": targets}]},
        ],
    }
    return json.dumps(config, indent=2)


class PrometheusProcess:
    """``prometheus`` started on a free port of 127.0.0.1; ``query`` uses its HTTP API."""

    def __init__(self, targets: list[str], rule_files: list[Path], start_timeout: float = 60.0):
        executable = binary("prometheus")
        if executable is None:
            raise RuntimeError(f"prometheus is not installed: {INSTALL_HINT}")
        self._dir = tempfile.TemporaryDirectory(prefix="tritium-prometheus-")
        root = Path(self._dir.name)
        config = root / "prometheus.yml"
        config.write_text(scrape_config(targets, rule_files))
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = root / "prometheus.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        command = [
            executable,
            f"--config.file={config}",
            f"--storage.tsdb.path={root / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--storage.tsdb.retention.time=1h",
        ]
        self.proc = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT)
        try:
            self._wait_ready(start_timeout)
        except BaseException:
            self.stop()
            raise

    def log_text(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"prometheus exited with {self.proc.returncode}:\n{self.log_text()}"
                )
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError):
                pass
            time.sleep(0.1)
        raise RuntimeError(f"prometheus not ready within {timeout}s:\n{self.log_text()}")

    def api(self, path: str, **params: str) -> dict[str, Any]:
        """GET ``/api/v1/<path>``: the decoded JSON answer, errors (HTTP 400/422) included."""
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=30) as response:
                return dict(json.loads(response.read()))
        except urllib.error.HTTPError as error:
            with error:
                return dict(json.loads(error.read()))

    def query(self, expr: str) -> dict[str, Any]:
        """An instant query: ``{"status": "success", "data": {...}}`` or the error."""
        return self.api("query", query=expr)

    def wait_for(self, expr: str, timeout: float = 60.0) -> list[dict[str, Any]]:
        """Poll ``expr`` until it returns a series (a filter like ``x >= 3`` waits for a
        value); the series."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            answer = self.query(expr)
            assert answer["status"] == "success", answer
            if answer["data"]["result"]:
                return list(answer["data"]["result"])
            time.sleep(0.25)
        raise AssertionError(f"{expr} returned nothing within {timeout}s:\n{self.log_text()}")

    def stop(self, timeout: float = 30.0) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        self._dir.cleanup()
