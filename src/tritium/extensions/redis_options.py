"""``--cache-config redis,<key>=<value>`` → ``RedisCacheOptions``: Triton's redis cache keys
(its ``redis_cache`` repository: ``host``, ``port``, ``user``, ``password``, ``db``,
``connect_timeout``, ``socket_timeout``, ``pool_size``, ``wait_timeout``, ``tls_enabled``,
``cert``, ``key``, ``cacert``, ``cacert_dir``), the credentials from
``TRITONCACHE_REDIS_USERNAME`` / ``TRITONCACHE_REDIS_PASSWORD`` when the flags do not give them,
and tritium's own ``circuit_cooldown``, ``max_entry_bytes`` and ``ttl`` (seconds an entry
lives; Triton's redis cache has none). Pure: the environment is passed
in. Every refusal is a ``ValueError`` with the reason."""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from typing import Any

from ..options import RedisCacheOptions

USERNAME_ENV = "TRITONCACHE_REDIS_USERNAME"
PASSWORD_ENV = "TRITONCACHE_REDIS_PASSWORD"

# key → (RedisCacheOptions field, kind); kind: "str", "int" (≥ 0), "ms" (> 0), "count" (> 0).
_KEYS: dict[str, tuple[str, str]] = {
    "host": ("host", "str"),
    "port": ("port", "port"),
    "user": ("user", "str"),
    "password": ("password", "str"),
    "db": ("db", "int"),
    "connect_timeout": ("connect_timeout_ms", "ms"),
    "socket_timeout": ("socket_timeout_ms", "ms"),
    "pool_size": ("pool_size", "count"),
    "wait_timeout": ("wait_timeout_ms", "ms"),
    "tls_enabled": ("tls_enabled", "bool"),
    "cert": ("cert", "str"),
    "key": ("key", "str"),
    "cacert": ("cacert", "str"),
    "cacert_dir": ("cacert_dir", "str"),
    "circuit_cooldown": ("cooldown_ms", "ms"),
    "max_entry_bytes": ("max_entry_bytes", "count"),
    "ttl": ("ttl", "int"),
}
_TLS_FILES = ("cert", "key", "cacert", "cacert_dir")
_REFUSED = {
    "sni": "redis-py sends the host's name as the TLS server name; give that name as 'host'",
}
_MAX_ENTRY = 1 << 30  # an entry is read into memory: at most 1 GiB


def redis_options(settings: Mapping[str, str], env: Mapping[str, str]) -> RedisCacheOptions:
    """The Redis cache's options from its ``--cache-config`` settings; ``ValueError`` for an
    unknown key, a bad value, a missing host/port, or the ``redis`` package missing."""
    fields: dict[str, Any] = {}
    if env.get(USERNAME_ENV):
        fields["user"] = env[USERNAME_ENV]
    if env.get(PASSWORD_ENV):
        fields["password"] = env[PASSWORD_ENV]
    for key, text in settings.items():
        if key in _REFUSED:
            raise ValueError(f"redis cache setting '{key}' is not supported: {_REFUSED[key]}")
        if key not in _KEYS:
            raise ValueError(
                f"unknown setting '{key}' for the redis cache (known: {', '.join(_KEYS)})"
            )
        field, kind = _KEYS[key]
        fields[field] = _value(key, text, kind)
    _check(settings, fields)
    return RedisCacheOptions(**fields)


def _value(key: str, text: str, kind: str) -> object:
    if kind == "str":
        return text
    if kind == "bool":
        if text not in ("true", "false"):
            raise ValueError(f"redis cache setting '{key}' must be true or false, not '{text}'")
        return text == "true"
    if not text.isdigit() or len(text) > 12:
        raise ValueError(f"redis cache setting '{key}' must be a whole number, not '{text}'")
    number = int(text)
    if kind == "port" and not 0 < number < 65536:
        raise ValueError(f"redis cache setting 'port' must be 1-65535, not {number}")
    if kind == "ms" and number == 0:
        raise ValueError(
            f"redis cache setting '{key}' must be > 0 ms: tritium bounds every Redis call, "
            "so a Redis that does not answer costs a miss, not a hung inference"
        )
    if kind == "count" and number == 0:
        raise ValueError(f"redis cache setting '{key}' must be > 0")
    return number


def _check(settings: Mapping[str, str], fields: dict[str, Any]) -> None:
    if "host" not in settings or "port" not in settings or not fields["host"]:
        raise ValueError(
            "the redis cache needs at least 'host' and 'port', e.g. --cache-config "
            "redis,host=redis --cache-config redis,port=6379"
        )
    if not fields.get("tls_enabled"):
        given = [key for key in _TLS_FILES if key in settings]
        if given:
            raise ValueError(f"redis cache setting '{given[0]}' needs tls_enabled=true")
    if fields.get("max_entry_bytes", 0) > _MAX_ENTRY:
        raise ValueError(f"redis cache setting 'max_entry_bytes' is at most {_MAX_ENTRY}")
    if importlib.util.find_spec("redis") is None:
        raise ValueError("the redis cache needs the 'redis' package: pip install 'tritium[redis]'")
