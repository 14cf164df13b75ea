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
from testkit.server_process import ServerProcess, server_command

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
_SCALED = """\
import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
            * json.loads(r.parameters()).get("scale", 2))]) for r in requests]
"""
_MODELS = ("shared_http", "shared_grpc", "outage", "forged", "huge")
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
    (root / "scaled" / "1").mkdir(parents=True)
    (root / "scaled" / "config.pbtxt").write_text(_CONFIG)
    (root / "scaled" / "1" / "model.py").write_text(_SCALED)
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


def _infer(
    server: ServerProcess, protocol: str, model: str, x: np.ndarray, scale: int | None = None
) -> None:
    """One inference, checked: the answer is right whatever the cache did (x * 2, or x *
    ``scale`` sent as the request's parameter ``scale`` to the ``scaled`` model)."""
    http = protocol == "http"  # a hung inference fails the test instead of hanging it
    client = clients.client(
        protocol, server.url(protocol), **({"network_timeout": 60.0} if http else {})
    )
    kwargs: dict[str, Any] = {} if http else {"client_timeout": 60.0}
    if scale is not None:
        kwargs["parameters"] = {"scale": scale}
    result = client.infer(model, [clients.make_input(protocol, "INPUT0", x, "FP32")], **kwargs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x * (2 if scale is None else scale))


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
    return line[len(prefix) :]


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
        "hits": 0,
        "misses": 1,
        "executions": 1,
        "successes": 1,
        "failures": 0,
    }
    assert _stats(second, model) == {
        "hits": 3,
        "misses": 0,
        "executions": 0,
        "successes": 3,
        "failures": 0,
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
        b"TRC1"
        + struct.pack("<H", 1)
        + struct.pack("<H", 7)
        + b"OUTPUT0"
        + struct.pack("<B", 4)
        + b"FP32"
        + struct.pack("<B", 1)
        + struct.pack("<q", 1000)
        + struct.pack("<Q", 8)
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
        ("expire=5", "unknown setting 'expire' for the redis cache"),
        ("socket_timeout=0", "'socket_timeout' must be > 0 ms"),
    ],  # the other refusals: tests/unit/test_redis_settings.py
)
def test_bad_settings_stop_the_server_at_start(repo: Path, setting: str, message: str) -> None:
    command = server_command([repo], *_cache_flags(6379, setting))
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode != 0
    assert message in done.stderr


# ------------------------------------------------ what a key means, how long, and what is served


def _stored_key(client: Any, earlier: set[bytes]) -> bytes:
    """The one key stored since ``earlier`` (the keys then), once it is in Redis."""
    _wait_for(lambda: set(client.keys("tritium:cache:v1:*")) - earlier, "the entry in Redis")
    (key,) = set(client.keys("tritium:cache:v1:*")) - earlier
    return bytes(key)


def _entry(*tensors: tuple[bytes, bytes, tuple[int, ...], bytes]) -> bytes:
    """A well-formed tritium entry (``redis_cache.py``'s layout) holding ``tensors``."""
    value = b"TRC1" + struct.pack("<H", len(tensors))
    for name, wire, shape, data in tensors:
        value += struct.pack("<H", len(name)) + name + struct.pack("<B", len(wire)) + wire
        value += struct.pack("<B", len(shape)) + struct.pack(f"<{len(shape)}q", *shape)
        value += struct.pack("<Q", len(data)) + data
    return value


def test_request_parameters_are_part_of_the_key(
    pair: tuple[ServerProcess, ServerProcess], shared_redis: RedisServer
) -> None:
    """A Python model reads the request's parameters: client A's answer with {"scale": 100}
    is not served to client B asking {"scale": 1} with the same inputs (on another replica),
    while the same parameters are a hit, whichever door they came through."""
    first, second = pair
    x = np.array([1.5, -2.0], dtype=np.float32)
    client = redis.Redis(host="127.0.0.1", port=shared_redis.port, socket_timeout=5)
    try:
        earlier = set(client.keys("tritium:cache:v1:*"))
        _infer(first, "http", "scaled", x, scale=100)
        _stored_key(client, earlier)
        _infer(second, "grpc", "scaled", x, scale=1)  # checked: x * 1, from the model
        _infer(second, "grpc", "scaled", x, scale=100)  # the same parameters: a hit
    finally:
        client.close()
    stats = _stats(second, "scaled")
    assert (stats["hits"], stats["misses"], stats["executions"]) == (1, 1, 1)


def test_an_entry_whose_outputs_do_not_match_the_request_is_not_served(
    pair: tuple[ServerProcess, ServerProcess], shared_redis: RedisServer
) -> None:
    """A well-formed entry written straight into Redis under the request's key, whose outputs
    are not what the request and the model's config make (a name the model does not have, a
    datatype other than the config's), is a miss: the model answers."""
    first, second = pair
    x = np.array([3.0, 4.0], dtype=np.float32)
    client = redis.Redis(host="127.0.0.1", port=shared_redis.port, socket_timeout=5)
    try:
        earlier = set(client.keys("tritium:cache:v1:*"))
        _infer(first, "http", "forged", x)
        key = _stored_key(client, earlier)
        evil = np.array([1.5, 2.5], dtype=np.float32).tobytes()
        ints = np.array([66, 66], dtype=np.int32).tobytes()
        for forged in (
            _entry((b"EVIL", b"FP32", (2,), evil)),
            _entry((b"OUTPUT0", b"INT32", (2,), ints)),
            _entry((b"OUTPUT0", b"FP32", (2,), evil), (b"EVIL", b"FP32", (2,), evil)),
        ):
            client.set(key, forged)
            before = _stats(second, "forged")
            _infer(second, "http", "forged", x)  # checked: x * 2, from the model
            after = _stats(second, "forged")
            assert after["misses"] == before["misses"] + 1 and after["hits"] == before["hits"]
            assert after["executions"] == before["executions"] + 1
            _wait_for(lambda v=forged: client.get(key) != v, "the entry stored again")
    finally:
        client.close()  # (the warning: at most one a minute, tests/unit/test_cache_generation.py)


