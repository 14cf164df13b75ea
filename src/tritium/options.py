"""ServerOptions: every setting the server runs with, built once by the CLI."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .access.policy import Restriction
from .metrics.settings import MetricsSettings
from .tracing import TraceConfig

DEFAULT_MAX_INPUT_SIZE = 1 << 26  # 64 MiB, Triton's --http-max-input-size


@dataclass(frozen=True, slots=True)
class ServerOptions:
    model_repositories: tuple[Path, ...] = ()
    server_id: str = "triton"
    allow_http: bool = True
    http_address: str = "0.0.0.0"
    http_port: int = 8000
    http_max_input_size: int = DEFAULT_MAX_INPUT_SIZE
    allow_grpc: bool = True
    grpc_stream_inflight: int = 256  # requests in flight per ModelStreamInfer stream
    # Triton's gRPC keepalive / HTTP2 defaults.
    grpc_keepalive_time_ms: int = 7_200_000
    grpc_keepalive_timeout_ms: int = 20_000
    grpc_keepalive_permit_without_calls: bool = False
    grpc_http2_max_pings_without_data: int = 2
    grpc_http2_min_recv_ping_interval_without_data_ms: int = 300_000
    grpc_http2_max_ping_strikes: int = 2
    grpc_max_concurrent_streams: int = 0  # 0: 1024 a connection (listener.py)
    grpc_address: str = "0.0.0.0"
    grpc_port: int = 8001
    allow_metrics: bool = True
    metrics_address: str = ""
    metrics_port: int = 8002
    exit_on_error: bool = True
    strict_readiness: bool = True
    auto_complete_config: bool = True
    exit_timeout_secs: float = 30.0
    model_load_thread_count: int = 4
    log_verbose: int = 0
    allow_client_shm: bool = False  # Triton's default since 2.69
    model_control_mode: str = "none"
    repository_poll_secs: float = 15.0
    load_models: tuple[str, ...] = ()
    cache_size: int = 0  # --cache-config local,size=BYTES; 0: no response cache
    metrics_interval_ms: int = 2000
    # Python stub supervision (issue 10): a crashed stub is restarted at most this many times
    # within the window; 0 never restarts it (Triton's behaviour).
    model_instance_max_restarts: int = 5
    model_instance_restart_window_secs: float = 60.0
    # HTTP transport: limits, timeouts and TLS (frontends/http)
    http_max_header_size: int = 64 * 1024
    http_max_url_length: int = 8 * 1024
    http_max_headers: int = 100
    http_max_pipelined: int = 4
    http_header_timeout_secs: float = 30.0
    http_body_timeout_secs: float = 60.0
    http_keepalive_timeout_secs: float = 75.0
    http_ssl_cert: str = ""
    http_ssl_key: str = ""
    # Access control and audit (issue 10): Triton's restricted API groups, tritium's bearer
    # tokens, audit log and per-client in-flight bound; see tritium.access.
    http_restrictions: tuple[Restriction, ...] = ()
    grpc_restrictions: tuple[Restriction, ...] = ()
    auth_token_file: str = ""
    audit_log: str = ""
    max_inflight_per_client: int = 0  # 0: unbounded
    # gRPC transport (issue 12): tritium's own HTTP/2 server on the event loop
    # (frontends/grpc): TLS, response compression, forwarded headers, connection age.
    grpc_use_ssl: bool = False
    grpc_use_ssl_mutual: bool = False
    grpc_server_cert: str = ""
    grpc_server_key: str = ""
    grpc_root_cert: str = ""
    grpc_infer_response_compression_level: str = "none"  # none | low | medium | high
    reuse_grpc_port: bool = False
    grpc_header_forward_pattern: str = ""  # regex; matching metadata become parameters
    grpc_max_connection_age_ms: int = 0  # 0: connections live for ever
    grpc_max_connection_age_grace_ms: int = 0  # 0: no bound on the drain after GOAWAY
    grpc_max_send_message_size: int = (1 << 31) - 1  # Triton's MAX_GRPC_MESSAGE_SIZE
    # Python execution environments (issue 14): where EXECUTION_ENV_PATH archives are unpacked
    # (content-keyed, private to the user); "" = <system temp>/tritium-python-envs-<uid>.
    python_env_cache_dir: str = ""
    # Rate limiter (issue 14): Triton's --rate-limit (off | execution_count) and
    # --rate-limit-resource values as (name, count, device; -1: every device).
    rate_limit: str = "off"
    rate_limit_resources: tuple[tuple[str, int, int], ...] = ()
    # Logging (issue 14): Triton's --log-info / --log-warning / --log-error (the server's own
    # records and Python models' pb_utils.Logger alike); --log-verbose is log_verbose above.
    log_info: bool = True
    log_warning: bool = True
    log_error: bool = True
    # Metrics parity (issue 15 item 4): --metrics-config (latency counters, summaries, the
    # first-response histogram) and --allow-cpu-metrics (nv_cpu_* families).
    metrics_config: MetricsSettings = MetricsSettings()
    allow_cpu_metrics: bool = True
    # Logging extension (issue 15): Triton's --log-format (default | ISO8601) and --log-file
    # (appended; "" = the console); both shown by GET /v2/logging, the format changeable there.
    log_format: str = "default"
    log_file: str = ""
    # Flags and repository odds and ends (issue 15 items 1 and 5; see tritium/cli/flags).
    model_config_name: str = ""  # <model>/configs/<name>.pbtxt when it exists
    model_load_retry_count: int = 0
    reuse_http_port: bool = False
    http_header_forward_pattern: str = ""  # regex; matching headers become parameters
    onnxruntime_default_max_batch_size: int = 4  # --backend-config default-max-batch-size
    # Tracing (issue 15): --trace-config and the deprecated --trace-* flags (tritium.tracing).
    trace: TraceConfig = TraceConfig()
    # Model namespacing (issue 15 item 5): --model-namespacing, one model per (repository,
    # name); a bare name held by several repositories is ambiguous (tritium.repository).
    model_namespacing: bool = False
    # CORS for browser clients (tritium's own, issue 21; frontends/http/cors.py): no origin
    # allowed means CORS is off; headers allowed beyond cors.py's defaults; preflight max age.
    http_cors_allow_origins: tuple[str, ...] = ()
    http_cors_allow_headers: tuple[str, ...] = ()
    http_cors_max_age_secs: int = 600
    http_cors_allow_credentials: bool = False
    # The per-request access log (tritium's own; tritium.logs.access_log): --access-log-file
    # ("" = off), rotated before it would pass --access-log-max-bytes (0: never) into
    # --access-log-backup-count older files.
    access_log_file: str = ""
    access_log_max_bytes: int = 100 << 20
    access_log_backup_count: int = 5
