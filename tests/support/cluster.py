"""Three tritium replicas behind HAProxy (deploy/haproxy/haproxy.cfg), sharing one Redis
response cache, scraped by one Prometheus: for tests/integration/test_cluster.py.

Every replica has fixed loopback ports (chosen free at start), so a replica killed or stopped
comes back where the balancer expects it. HAProxy logs one line per request (which replica,
the status, the client's X-Request-Num) to a file the tests read."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.prometheus_process import PrometheusProcess
from tests.support.redis_server import RedisServer, free_port
from testkit.server_process import ServerProcess

ROOT = Path(__file__).resolve().parents[2]
HAPROXY_CONFIG = ROOT / "deploy" / "haproxy" / "haproxy.cfg"
HAPROXY = shutil.which("haproxy")
# "<frontend> <backend>/<server> <status> <retries> <Ta> {<X-Request-Num>|<X-Sequence-Id>} ..."
_LINE = re.compile(r" (\S+)/(\S+) (-?\d+) \+?(\d+) -?\d+ \{([^|}]*)\|([^}]*)\}")


@dataclass(frozen=True)
class LogLine:
    backend: str
    server: str
    status: int
    retries: int  # HAProxy's %rc: retries (redispatched ones included)
    request_num: str
    sequence_id: str


class Replica:
    """One tritium with fixed ports; ``start`` again after ``kill`` or ``stop``."""

    def __init__(self, name: str, repo: Path, flags: list[str]) -> None:
        self.name = name
        self.repo = repo
        self.ports = {"http": free_port(), "grpc": free_port(), "metrics": free_port()}
        self.flags = flags
        self.server: ServerProcess | None = None

    def start(self) -> None:
        fixed = [f"--{service}-port={port}" for service, port in self.ports.items()]
        self.server = ServerProcess([self.repo], *self.flags, *fixed)

    def kill(self) -> None:
        assert self.server is not None
        self.server.proc.kill()
        self.server.proc.wait()
        self.server.stop()  # closes the log

    def stop(self) -> int:
        """SIGTERM, and wait for the drain and exit."""
        assert self.server is not None
        return self.server.stop()

    @property
    def http(self) -> str:
        return f"127.0.0.1:{self.ports['http']}"

    @property
    def grpc(self) -> str:
        return f"127.0.0.1:{self.ports['grpc']}"


@dataclass
class Cluster:
    replicas: list[Replica]
    redis: RedisServer
    prometheus: PrometheusProcess
    haproxy: subprocess.Popen[bytes]
    lb_http: str
    lb_grpc: str
    log_path: Path
    workdir: tempfile.TemporaryDirectory[str]
    lock: threading.Lock = field(default_factory=threading.Lock)

    def log_lines(self) -> list[LogLine]:
        lines = []
        for text in self.log_path.read_text(errors="replace").splitlines():
            match = _LINE.search(text)
            if match:
                backend, server, status, retries, num, seq = match.groups()
                lines.append(LogLine(backend, server, int(status), int(retries), num, seq))
        return lines

    def stop(self) -> None:
        if self.haproxy.poll() is None:
            self.haproxy.terminate()
            self.haproxy.wait(10)
        for replica in self.replicas:
            if replica.server is not None:
                replica.server.stop()
        self.prometheus.stop()
        self.redis.stop()
        self.workdir.cleanup()


def _haproxy(replicas: list[Replica], workdir: Path) -> tuple[subprocess.Popen[bytes], int, int]:
    assert HAPROXY is not None
    http_port, grpc_port = free_port(), free_port()
    env = dict(os.environ)
    env.update(
        TRITIUM_LB_ADDR="127.0.0.1",
        TRITIUM_LB_HTTP_PORT=str(http_port),
        TRITIUM_LB_GRPC_PORT=str(grpc_port),
    )
    for index, replica in enumerate(replicas, start=1):
        env[f"TRITIUM_R{index}_HTTP"] = replica.http
        env[f"TRITIUM_R{index}_GRPC"] = replica.grpc
    log = open(workdir / "haproxy.log", "wb")  # noqa: SIM115 - the process keeps it
    proc = subprocess.Popen(
        [HAPROXY, "-db", "-f", str(HAPROXY_CONFIG)], stdout=log, stderr=subprocess.STDOUT, env=env
    )
    log.close()
    return proc, http_port, grpc_port


def start_cluster(repo: Path, size: int = 3) -> Cluster:
    workdir = tempfile.TemporaryDirectory(prefix="tritium-cluster-")
    redis = RedisServer()
    cache = ["host=127.0.0.1", f"port={redis.port}", "socket_timeout=500", "connect_timeout=500"]
    flags = [arg for setting in cache for arg in ("--cache-config", f"redis,{setting}")]
    flags += ["--exit-timeout-secs=10"]
    replicas = [Replica(f"r{i}", repo, flags) for i in range(1, size + 1)]
    with ThreadPoolExecutor(size) as pool:
        list(pool.map(Replica.start, replicas))
    targets = [f"127.0.0.1:{r.ports['metrics']}" for r in replicas]
    prometheus = PrometheusProcess(targets, [])
    haproxy, http_port, grpc_port = _haproxy(replicas, Path(workdir.name))
    cluster = Cluster(
        replicas,
        redis,
        prometheus,
        haproxy,
        f"127.0.0.1:{http_port}",
        f"127.0.0.1:{grpc_port}",
        Path(workdir.name) / "haproxy.log",
        workdir,
    )
    wait_routed(cluster, [r.name for r in replicas])
    return cluster


def wait_routed(cluster: Cluster, names: list[str], timeout: float = 30.0) -> None:
    """Wait until HAProxy's checks see the named replicas up: a request to each through the
    balancer's stats is not available, so probe with plain health requests until every name
    appears in the log."""
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen = {line.server for line in cluster.log_lines() if line.status == 200}
        if set(names) <= seen:
            return
        try:
            url = f"http://{cluster.lb_http}/v2/health/ready"
            with urllib.request.urlopen(url, timeout=5):
                pass
        except OSError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"HAProxy never routed to {names}: {cluster.log_path.read_text()}")


NGINX = shutil.which("nginx")
NGINX_TEMPLATE = ROOT / "deploy" / "nginx" / "nginx.conf.template"


@dataclass
class Nginx:
    proc: subprocess.Popen[bytes]
    http: str
    grpc: str
    prefix: Path

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


def render_nginx(replicas: list[Replica], http_port: int, grpc_port: int) -> str:
    """deploy/nginx/nginx.conf.template with the ``${TRITIUM_*}`` names replaced (as
    ``envsubst`` restricted to them would), nginx's own ``$variables`` left alone."""
    values = {
        "TRITIUM_LB_ADDR": "127.0.0.1",
        "TRITIUM_LB_HTTP_PORT": str(http_port),
        "TRITIUM_LB_GRPC_PORT": str(grpc_port),
    }
    for index, replica in enumerate(replicas, start=1):
        values[f"TRITIUM_R{index}_HTTP"] = replica.http
        values[f"TRITIUM_R{index}_GRPC"] = replica.grpc
    text = NGINX_TEMPLATE.read_text()
    for name, value in values.items():
        text = text.replace("${" + name + "}", value)
    assert "${TRITIUM_" not in text
    return text