def _peak_rss(server: ServerProcess) -> int:
    """The server process's peak resident set (VmHWM), in bytes."""
    for line in Path(f"/proc/{server.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def test_a_huge_entry_is_refused_without_being_read(
    pair: tuple[ServerProcess, ServerProcess], shared_redis: RedisServer
) -> None:
    """A 256 MiB value under the request's key (a hostile writer) is refused before it is read
    whole: the lookup is a miss and the server's peak memory grows by far less than the
    value (generous bound: 8 MiB, where reading the value whole costs 64 MiB or more)."""
    first, second = pair
    x = np.array([5.0, 6.0], dtype=np.float32)
    client = redis.Redis(host="127.0.0.1", port=shared_redis.port, socket_timeout=30)
    try:
        earlier = set(client.keys("tritium:cache:v1:*"))
        _infer(first, "http", "huge", x)
        key = _stored_key(client, earlier)
        data = np.array([10.0, 12.0], dtype=np.float32).tobytes()
        client.set(key, _entry((b"OUTPUT0", b"FP32", (2,), data)))
        client.setrange(key, (256 << 20) - 1, b"\0")  # the same head, 256 MiB in all
        before_stats, before_rss = _stats(second, "huge"), _peak_rss(second)
        _infer(second, "http", "huge", x)  # checked: x * 2, from the model
        grown = _peak_rss(second) - before_rss
        print(f"peak RSS grew by {grown / (1 << 20):.1f} MiB for a 256 MiB entry")
        after = _stats(second, "huge")
        assert after["misses"] == before_stats["misses"] + 1
        assert after["executions"] == before_stats["executions"] + 1
        assert grown < 8 << 20
    finally:
        client.delete(key)
        client.close()


def test_entries_expire_after_ttl(repo: Path) -> None:
    """``redis,ttl=<seconds>``: each entry is stored with that expiry (Redis's own TTL shows
    it), and once it passed the entry is gone from Redis and the next request a miss."""
    own = RedisServer()
    try:
        server = ServerProcess([repo], *_cache_flags(own.port, "ttl=1"))
        client = redis.Redis(host="127.0.0.1", port=own.port, socket_timeout=5)
        try:
            x = np.array([2.0], dtype=np.float32)
            _infer(server, "http", "outage", x)
            key = _stored_key(client, set())
            assert 0 < client.pttl(key) <= 1000
            _wait_for(lambda: client.exists(key) == 0, "the entry expired", tries=50)
            _infer(server, "grpc", "outage", x)
            assert _stats(server, "outage")["misses"] == 2
        finally:
            client.close()
            server.stop()
    finally:
        own.stop()


_RELOADED = """\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy() * FACTOR)])
            for r in requests]
"""


def test_a_reload_with_new_code_does_not_serve_old_answers(
    tmp_path: Path, shared_redis: RedisServer
) -> None:
    """A model reloaded at the same version with new code is a new generation: the entries
    its old code stored are not served (not by the server that reloaded it, nor by a second
    server that loads the new code), while the new code's answers are shared again."""
    repo = tmp_path / "repo"
    (repo / "reloaded" / "1").mkdir(parents=True)
    (repo / "reloaded" / "config.pbtxt").write_text(_CONFIG)
    code = repo / "reloaded" / "1" / "model.py"
    code.write_text(_RELOADED.replace("FACTOR", "2"))
    flags = _cache_flags(shared_redis.port)
    server = ServerProcess([repo], "--model-control-mode=explicit", "--load-model=reloaded", *flags)
    client = redis.Redis(host="127.0.0.1", port=shared_redis.port, socket_timeout=5)
    try:
        x = np.array([7.0, 8.0], dtype=np.float32)
        earlier = set(client.keys("tritium:cache:v1:*"))
        _infer(server, "http", "reloaded", x)  # x * 2
        _stored_key(client, earlier)
        code.write_text(_RELOADED.replace("FACTOR", "3"))
        clients.client("http", server.http_url).load_model("reloaded")  # same version 1
        result = clients.client("http", server.http_url).infer(
            "reloaded", [clients.make_input("http", "INPUT0", x, "FP32")]
        )
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x * 3)
        other = ServerProcess([repo], *flags)  # the new code from the start: shares the entry
        try:
            _wait_for(lambda: len(set(client.keys("tritium:cache:v1:*")) - earlier) == 2, "stored")
            result = clients.client("grpc", other.grpc_url).infer(
                "reloaded", [clients.make_input("grpc", "INPUT0", x, "FP32")]
            )
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x * 3)
            assert _stats(other, "reloaded")["hits"] == 1
        finally:
            other.stop()
    finally:
        client.close()
        server.stop()
