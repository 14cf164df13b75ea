"""Who may call what: Triton's restricted API groups, bearer tokens, per-client in-flight bounds.

Pure policy, no transport. A front-end maps each route or RPC to its Triton API group, calls
``AccessPolicy.admit`` once per request and turns a refusal into its own status (one small
table per front-end, like ErrorKind):

- Triton's ``--http-restricted-api`` / ``--grpc-restricted-protocol``: a group needs a header
  (gRPC: the metadata key ``triton-grpc-protocol-<key>``) with an exact value; otherwise
  Triton answers "This API|protocol is restricted, expecting header '<key>'".
- tritium's ``--auth-token-file``: ``Authorization: Bearer <token>`` on both protocols, each
  token optionally limited to some groups. Health stays open to tokenless probes (Kubernetes)
  unless a restricted-API rule covers it.
- tritium's ``--max-inflight-per-client``: inference requests in flight per client host,
  counted per request on every protocol (each request on a gRPC ModelStreamInfer stream holds
  a slot until its final response, the stream itself none).
"""

from __future__ import annotations

import enum
import hashlib
import hmac
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote

from .audit import AuditLog, peer_host

if TYPE_CHECKING:
    from .settings import AccessOptions

GRPC_HEADER_PREFIX = "triton-grpc-protocol-"  # Triton's kRestrictedProtocolHeaderTemplate
MAX_TOKEN_FILE_BYTES = 1 << 20


class ApiGroup(enum.StrEnum):
    """Triton's RESTRICTED_CATEGORY_NAMES, in Triton's order."""

    HEALTH = "health"
    METADATA = "metadata"
    INFERENCE = "inference"
    SHARED_MEMORY = "shared-memory"
    MODEL_CONFIG = "model-config"
    MODEL_REPOSITORY = "model-repository"
    STATISTICS = "statistics"
    TRACE = "trace"
    LOGGING = "logging"


# Groups a tokenless client may use when tokens are required: liveness/readiness probes.
TOKEN_FREE_GROUPS = frozenset({ApiGroup.HEALTH})


class RefusalKind(enum.StrEnum):
    RESTRICTED = "restricted"  # Triton's restricted-API header missing or wrong
    UNAUTHENTICATED = "unauthenticated"  # no bearer token, or an unknown one
    FORBIDDEN = "forbidden"  # a valid token without this API group
    TOO_MANY_REQUESTS = "too_many_requests"  # --max-inflight-per-client reached


@dataclass(frozen=True, slots=True)
class Restriction:
    """One group's required header (lower-case name) and value."""

    group: ApiGroup
    header: str
    value: str


@dataclass(frozen=True, slots=True)
class Refusal:
    kind: RefusalKind
    message: str


@dataclass(frozen=True, slots=True)
class Verdict:
    """The answer to one request: its identity (a token's name), a refusal, or both empty.

    ``client`` is set when the request holds an in-flight slot that must be released; ``key``
    is the restricted-API header that admitted it (its name: the access log shows it)."""

    identity: str | None = None
    refusal: Refusal | None = None
    client: str | None = None
    key: str | None = None


ALLOWED = Verdict()


def parse_restrictions(
    values: Iterable[str], option: str, feature: str, prefix: str = ""
) -> tuple[Restriction, ...]:
    """``<group>[,<group>...]:<key>=<value>`` per value, with Triton's parse errors
    (``feature`` is "api" for HTTP, "protocol" for gRPC, whose key gets ``prefix``)."""
    seen: dict[ApiGroup, Restriction] = {}
    for arg in values:
        names, sep, setting = arg.partition(":")
        key, eq, value = setting.partition("=")
        if not (sep and eq and names and key and value):
            raise ValueError(
                f"--{option} option format is '<config name>:<setting>=<value>'. Got {arg}"
            )
        for name in names.split(","):
            try:
                group = ApiGroup(name)
            except ValueError:
                raise ValueError(f"unknown restricted {feature} '{name}'") from None
            if group in seen:
                raise ValueError(
                    f"restricted {feature} '{name}' can not be specified in multiple config groups"
                )
            seen[group] = Restriction(group, (prefix + key).lower(), value)
    return tuple(seen.values())


@dataclass(frozen=True, slots=True)
class Token:
    """A bearer token as kept in memory: its name and SHA-256 digest, never the secret."""

    name: str
    digest: bytes
    groups: frozenset[ApiGroup]


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("utf-8", "surrogateescape")).digest()


