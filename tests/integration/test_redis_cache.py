"""The shared response cache in a real Redis (``--cache-config redis,...``): an entry stored by
one server is a hit on another; a Redis that is paused (SIGSTOP), killed, or refuses the
credentials costs misses, never a failed inference, and is used again once it answers;
``user``/``password``/``db`` and TLS with a client certificate reach Redis; bad settings stop
the server at start."""

from __future__ import annotations

import struct
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.support import clients
from tests.support.certs import have_openssl, make_certs
from tests.support.redis_server import REDIS_SERVER, SKIP_REASON, RedisServer, free_port
from tests.support.server_process import ServerProcess, server_command

pytestmark = pytest.mark.skipif(REDIS_SERVER is None, reason=SKIP_REASON)
redis = pytest.importorskip("redis")

_CONFIG = """\
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ -1 ] } ]
output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ -1 ] } ]
response_cache { enable: true }
"""
_MODEL = """\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy() * 2)])
            for r in requests]
"""
_MODELS = ("shared_http", "shared_grpc", "outage")
# Short bounds, so an outage costs the tests little: 300 ms per call, 300 ms of cool-down.
_FAST = ("connect_timeout=300", "socket_timeout=300", "wait_timeout=300", "circuit_cooldown=300")


def _cache_flags(port: int, *settings: str) -> list[str]:
    flags: list[str] = []
    for setting in ("host=127.0.0.1", f"port={port}", *_FAST, *settings):
        flags += ["--cache-config", f"redis,{setting}"]
    return flags


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("redis") / "repo"
    for name in _MODELS:
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(_CONFIG)
        (root / name / "1" / "model.py").write_text(_MODEL)
    return root


@pytest.fixture(scope="module")
def shared_redis() -> Iterator[RedisServer]:
    server = RedisServer()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def pair(repo: Path, shared_redis: RedisServer) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    flags = _cache_flags(shared_redis.port)
    first = ServerProcess([repo], *flags)
    try:
        second = ServerProcess([repo], *flags)
    except BaseException:
        first.stop()
        raise
    yield first, second
    first.stop()
    second.stop()


def _infer(server: ServerProcess, protocol: str, model: str, x: np.ndarray) -> None:
    """One inference, checked: the answer is right whatever the cache did."""
    http = protocol == "http"  # a hung inference fails the test instead of hanging it
    client = clients.client(protocol, server.url(protocol), **(
        {"network_timeout": 60.0} if http else {}
    ))
    kwargs: dict[str, Any] = {} if http else {"client_timeout": 60.0}
    result = client.infer(model, [clients.make_input(protocol, "INPUT0", x, "FP32")], **kwargs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x * 2)


def _stats(server: ServerProcess, model: str) -> dict[str, int]:
    stats = clients.client("http", server.http_url).get_inference_statistics(model)
    (entry,) = stats["model_stats"]
    infer = entry["inference_stats"]
    return {
        "hits": int(infer["cache_hit"]["count"]),
        "misses": int(infer["cache_miss"]["count"]),
        "executions": int(entry["execution_count"]),
        "successes": int(infer["success"]["count"]),
        "failures": int(infer["fail"]["count"]),
    }


def _entries(server: RedisServer, **auth: Any) -> int:
    client = redis.Redis(host="127.0.0.1", port=server.port, socket_timeout=5, **auth)
    try:
        return len(client.keys("tritium:cache:v1:*"))
    finally:
        client.close()


def _wait_for(condition: Any, what: str, tries: int = 100) -> None:
    for _ in range(tries):
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"never: {what}")


def _metric(server: ServerProcess, name: str, model: str) -> str:
    url = f"http://127.0.0.1:{server.ports['metrics']}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    prefix = f'{name}{{model="{model}",version="1"}} '
    (line,) = [line for line in text.splitlines() if line.startswith(prefix)]
    return line[len(prefix):]


