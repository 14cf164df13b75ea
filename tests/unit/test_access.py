"""The access policy (tritium.access), the audit log and the route/RPC → API group maps.

Triton's parse errors and refusal texts are from triton-inference-server/server
``src/command_line_parser.cc`` (ParseRestrictedFeatureOption, ParseGenericConfigOption),
``src/http_server.cc`` (RespondIfRestricted) and ``src/grpc/grpc_server.cc``
(CommonCallData::Execute)."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest
from tritonclient.grpc import service_pb2

from tritium.access.policy import (
    GRPC_HEADER_PREFIX,
    AccessPolicy,
    ApiGroup,
    ClientLimiter,
    RefusalKind,
    Restriction,
    TokenTable,
    bearer_token,
    format_peer,
    grpc_peer,
    load_tokens,
    parse_restrictions,
    parse_tokens,
    peer_host,
)
from tritium.access.audit import AuditEvent, AuditLog, RefusalLimiter
from tritium.cli.main import build_parser, options_from_args
from tritium.frontends.grpc.guard import rpc_group
from tritium.frontends.http.access import http_api

TOKENS = """\
# admins
admin-secret-0123456789  *  ops
reader-secret-0123456789 inference,metadata  # a comment after the groups
anon-secret-0123456789
"""


def _headers(**values: str):  # type: ignore[no-untyped-def]
    lowered = {k.replace("_", "-").lower(): v for k, v in values.items()}
    return lowered.get


# --- Triton's restricted API flags -----------------------------------------------------------


def test_restrictions_parse_as_triton() -> None:
    parsed = parse_restrictions(
        ["inference,health:Infer-Key=a:b=c", "model-repository:admin=s"],
        "http-restricted-api",
        "api",
    )
    assert parsed == (
        Restriction(ApiGroup.INFERENCE, "infer-key", "a:b=c"),
        Restriction(ApiGroup.HEALTH, "infer-key", "a:b=c"),
        Restriction(ApiGroup.MODEL_REPOSITORY, "admin", "s"),
    )
    grpc = parse_restrictions(
        ["trace:k=v"], "grpc-restricted-protocol", "protocol", GRPC_HEADER_PREFIX
    )
    assert grpc == (Restriction(ApiGroup.TRACE, "triton-grpc-protocol-k", "v"),)


@pytest.mark.parametrize(
    ("arg", "message"),
    [
        (
            "inference",
            "--http-restricted-api option format is '<config name>:<setting>=<value>'. "
            "Got inference",
        ),
        ("inference:key", "option format is"),
        ("inference:=v", "option format is"),
        ("inference:k=", "option format is"),
        (":k=v", "option format is"),
        ("inferences:k=v", "unknown restricted api 'inferences'"),
        ("inference,,health:k=v", "unknown restricted api ''"),
        (
            "inference,inference:k=v",
            "restricted api 'inference' can not be specified in multiple config groups",
        ),
    ],
)
def test_restriction_errors_are_tritons(arg: str, message: str) -> None:
    with pytest.raises(ValueError, match=None) as info:
        parse_restrictions([arg], "http-restricted-api", "api")
    assert message in str(info.value)


def test_a_group_in_two_flags_is_an_error() -> None:
    with pytest.raises(ValueError, match="restricted protocol 'health' can not be specified"):
        parse_restrictions(["health:a=1", "metadata,health:b=2"], "x", "protocol")


def test_cli_builds_the_restrictions_and_refuses_bad_ones(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = build_parser().parse_args(
        [
            "serve",
            "--model-repository=r",
            "--http-restricted-api=model-repository:admin=s",
            "--grpc-restricted-protocol=model-repository,shared-memory:admin=s",
            "--max-inflight-per-client=3",
            "--audit-log=/tmp/audit.jsonl",
            "--auth-token-file=/tmp/tokens",
        ]
    )
    options = options_from_args(args)
    access = options.access
    assert access.http_restrictions == (Restriction(ApiGroup.MODEL_REPOSITORY, "admin", "s"),)
    assert [r.header for r in access.grpc_restrictions] == ["triton-grpc-protocol-admin"] * 2
    assert access.max_inflight_per_client == 3
    assert (access.audit_log, access.auth_token_file) == ("/tmp/audit.jsonl", "/tmp/tokens")
    bad = build_parser().parse_args(
        ["serve", "--model-repository=r", "--http-restricted-api=x:k=v"]
    )
    with pytest.raises(SystemExit, match="unknown restricted api 'x'"):
        options_from_args(bad)


# --- tokens ---------------------------------------------------------------------------------


def test_token_file_syntax() -> None:
    ops, reader, anon = parse_tokens(TOKENS)
    assert (ops.name, ops.groups) == ("ops", frozenset(ApiGroup))
    assert (reader.name, reader.groups) == ("token-2", {ApiGroup.INFERENCE, ApiGroup.METADATA})
    assert (anon.name, anon.groups) == ("token-3", frozenset(ApiGroup))
    assert all(b"secret" not in t.digest and len(t.digest) == 32 for t in (ops, reader, anon))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no tokens"),
        ("# only a comment\n\n", "no tokens"),
        ("t1 inference,bogus", "line 1: unknown API group in 'inference,bogus'"),
        ("t1 * a b", "line 1: expected '<token> [<groups>] [<name>]'"),
        ("t1\nt1 inference", "line 2: the same token appears twice"),
        ("t1 * n\nt2 * n", "line 2: the token name 'n' appears twice"),
    ],
)
def test_token_file_errors(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=None) as info:
        parse_tokens(text)
    assert message in str(info.value)


def test_load_tokens_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text(TOKENS)
    assert [t.name for t in load_tokens(path)] == ["ops", "token-2", "token-3"]
    path.write_bytes(b"\xff\xfe")
    with pytest.raises(ValueError, match=str(path)):
        load_tokens(path)


def test_token_table_finds_each_token_and_nothing_else() -> None:
    table = TokenTable(parse_tokens(TOKENS))
    assert table.find("admin-secret-0123456789").name == "ops"  # type: ignore[union-attr]
    assert table.find("reader-secret-0123456789").name == "token-2"  # type: ignore[union-attr]
    for wrong in (
        "",
        "admin-secret-012345678",
        "admin-secret-01234567890",
        "ADMIN-SECRET-0123456789",
    ):
        assert table.find(wrong) is None


@pytest.mark.parametrize(
    ("value", "token"),
    [
        ("Bearer abc", "abc"),
        ("bearer   abc ", "abc"),
        ("BEARER abc", "abc"),
        ("Basic abc", None),
        ("Bearer", None),
        ("Bearer ", None),
        ("", None),
        (None, None),
    ],
)
def test_bearer_token(value: str | None, token: str | None) -> None:
    assert bearer_token(value) == token


# --- the policy -----------------------------------------------------------------------------


def _policy(limit: int = 0, word: str = "API") -> AccessPolicy:
    return AccessPolicy(
        [Restriction(ApiGroup.MODEL_REPOSITORY, "admin-key", "s3cret")],
        word,
        TokenTable(parse_tokens(TOKENS)),
        ClientLimiter(limit) if limit else None,
    )


def test_restricted_group_needs_the_exact_header() -> None:
    policy = AccessPolicy([Restriction(ApiGroup.MODEL_REPOSITORY, "admin-key", "s3cret")])
    for headers in (_headers(), _headers(admin_key="wrong"), _headers(admin_key="s3cret ")):
        verdict = policy.admit(ApiGroup.MODEL_REPOSITORY, headers, "1.2.3.4:5")
        assert verdict.refusal is not None
        assert verdict.refusal.kind is RefusalKind.RESTRICTED
        assert verdict.refusal.message == "This API is restricted, expecting header 'admin-key'"
    assert policy.admit(ApiGroup.MODEL_REPOSITORY, _headers(admin_key="s3cret"), "").refusal is None
    assert policy.admit(ApiGroup.INFERENCE, _headers(), "").refusal is None
    grpc = AccessPolicy([Restriction(ApiGroup.HEALTH, "triton-grpc-protocol-k", "v")], "protocol")
    refusal = grpc.admit(ApiGroup.HEALTH, _headers(), "").refusal
    assert refusal is not None
    assert (
        refusal.message == "This protocol is restricted, expecting header 'triton-grpc-protocol-k'"
    )


def test_tokens_authenticate_and_authorise() -> None:
    policy = _policy()
    missing = policy.admit(ApiGroup.INFERENCE, _headers(), "").refusal
    assert missing is not None and missing.kind is RefusalKind.UNAUTHENTICATED
    wrong = policy.admit(ApiGroup.INFERENCE, _headers(authorization="Bearer nope"), "")
    assert wrong.refusal is not None and wrong.refusal.message == "invalid bearer token"
    reader = _headers(authorization="Bearer reader-secret-0123456789")
    assert policy.admit(ApiGroup.INFERENCE, reader, "").identity == "token-2"
    forbidden = policy.admit(ApiGroup.STATISTICS, reader, "")
    assert forbidden.identity == "token-2" and forbidden.refusal is not None
    assert forbidden.refusal.kind is RefusalKind.FORBIDDEN
    assert forbidden.refusal.message == "token 'token-2' is not allowed to use the 'statistics' API"


def test_health_is_open_without_a_token_and_unknown_paths_need_one() -> None:
    policy = _policy()
    assert policy.admit(ApiGroup.HEALTH, _headers(), "").refusal is None
    refusal = policy.admit(None, _headers(), "").refusal
    assert refusal is not None and refusal.kind is RefusalKind.UNAUTHENTICATED
    reader = _headers(authorization="Bearer reader-secret-0123456789")
    assert policy.admit(None, reader, "").refusal is None


def test_restriction_is_checked_before_the_token() -> None:
    policy = _policy()
    admin = _headers(authorization="Bearer admin-secret-0123456789")
    verdict = policy.admit(ApiGroup.MODEL_REPOSITORY, admin, "")
    assert verdict.refusal is not None and verdict.refusal.kind is RefusalKind.RESTRICTED
    both = _headers(authorization="Bearer admin-secret-0123456789", admin_key="s3cret")
    assert policy.admit(ApiGroup.MODEL_REPOSITORY, both, "").identity == "ops"


def test_inflight_bound_per_client_host() -> None:
    policy = AccessPolicy(limiter=ClientLimiter(2))
    first = policy.admit(ApiGroup.INFERENCE, _headers(), "10.0.0.1:1000")
    second = policy.admit(ApiGroup.INFERENCE, _headers(), "10.0.0.1:2000")  # another connection
    assert first.client == second.client == "10.0.0.1"
    third = policy.admit(ApiGroup.INFERENCE, _headers(), "10.0.0.1:3000")
    assert third.refusal is not None and third.refusal.kind is RefusalKind.TOO_MANY_REQUESTS
    assert "'10.0.0.1' (at most 2" in third.refusal.message
    assert third.client is None  # a refused request holds no slot
    other = policy.admit(ApiGroup.INFERENCE, _headers(), "10.0.0.2:1000")
    assert other.refusal is None
    assert policy.admit(ApiGroup.METADATA, _headers(), "10.0.0.1:4000").client is None
    policy.release(first)
    assert policy.admit(ApiGroup.INFERENCE, _headers(), "10.0.0.1:5000").refusal is None


def test_a_stream_is_admitted_without_a_slot_and_its_requests_hold_one_each() -> None:
    policy = AccessPolicy(limiter=ClientLimiter(2))
    stream = policy.admit(ApiGroup.INFERENCE, _headers(), "10.0.0.1:1000", hold=False)
    assert stream.refusal is None and stream.client is None
    held = [policy.hold("10.0.0.1:1000"), policy.hold("10.0.0.1:1000")]
    assert all(h.client == "10.0.0.1" and h.refusal is None for h in held)
    over = policy.hold("10.0.0.1:1000")
    assert over.refusal is not None and over.refusal.kind is RefusalKind.TOO_MANY_REQUESTS
    assert over.client is None
    unary = policy.admit(ApiGroup.INFERENCE, _headers(), "10.0.0.1:2000")  # the same bound
    assert unary.refusal is not None
    policy.release(held[0])
    assert policy.hold("10.0.0.1:3000").refusal is None
    unbounded = AccessPolicy()
    assert unbounded.hold("10.0.0.1:1").client is None  # no bound: nothing to give back


def test_limiter_forgets_idle_clients() -> None:
    limiter = ClientLimiter(1)
    assert limiter.acquire("a") and not limiter.acquire("a")
    limiter.release("a")
    assert limiter.in_flight("a") == 0 and not limiter._counts
    limiter.release("a")  # an extra release never goes negative
    assert limiter.acquire("a")


def test_a_policy_without_rules_is_inactive() -> None:
    assert not AccessPolicy().active
    assert AccessPolicy(limiter=ClientLimiter(1)).active


@pytest.mark.parametrize(
    ("peername", "peer", "host"),
    [
        (("127.0.0.1", 5000), "127.0.0.1:5000", "127.0.0.1"),
        (("::1", 5000, 0, 0), "[::1]:5000", "::1"),
        ("/tmp/sock", "/tmp/sock", "/tmp/sock"),
        (None, "", ""),
    ],
)
def test_peer_names(peername: object, peer: str, host: str) -> None:
    assert format_peer(peername) == peer
    assert peer_host(peer) == host


def test_grpc_peer_names() -> None:
    assert grpc_peer("ipv4:127.0.0.1:5000") == "127.0.0.1:5000"
    assert grpc_peer("ipv6:%5B::1%5D:5000") == "[::1]:5000"
    assert grpc_peer("ipv6:[::1]:5000") == "[::1]:5000"
    assert grpc_peer("unix:/tmp/s") == "unix:/tmp/s"
    assert peer_host("[::1]:5000") == "::1"


# --- routes and RPCs to groups ----------------------------------------------------------------

HTTP_ROUTES = [
    ("GET", "/v2", ApiGroup.METADATA, "server_metadata", "", False),
    ("GET", "/v2/health/live", ApiGroup.HEALTH, "server_health", "", False),
    ("GET", "/v2/health/ready?x=1", ApiGroup.HEALTH, "server_health", "", False),
    ("GET", "/v2/models/m%2Fx", ApiGroup.METADATA, "model_metadata", "m/x", False),
    ("GET", "/v2/models/m/versions/2", ApiGroup.METADATA, "model_metadata", "m", False),
    ("GET", "/v2/models/m/ready", ApiGroup.HEALTH, "model_ready", "m", False),
    ("GET", "/v2/models/m/versions/1/ready", ApiGroup.HEALTH, "model_ready", "m", False),
    ("GET", "/v2/models/m/config", ApiGroup.MODEL_CONFIG, "model_config", "m", False),
    ("POST", "/v2/models/m/infer", ApiGroup.INFERENCE, "infer", "m", False),
    ("POST", "/v2/models/m/versions/3/infer", ApiGroup.INFERENCE, "infer", "m", False),
    ("POST", "/v2/models/m/generate", ApiGroup.INFERENCE, "generate", "m", False),
    ("POST", "/v2/models/m/generate_stream", ApiGroup.INFERENCE, "generate_stream", "m", False),
    ("GET", "/v2/models/stats", ApiGroup.STATISTICS, "model_statistics", "", False),
    ("GET", "/v2/models/m/stats", ApiGroup.STATISTICS, "model_statistics", "m", False),
    ("GET", "/v2/models/m/trace/setting", ApiGroup.TRACE, "trace_setting", "m", False),
    ("POST", "/v2/models/m/trace/setting", ApiGroup.TRACE, "trace_setting", "m", True),
    ("POST", "/v2/trace/setting", ApiGroup.TRACE, "trace_setting", "", True),
    ("GET", "/v2/logging", ApiGroup.LOGGING, "log_settings", "", False),
    ("POST", "/v2/logging", ApiGroup.LOGGING, "log_settings", "", True),
    ("POST", "/v2/repository/index", ApiGroup.MODEL_REPOSITORY, "repository_index", "", False),
    ("POST", "/v2/repository/models/m/load", ApiGroup.MODEL_REPOSITORY, "load", "m", True),
    ("POST", "/v2/repository/models/m/unload", ApiGroup.MODEL_REPOSITORY, "unload", "m", True),
    (
        "POST",
        "/v2/repository/models/m/other",
        ApiGroup.MODEL_REPOSITORY,
        "repository_index",
        "",
        False,
    ),
    (
        "GET",
        "/v2/systemsharedmemory/status",
        ApiGroup.SHARED_MEMORY,
        "system_shm_status",
        "",
        False,
    ),
    (
        "POST",
        "/v2/systemsharedmemory/region/r/register",
        ApiGroup.SHARED_MEMORY,
        "system_shm_register",
        "r",
        True,
    ),
    (
        "POST",
        "/v2/systemsharedmemory/unregister",
        ApiGroup.SHARED_MEMORY,
        "system_shm_unregister",
        "",
        True,
    ),
    (
        "POST",
        "/v2/cudasharedmemory/region/c/unregister",
        ApiGroup.SHARED_MEMORY,
        "cuda_shm_unregister",
        "c",
        True,
    ),
    ("GET", "/v2/cudasharedmemory/status", ApiGroup.SHARED_MEMORY, "cuda_shm_status", "", False),
    (
        "POST",
        "/v2/cudasharedmemory/region/c/register",
        ApiGroup.SHARED_MEMORY,
        "cuda_shm_register",
        "c",
        True,
    ),
    ("GET", "/v2/models/m/bogus", None, "unknown", "m", False),
    ("GET", "/metrics", None, "unknown", "", False),
    ("GET", "/v2/bogus", None, "unknown", "", False),
    # the OpenAI-compatible API (frontends/openai): the model is named in the body
    ("GET", "/v1/models", ApiGroup.METADATA, "openai_models", "", False),
    ("GET", "/v1/models/m%2Fx", ApiGroup.METADATA, "openai_models", "m/x", False),
    ("POST", "/v1/completions", ApiGroup.INFERENCE, "openai_completions", "", False),
    ("POST", "/v1/chat/completions", ApiGroup.INFERENCE, "openai_chat_completions", "", False),
    ("POST", "/v1/embeddings", ApiGroup.INFERENCE, "openai_embeddings", "", False),
    ("POST", "/v1/files", None, "unknown", "", False),
]


@pytest.mark.parametrize(("method", "path", "group", "action", "target", "control"), HTTP_ROUTES)
def test_http_paths_map_to_tritons_groups(
    method: str, path: str, group: ApiGroup | None, action: str, target: str, control: bool
) -> None:
    api = http_api(method, path)
    assert (api.group, api.action, api.target, api.control) == (group, action, target, control)


GRPC_GROUPS = {
    "ServerLive": ApiGroup.HEALTH,
    "ServerReady": ApiGroup.HEALTH,
    "ModelReady": ApiGroup.HEALTH,
    "ServerMetadata": ApiGroup.METADATA,
    "ModelMetadata": ApiGroup.METADATA,
    "ModelInfer": ApiGroup.INFERENCE,
    "ModelStreamInfer": ApiGroup.INFERENCE,
    "ModelConfig": ApiGroup.MODEL_CONFIG,
    "ModelStatistics": ApiGroup.STATISTICS,
    "RepositoryIndex": ApiGroup.MODEL_REPOSITORY,
    "RepositoryModelLoad": ApiGroup.MODEL_REPOSITORY,
    "RepositoryModelUnload": ApiGroup.MODEL_REPOSITORY,
    "TraceSetting": ApiGroup.TRACE,
    "LogSettings": ApiGroup.LOGGING,
}


def test_every_grpc_method_has_tritons_group_and_https_action_name() -> None:
    service = service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    http_actions = {route[3] for route in HTTP_ROUTES}
    for method in service.methods:
        group, action = rpc_group(f"/inference.GRPCInferenceService/{method.name}")
        expected = GRPC_GROUPS.get(method.name, ApiGroup.SHARED_MEMORY)
        assert group is expected, method.name
        assert action in http_actions or action == "stream_infer", action
    assert rpc_group("/grpc.health.v1.Health/Check") == (ApiGroup.HEALTH, "server_health")
    assert rpc_group("/some.Other/Method") == (None, "unknown")


# --- the audit log --------------------------------------------------------------------------


def test_audit_log_appends_json_lines(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    path.write_text('{"earlier": true}\n')
    log = AuditLog(path)
    log.record(AuditEvent("http", "1.2.3.4:5", "ops", "load", "m", "ok"))
    log.record(
        AuditEvent("grpc", "[::1]:6", None, "infer", "x" * 5000, "refused", "no", "forbidden")
    )
    lines = path.read_text().splitlines()  # written through: no flush or close needed
    log.close()
    log.close()
    first, second = (json.loads(line) for line in lines[1:])
    assert first["time"].endswith("Z") and "T" in first["time"]
    del first["time"], second["time"]
    assert first == {
        "protocol": "http",
        "peer": "1.2.3.4:5",
        "identity": "ops",
        "action": "load",
        "target": "m",
        "outcome": "ok",
    }
    assert second["identity"] is None and second["reason"] == "forbidden"
    assert second["message"] == "no" and len(second["target"]) == 512
    fresh = tmp_path / "new.jsonl"
    AuditLog(fresh).close()
    assert os.stat(fresh).st_mode & 0o777 == 0o600  # peers and identities: owner only


def test_refusal_limiter_writes_a_burst_per_key_and_counts_the_rest() -> None:
    limiter = RefusalLimiter(burst=2, window=10.0, keys=2)
    key = ("http", "10.0.0.1", "infer", "unauthenticated")
    assert [limiter.admit(key, t)[1] for t in (0.0, 1.0, 2.0, 3.0)] == [True, True, False, False]
    other = ("http", "10.0.0.1", "load", "unauthenticated")  # another action: its own lines
    assert limiter.admit(other, 4.0) == (other, True)
    assert limiter.ended(9.9) == [] and limiter.next_end() == 10.0
    assert limiter.ended(10.0) == [(key, 2)]  # the window is over: one summary
    assert limiter.admit(key, 11.0) == (key, True)  # and a new window starts
    assert limiter.ended(14.0) == []  # ``other`` wrote everything: forgotten silently
    assert limiter.drain() == []


def test_refusal_limiter_bounds_the_keys_it_tracks() -> None:
    limiter = RefusalLimiter(burst=1, window=10.0, keys=2)
    for n in range(2):
        assert limiter.admit(("grpc", f"10.0.0.{n}", "infer", "restricted"), 0.0)[1]
    shared = ("grpc", "*", "infer", "restricted")
    assert limiter.admit(("grpc", "10.0.0.9", "infer", "restricted"), 1.0) == (shared, True)
    assert limiter.admit(("grpc", "10.0.0.8", "infer", "restricted"), 1.0) == (shared, False)
    assert limiter.drain() == [(shared, 1)]


def test_audit_log_summarises_repeated_refusals_and_keeps_control_actions(
    tmp_path: Path,
) -> None:
    now = [100.0]
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path, RefusalLimiter(burst=3, window=60.0), clock=lambda: now[0])
    refused = AuditEvent("http", "10.1.2.3:5555", None, "infer", "m", "refused", "no", "x")
    for port in range(10):  # new connections: the same client host
        log.record(AuditEvent(**{**_fields(refused), "peer": f"10.1.2.3:{port}"}))
    for _ in range(10):
        log.record(AuditEvent("http", "10.1.2.3:1", "ops", "load", "m", "ok"))
    now[0] += 60.0
    log.record(refused)  # the window is over: its summary, then this line
    log.close()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [e["outcome"] for e in lines[:3]] == ["refused"] * 3
    assert [e["action"] for e in lines[3:13]] == ["load"] * 10  # control actions: every one
    summary = lines[13]
    assert summary["suppressed"] == 7 and summary["peer"] == "10.1.2.3"
    assert summary["reason"] == "x" and summary["action"] == "infer"
    assert summary["message"].startswith("7 more refused requests from 10.1.2.3")
    assert lines[14]["peer"] == "10.1.2.3:5555" and len(lines) == 15


def test_audit_log_close_writes_the_pending_summaries(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path, RefusalLimiter(burst=1, window=3600.0))
    for _ in range(4):
        log.record(AuditEvent("grpc", "[::1]:9", None, "infer", "", "refused", "no", "y"))
    log.close()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(lines) == 2 and lines[1]["suppressed"] == 3 and lines[1]["peer"] == "::1"


def test_audit_log_writes_the_summary_when_the_window_ends(tmp_path: Path) -> None:
    """On the event loop a timer writes the summary once the window is over, with no
    refusal after it."""
    path = tmp_path / "audit.jsonl"

    async def main() -> list[str]:
        log = AuditLog(path, RefusalLimiter(burst=1, window=0.05))
        for _ in range(3):
            log.record(AuditEvent("http", "10.0.0.1:1", None, "infer", "", "refused", "no", "z"))
        for _ in range(600):  # bounded: the timer is due after 0.05 s
            lines = path.read_text().splitlines()
            if len(lines) == 2:
                break
            await asyncio.sleep(0.05)
        log.close()
        return path.read_text().splitlines()

    lines = [json.loads(line) for line in asyncio.run(main())]
    assert len(lines) == 2 and lines[1]["suppressed"] == 2


def _fields(event: AuditEvent) -> dict[str, object]:
    return {f: getattr(event, f) for f in AuditEvent.__dataclass_fields__}
