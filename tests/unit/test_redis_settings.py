"""The Redis cache without a Redis: Triton's ``--cache-config redis,...`` keys, the entry
format (what comes back from Redis is untrusted), the circuit breaker."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from tritium.extensions.cache import parse_cache_config
from tritium.extensions.redis_cache import (
    MAGIC,
    BadEntry,
    CircuitBreaker,
    decode_entry,
    encode_entry,
)
from tritium.extensions.redis_options import redis_options
from tritium.types import DataType, Tensor
from tritium.tensor_codec import object_array


def _redis(*settings: str) -> object:
    return parse_cache_config([f"redis,{s}" for s in settings]).redis


def test_triton_keys_are_read() -> None:
    options = parse_cache_config(
        [
            "redis,host=cache.local",
            "redis,port=6380",
            "redis,user=alice",
            "redis,password=secret",
            "redis,db=3",
            "redis,connect_timeout=250",
            "redis,socket_timeout=300",
            "redis,pool_size=2",
            "redis,wait_timeout=50",
            "redis,tls_enabled=true",
            "redis,cert=/c.pem",
            "redis,key=/k.pem",
            "redis,cacert=/ca.pem",
            "redis,cacert_dir=/cas",
            "redis,circuit_cooldown=500",
            "redis,max_entry_bytes=4096",
            "redis,ttl=3600",
        ]
    ).redis
    assert options is not None
    assert (options.host, options.port, options.user, options.password) == (
        "cache.local",
        6380,
        "alice",
        "secret",
    )
    assert (options.db, options.pool_size, options.max_entry_bytes) == (3, 2, 4096)
    assert (options.connect_timeout_ms, options.socket_timeout_ms) == (250, 300)
    assert (options.wait_timeout_ms, options.cooldown_ms) == (50, 500)
    assert options.tls_enabled and (options.cert, options.key) == ("/c.pem", "/k.pem")
    assert (options.cacert, options.cacert_dir) == ("/ca.pem", "/cas")
    assert options.ttl == 3600
    defaults = _redis("host=h", "port=1")
    assert defaults is not None and defaults.ttl == 0  # type: ignore[attr-defined]


def test_credentials_from_the_environment_unless_given() -> None:
    env = {"TRITONCACHE_REDIS_USERNAME": "env-user", "TRITONCACHE_REDIS_PASSWORD": "env-pw"}
    options = redis_options({"host": "h", "port": "1"}, env)
    assert (options.user, options.password) == ("env-user", "env-pw")
    options = redis_options({"host": "h", "port": "1", "password": "flag"}, env)
    assert (options.user, options.password) == ("env-user", "flag")


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (("host=h",), "needs at least 'host' and 'port'"),
        (("port=1",), "needs at least 'host' and 'port'"),
        (("host=h", "port=0"), "1-65535"),
        (("host=h", "port=x"), "whole number"),
        (("host=h", "port=1", "socket_timeout=0"), "must be > 0 ms"),
        (("host=h", "port=1", "connect_timeout=-5"), "whole number"),
        (("host=h", "port=1", "pool_size=0"), "must be > 0"),
        (("host=h", "port=1", "tls_enabled=yes"), "true or false"),
        (("host=h", "port=1", "cert=/c.pem"), "needs tls_enabled=true"),
        (("host=h", "port=1", "sni=name"), "not supported"),
        (("host=h", "port=1", "expire=5"), "unknown setting 'expire'"),
        (("host=h", "port=1", "ttl=soon"), "'ttl' must be a whole number"),
        (("host=h", "port=1", "ttl=-1"), "'ttl' must be a whole number"),
        (("host=h", "port=1", "max_entry_bytes=99999999999"), "at most"),
    ],
)
def test_bad_settings_are_refused(settings: tuple[str, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _redis(*settings)


def _outputs() -> list[Tensor]:
    floats = np.arange(6, dtype=np.float32).reshape(2, 3)
    strings = object_array([b"a", b"", b"\xff\x00z"], (3, 1))
    empty = np.zeros((0, 4), dtype=np.int64)
    return [
        Tensor("F", DataType.FP32, floats.shape, floats),
        Tensor("S", DataType.BYTES, strings.shape, strings),
        Tensor("E", DataType.INT64, empty.shape, empty),
    ]


def test_entries_round_trip() -> None:
    decoded = decode_entry(encode_entry(_outputs()))
    for got, want in zip(decoded, _outputs(), strict=True):
        assert (got.name, got.datatype, got.shape) == (want.name, want.datatype, want.shape)
        assert got.data.shape == want.data.shape
        assert got.data.tolist() == want.data.tolist()


def _header(count: int) -> bytes:
    return MAGIC + struct.pack("<H", count)


def _tensor(name: bytes, wire: bytes, shape: tuple[int, ...], data: bytes) -> bytes:
    return (
        struct.pack("<H", len(name))
        + name
        + struct.pack("<B", len(wire))
        + wire
        + struct.pack("<B", len(shape))
        + struct.pack(f"<{len(shape)}q", *shape)
        + struct.pack("<Q", len(data))
        + data
    )


@pytest.mark.parametrize(
    "value",
    [
        b"",
        b"garbage",
        b"TRC0" + b"\0\0",
        _header(2000),
        _header(1) + _tensor(b"X", b"FP32", (2,), b"\0" * 4),  # 2 floats need 8 bytes
        _header(1) + _tensor(b"X", b"FP99", (1,), b"\0" * 4),
        _header(1) + _tensor(b"X", b"FP32", (-1,), b"\0" * 4),
        _header(1) + _tensor(b"X", b"FP32", (1 << 40, 1 << 40), b"\0" * 4),
        _header(1) + _tensor(b"\xff", b"FP32", (1,), b"\0" * 4),
        _header(1) + _tensor(b"X", b"BYTES", (2,), struct.pack("<I", 99) + b"ab"),
        _header(1) + _tensor(b"X", b"FP32", (1,), b"\0" * 4) + b"trailing",
        _header(2) + _tensor(b"X", b"FP32", (1,), b"\0" * 4),  # the second is missing
        _header(1) + _tensor(b"X", b"FP32", (1,), b"\0" * 4)[:-3],
    ],
)
def test_malformed_entries_are_refused(value: bytes) -> None:
    with pytest.raises(BadEntry):
        decode_entry(value)


def test_the_circuit_opens_on_failure_and_tries_again_after_the_cooldown() -> None:
    now = [100.0]
    circuit = CircuitBreaker(2.0, clock=lambda: now[0])
    assert circuit.allow()
    assert circuit.failed() is True  # opened
    assert not circuit.allow()
    now[0] += 1.9
    assert not circuit.allow()
    now[0] += 0.2
    assert circuit.allow()  # half-open: one call goes through
    assert not circuit.allow()  # ... and only one
    assert circuit.failed() is False  # still open, for another cool-down
    assert not circuit.allow()
    now[0] += 2.1
    assert circuit.allow()
    assert circuit.succeeded() is True  # closed again
    assert circuit.allow() and circuit.allow()
    assert circuit.openings == 1


def test_a_missing_redis_package_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "redis" else real(name, *a)
    )
    with pytest.raises(ValueError, match=r"pip install 'tritium\[redis\]'"):
        _redis("host=h", "port=1")