def start_nginx(cluster: Cluster) -> Nginx:
    assert NGINX is not None
    prefix = Path(cluster.workdir.name) / "nginx"
    for sub in ("temp/body", "temp/proxy", "temp/fastcgi", "temp/uwsgi", "temp/scgi"):
        (prefix / sub).mkdir(parents=True, exist_ok=True)
        (prefix / sub).chmod(0o777)  # nginx's workers may run as another user (root: nobody)
    for path in (Path(cluster.workdir.name), prefix, prefix / "temp"):
        path.chmod(0o755)
    http_port, grpc_port = free_port(), free_port()
    config = prefix / "nginx.conf"
    config.write_text(render_nginx(cluster.replicas, http_port, grpc_port))
    command = [NGINX, "-p", str(prefix), "-c", str(config), "-g", "daemon off;"]
    check = subprocess.run([*command[:-2], "-t"], capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stderr
    log = open(prefix / "nginx.log", "wb")  # noqa: SIM115 - the process keeps it
    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    log.close()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with socket.create_connection(("127.0.0.1", http_port), timeout=1):
                break
        except OSError:
            time.sleep(0.05)
    assert proc.poll() is None, (prefix / "nginx.log").read_text()
    return Nginx(proc, f"127.0.0.1:{http_port}", f"127.0.0.1:{grpc_port}", prefix)