def test_an_entry_stored_by_one_server_is_a_hit_on_another(
    pair: tuple[ServerProcess, ServerProcess], shared_redis: RedisServer, protocol: str
) -> None:
    first, second = pair
    model = f"shared_{protocol}"
    x = np.array([1.0, 2.5, -3.0], dtype=np.float32)
    stored = _entries(shared_redis)
    _infer(first, protocol, model, x)
    _wait_for(lambda: _entries(shared_redis) > stored, "the entry reached Redis")
    for _ in range(3):
        _infer(second, protocol, model, x)
    assert _stats(first, model) == {
        "hits": 0, "misses": 1, "executions": 1, "successes": 1, "failures": 0
    }
    assert _stats(second, model) == {
        "hits": 3, "misses": 0, "executions": 0, "successes": 3, "failures": 0
    }
    assert _metric(second, "nv_cache_num_hits_per_model", model) == "3"
    assert _metric(first, "nv_cache_num_misses_per_model", model) == "1"


def test_an_entry_that_is_not_tritium_s_is_a_miss(
    pair: tuple[ServerProcess, ServerProcess], shared_redis: RedisServer
) -> None:
    """What Redis sends back is untrusted: a value another writer put under the key (garbage,
    a forged tensor whose shape does not match its bytes) is a miss, and the model answers."""
    first, second = pair
    x = np.array([6.0, 7.0], dtype=np.float32)
    client = redis.Redis(host="127.0.0.1", port=shared_redis.port, socket_timeout=5)
    earlier = set(client.keys("tritium:cache:v1:*"))
    _infer(first, "http", "shared_http", x)
    _wait_for(lambda: set(client.keys("tritium:cache:v1:*")) - earlier, "the entry in Redis")
    (key,) = set(client.keys("tritium:cache:v1:*")) - earlier
    forged = (
        b"TRC1" + struct.pack("<H", 1) + struct.pack("<H", 7) + b"OUTPUT0" + struct.pack("<B", 4)
        + b"FP32" + struct.pack("<B", 1) + struct.pack("<q", 1000) + struct.pack("<Q", 8)
        + b"\0" * 8
    )
    try:
        for value in (b"\xff" * 64, forged):
            client.set(key, value)
            before = _stats(second, "shared_http")
            _infer(second, "http", "shared_http", x)  # checked: x * 2, from the model
            after = _stats(second, "shared_http")
            assert after["misses"] == before["misses"] + 1
            assert after["executions"] == before["executions"] + 1
            # The miss stored a good entry again: wait for it before forging the next.
            _wait_for(lambda v=value: client.get(key) != v, "the entry stored again")
    finally:
        client.close()
    assert "ignoring the entry" in second.log_text()


def _outage(server: ServerProcess, x: np.ndarray, count: int) -> None:
    """``count`` distinct requests over both protocols while Redis cannot answer: every one is
    answered right, each is a miss and runs the model."""
    before = _stats(server, "outage")
    for i in range(count):
        _infer(server, ("http", "grpc")[i % 2], "outage", x + i)
    after = _stats(server, "outage")
    assert after["misses"] - before["misses"] == count
    assert after["executions"] - before["executions"] == count
    assert after["hits"] == before["hits"] and after["failures"] == 0


def _hits_again(server: ServerProcess, x: np.ndarray) -> None:
    """Once Redis answers again (after the cool-down), a repeated request becomes a hit."""
    hits = _stats(server, "outage")["hits"]

    def hit() -> bool:
        _infer(server, "http", "outage", x)
        return _stats(server, "outage")["hits"] > hits

    _wait_for(hit, "a hit after Redis came back")


def test_a_paused_redis_costs_misses_then_is_used_again(
    pair: tuple[ServerProcess, ServerProcess], shared_redis: RedisServer
) -> None:
    server = pair[0]
    x = np.array([10.0, 20.0], dtype=np.float32)
    shared_redis.pause()  # connected sockets stay open: only the timeouts end the calls
    try:
        _outage(server, x, 4)
    finally:
        shared_redis.resume()
    assert "Redis cache unavailable" in server.log_text()
    _hits_again(server, x)