def parse_tokens(text: str) -> tuple[Token, ...]:
    """The token file: one ``<token> [<group>[,<group>...]|*] [<name>]`` per line; ``#``
    starts a comment. No groups (or ``*``): every group. No name: ``token-<n>`` (n counts the
    tokens from 1), the identity written to the audit log."""
    tokens: list[Token] = []
    digests: set[bytes] = set()
    for number, raw in enumerate(text.splitlines(), 1):
        fields = raw.split("#", 1)[0].split()
        if not fields:
            continue
        if len(fields) > 3:
            raise ValueError(f"line {number}: expected '<token> [<groups>] [<name>]'")
        groups = _token_groups(fields[1], number) if len(fields) > 1 else frozenset(ApiGroup)
        name = fields[2] if len(fields) > 2 else f"token-{len(tokens) + 1}"
        digest = _digest(fields[0])
        if digest in digests:
            raise ValueError(f"line {number}: the same token appears twice")
        if any(t.name == name for t in tokens):
            raise ValueError(f"line {number}: the token name '{name}' appears twice")
        digests.add(digest)
        tokens.append(Token(name, digest, groups))
    if not tokens:
        raise ValueError("no tokens (an empty file would lock every client out)")
    return tuple(tokens)


def _token_groups(text: str, number: int) -> frozenset[ApiGroup]:
    if text == "*":
        return frozenset(ApiGroup)
    try:
        return frozenset(ApiGroup(name) for name in text.split(","))
    except ValueError:
        known = ", ".join(g.value for g in ApiGroup)
        raise ValueError(f"line {number}: unknown API group in '{text}' (known: {known})") from None


def load_tokens(path: str | Path) -> tuple[Token, ...]:
    with open(path, "rb") as handle:
        data = handle.read(MAX_TOKEN_FILE_BYTES + 1)
    if len(data) > MAX_TOKEN_FILE_BYTES:
        raise ValueError(f"{path}: larger than {MAX_TOKEN_FILE_BYTES} bytes")
    try:
        return parse_tokens(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"{path}: {exc}") from None


