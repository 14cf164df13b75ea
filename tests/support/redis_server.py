"""A real ``redis-server`` (Debian's package) on a loopback port, for the Redis cache tests:
no persistence, readiness by PING, and the means to stop, pause (SIGSTOP) or restart it on the
same port."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

REDIS_SERVER = shutil.which("redis-server")
SKIP_REASON = "redis-server not installed (make ops-deps installs Debian's redis-server)"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class RedisServer:
    """``extra``: more ``redis-server`` arguments (``--requirepass``, ``--user``...)."""

    def __init__(self, *extra: str, port: int | None = None) -> None:
        assert REDIS_SERVER is not None, SKIP_REASON
        self.port = port or free_port()
        self.extra = extra
        self._dir = tempfile.TemporaryDirectory(prefix="tritium-redis-")
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self, timeout: float = 20.0) -> None:
        assert REDIS_SERVER is not None
        command = [
            REDIS_SERVER,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            self._dir.name,
            "--protected-mode",
            "no",
            *self.extra,
        ]
        log = open(Path(self._dir.name) / "redis.log", "ab")  # noqa: SIM115 - redis keeps it
        self.proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited: {self.log_text()}")
            if self._answers():
                return
            time.sleep(0.05)
        raise RuntimeError(f"redis-server not answering: {self.log_text()}")

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as conn:
                conn.sendall(b"PING\r\n")
                reply = conn.recv(64)
                return reply.startswith((b"+PONG", b"-NOAUTH"))
        except OSError:
            return False

    def log_text(self) -> str:
        return (Path(self._dir.name) / "redis.log").read_text(errors="replace")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def pause(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._dir.cleanup()