def test_a_redis_that_is_down_costs_misses_then_is_used_again(
    pair: tuple[ServerProcess, ServerProcess], shared_redis: RedisServer
) -> None:
    server = pair[0]
    x = np.array([-7.0], dtype=np.float32)
    shared_redis.kill()
    try:
        _outage(server, x, 4)
    finally:
        shared_redis.start()  # the same port, empty
    _hits_again(server, x)


_ACL = ("--user", "default", "off", "--user", "tritium", "on", ">s3cret", "~*", "+@all")


def test_user_password_and_db_reach_redis(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    locked = RedisServer(*_ACL)
    try:
        server = ServerProcess(
            [repo], *_cache_flags(locked.port, "user=tritium", "password=s3cret", "db=5")
        )
        try:
            x = np.array([4.0, 5.0], dtype=np.float32)
            _infer(server, "grpc", "outage", x)
            auth = {"username": "tritium", "password": "s3cret"}
            _wait_for(lambda: _entries(locked, db=5, **auth) == 1, "the entry in db 5")
            assert _entries(locked, db=0, **auth) == 0
            _infer(server, "http", "outage", x)
            assert _stats(server, "outage")["hits"] == 1
        finally:
            server.stop()
        # Credentials from Triton's variables, here wrong: misses, answers all the same.
        monkeypatch.setenv("TRITONCACHE_REDIS_USERNAME", "tritium")
        monkeypatch.setenv("TRITONCACHE_REDIS_PASSWORD", "wrong")
        server = ServerProcess([repo], *_cache_flags(locked.port))
        try:
            _outage(server, np.array([1.0], dtype=np.float32), 2)
            assert "does not answer" in server.log_text()
        finally:
            server.stop()
    finally:
        locked.stop()


@pytest.mark.skipif(not have_openssl(), reason="openssl not installed")
def test_tls_with_a_client_certificate(repo: Path, tmp_path: Path) -> None:
    certs = make_certs(tmp_path)
    tls_port = free_port()
    secure = RedisServer(
        "--tls-port", str(tls_port), "--tls-cert-file", str(certs.server_cert),
        "--tls-key-file", str(certs.server_key), "--tls-ca-cert-file", str(certs.ca),
        "--tls-auth-clients", "yes",
    )  # fmt: skip
    mutual = (f"cert={certs.client_cert}", f"key={certs.client_key}")
    try:
        flags = _cache_flags(tls_port, "tls_enabled=true", f"cacert={certs.ca}", *mutual)
        server = ServerProcess([repo], *flags)
        try:
            x = np.array([8.5], dtype=np.float32)
            _infer(server, "http", "outage", x)
            _wait_for(lambda: _entries(secure) == 1, "the entry stored over TLS")
            _infer(server, "grpc", "outage", x)
            assert _stats(server, "outage")["hits"] == 1
        finally:
            server.stop()
        # A server certificate this client does not trust: misses, answers all the same.
        flags = _cache_flags(tls_port, "tls_enabled=true", f"cacert={certs.other_ca}", *mutual)
        server = ServerProcess([repo], *flags)
        try:
            _outage(server, np.array([9.5], dtype=np.float32), 2)
            assert "does not answer" in server.log_text()
        finally:
            server.stop()
    finally:
        secure.stop()


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("ttl=5", "unknown setting 'ttl' for the redis cache"),
        ("socket_timeout=0", "'socket_timeout' must be > 0 ms"),
    ],  # the other refusals: tests/unit/test_redis_settings.py
)
def test_bad_settings_stop_the_server_at_start(repo: Path, setting: str, message: str) -> None:
    command = server_command([repo], *_cache_flags(6379, setting))
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode != 0
    assert message in done.stderr