class TokenTable:
    """Finds a presented token in constant time over the whole table: the presented token is
    hashed and compared with every stored digest (no early exit, equal lengths)."""

    def __init__(self, tokens: Iterable[Token]) -> None:
        self._tokens = tuple(tokens)

    def find(self, presented: str) -> Token | None:
        digest = _digest(presented)
        found = None
        for token in self._tokens:
            if hmac.compare_digest(token.digest, digest) and found is None:
                found = token
        return found


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` value (scheme case-insensitive)."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


class ClientLimiter:
    """Inference requests in flight per client host; an idle client costs no memory."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._counts: dict[str, int] = {}

    def acquire(self, client: str) -> bool:
        count = self._counts.get(client, 0)
        if count >= self.limit:
            return False
        self._counts[client] = count + 1
        return True

    def release(self, client: str) -> None:
        count = self._counts.get(client, 0) - 1
        if count > 0:
            self._counts[client] = count
        else:
            self._counts.pop(client, None)

    def in_flight(self, client: str) -> int:
        return self._counts.get(client, 0)


HeaderLookup = Callable[[str], "str | None"]  # a lower-case header / metadata name → its value


class AccessPolicy:
    """One protocol's rules; the token table and the limiter are shared by both protocols."""

    def __init__(
        self,
        restrictions: Iterable[Restriction] = (),
        word: str = "API",
        tokens: TokenTable | None = None,
        limiter: ClientLimiter | None = None,
    ) -> None:
        self._restrictions = {r.group: r for r in restrictions}
        self._word = word  # Triton: "This API is restricted" / "This protocol is restricted"
        self._tokens = tokens
        self._limiter = limiter

    @property
    def active(self) -> bool:
        return bool(self._restrictions) or self._tokens is not None or self._limiter is not None

    def admit(
        self, group: ApiGroup | None, header: HeaderLookup, peer: str, hold: bool = True
    ) -> Verdict:
        """Restriction, then token, then (for inference, unless ``hold`` is False) the
        client's in-flight bound. ``group`` None: a path outside every group (answered 404)
        still needs a valid token."""
        restriction = self._restrictions.get(group) if group is not None else None
        if restriction is not None and not _equal(header(restriction.header), restriction.value):
            return Verdict(refusal=Refusal(RefusalKind.RESTRICTED, self._restricted(restriction)))
        key = restriction.header if restriction is not None else None
        identity = None
        if self._tokens is not None and group not in TOKEN_FREE_GROUPS:
            token, refusal = self._authenticate(group, header)
            if refusal is not None:
                return Verdict(identity=token, refusal=refusal)
            identity = token
        if hold and group is ApiGroup.INFERENCE:
            held = self.hold(peer)
            if held is not ALLOWED:
                return Verdict(identity, held.refusal, held.client, key)
        return Verdict(identity, key=key) if identity is not None or key else ALLOWED

    def hold(self, peer: str) -> Verdict:
        """One inference request's in-flight slot for ``peer``'s host: a verdict that holds it
        (``release`` gives it back), one that refuses, or ALLOWED without a bound. ``admit``
        takes it for an inference request; a ModelStreamInfer stream is admitted without one
        (``hold=False``) and takes one here for each request it carries."""
        if self._limiter is None:
            return ALLOWED
        client = peer_host(peer)
        if not self._limiter.acquire(client):
            message = (
                f"too many inference requests in flight from client '{client}' (at most "
                f"{self._limiter.limit}, --max-inflight-per-client)"
            )
            return Verdict(refusal=Refusal(RefusalKind.TOO_MANY_REQUESTS, message))
        return Verdict(client=client)

    def release(self, verdict: Verdict) -> None:
        """Give back the in-flight slot a verdict holds (once the request has finished)."""
        if verdict.client is not None and self._limiter is not None:
            self._limiter.release(verdict.client)

    def _restricted(self, restriction: Restriction) -> str:
        return f"This {self._word} is restricted, expecting header '{restriction.header}'"

    def _authenticate(
        self, group: ApiGroup | None, header: HeaderLookup
    ) -> tuple[str | None, Refusal | None]:
        assert self._tokens is not None
        presented = bearer_token(header("authorization"))
        if presented is None:
            message = "authentication required: send 'Authorization: Bearer <token>'"
            return None, Refusal(RefusalKind.UNAUTHENTICATED, message)
        token = self._tokens.find(presented)
        if token is None:
            return None, Refusal(RefusalKind.UNAUTHENTICATED, "invalid bearer token")
        if group is not None and group not in token.groups:
            message = f"token '{token.name}' is not allowed to use the '{group}' API"
            return token.name, Refusal(RefusalKind.FORBIDDEN, message)
        return token.name, None


def _equal(actual: str | None, expected: str) -> bool:
    if actual is None:
        return False
    return hmac.compare_digest(actual.encode("utf-8", "surrogateescape"), expected.encode())


def format_peer(peername: object) -> str:
    """A transport's peer name as ``host:port`` (``[v6]:port``); a Unix socket's path."""
    if isinstance(peername, tuple) and len(peername) >= 2:
        host, port = peername[0], peername[1]
        return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
    return str(peername) if peername else ""


def grpc_peer(peer: str) -> str:
    """grpc's ``ipv4:1.2.3.4:5``/``ipv6:%5B::1%5D:5`` as ``1.2.3.4:5``/``[::1]:5``."""
    for scheme in ("ipv4:", "ipv6:"):
        if peer.startswith(scheme):
            return unquote(peer[len(scheme) :])
    return peer


@dataclass(frozen=True, slots=True)
class AccessControl:
    """What the front-ends share: each protocol's policy (one token table and one limiter
    behind both) and the audit log."""

    http: AccessPolicy
    grpc: AccessPolicy
    audit: AuditLog | None

    @property
    def guards_http(self) -> bool:
        return self.http.active or self.audit is not None

    @property
    def guards_grpc(self) -> bool:
        return self.grpc.active or self.audit is not None

    def close(self) -> None:
        if self.audit is not None:
            self.audit.close()


def open_repository_warning(given: AccessOptions, explicit: bool, http: bool, grpc: bool) -> str:
    """The start-up WARNING when explicit model control (``explicit``) lets anyone who
    reaches a port load and unload models: the ``model-repository`` group unrestricted on an
    enabled front-end (``http``, ``grpc``: enabled) and no bearer tokens required ('' when
    loads are refused or guarded)."""
    if not explicit or given.auth_token_file:
        return ""
    doors = [
        name
        for name, enabled, rules in (
            ("HTTP", http, given.http_restrictions),
            ("gRPC", grpc, given.grpc_restrictions),
        )
        if enabled and all(r.group is not ApiGroup.MODEL_REPOSITORY for r in rules)
    ]
    if not doors:
        return ""
    return (
        f"--model-control-mode=explicit leaves the model repository API open on "
        f"{' and '.join(doors)}: anyone who can reach the port can load models (a Python model "
        "is code) and unload them. Restrict it (--http-restricted-api / "
        "--grpc-restricted-protocol model-repository:<key>=<value>) or require tokens "
        "(--auth-token-file)"
    )


def build_access(given: AccessOptions, shared: ClientLimiter | None = None) -> AccessControl:
    """From the options; reads the token file and opens the audit log (OSError/ValueError).
    ``shared``: the whole server's client limiter (``--workers``) instead of this process's."""
    tokens = TokenTable(load_tokens(given.auth_token_file)) if given.auth_token_file else None
    limit = given.max_inflight_per_client
    limiter = (shared or ClientLimiter(limit)) if limit > 0 else None
    audit = AuditLog(given.audit_log) if given.audit_log else None
    return AccessControl(
        AccessPolicy(given.http_restrictions, "API", tokens, limiter),
        AccessPolicy(given.grpc_restrictions, "protocol", tokens, limiter),
        audit,
    )
