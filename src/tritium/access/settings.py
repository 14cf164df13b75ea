"""The access package's settings (a group of the server's options: options.py holds it)."""

from __future__ import annotations

from dataclasses import dataclass

from .policy import Restriction


@dataclass(frozen=True, slots=True)
class AccessOptions:
    """Access control and audit (access/): Triton's restricted API groups, tritium's bearer
    tokens, audit log and per-client in-flight bound."""

    http_restrictions: tuple[Restriction, ...] = ()
    grpc_restrictions: tuple[Restriction, ...] = ()
    auth_token_file: str = ""  # "" = no tokens required
    audit_log: str = ""  # "" = no audit log
    max_inflight_per_client: int = 0  # 0: unbounded
