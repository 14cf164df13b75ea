"""ServerOptions: every setting the server runs with, grouped by concern, built once by the CLI
(``cli/flags/table.py`` says which flag sets which field; the defaults here are the flags')."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .access.settings import AccessOptions as AccessOptions  # the access package's own
from .metrics.settings import MetricsSettings
from .tracing import TraceConfig

DEFAULT_MAX_INPUT_SIZE = 1 << 26  # 64 MiB, Triton's --http-max-input-size


@dataclass(frozen=True, slots=True)
class CorsOptions:
    """CORS for browser clients of the HTTP API (tritium's own; frontends/http/cors.py)."""

    allow_origins: tuple[str, ...] = ()  # none: CORS is off
    allow_headers: tuple[str, ...] = ()  # request headers allowed beyond cors.py's defaults
    max_age_secs: int = 600  # how long a browser may keep a preflight's answer
    allow_credentials: bool = False  # pages may send cookies and HTTP authentication


@dataclass(frozen=True, slots=True)
class HttpOptions:
    """The HTTP/REST front-end (frontends/http): where it listens, what a client may hold."""

    enabled: bool = True
    address: str = "0.0.0.0"  # Triton's address syntax (frontends/sockets.py:listen_host)
    port: int = 8000
    reuse_port: bool = False  # SO_REUSEPORT
    max_input_size: int = DEFAULT_MAX_INPUT_SIZE  # body bytes, decompressed too; gRPC's too
    max_header_size: int = 64 * 1024  # bytes of request headers (431)
    max_url_length: int = 8 * 1024  # bytes of a request URL (414)
    max_headers: int = 100  # header lines per request (431)
    max_pipelined: int = 4  # requests held per connection; more are not read
    header_timeout_secs: float = 30.0  # to receive a request's headers (408)
    body_timeout_secs: float = 60.0  # longest pause while a body arrives (408)
    keepalive_timeout_secs: float = 75.0  # an idle connection is closed after this
    # at shutdown, a keep-alive connection idle this long (since the signal or its last
    # answer) is closed; one that keeps sending is served to the exit timeout (runtime.py)
    drain_idle_secs: float = 5.0
    ssl_cert: str = ""  # PEM certificate file: serve HTTPS ("" = plain HTTP)
    ssl_key: str = ""  # PEM private key file of ssl_cert
    header_forward_pattern: str = ""  # regex; matching headers become request parameters
    cors: CorsOptions = CorsOptions()
    # the OpenAI-compatible API (/v1/models, /v1/completions, /v1/chat/completions,
    # /v1/embeddings: frontends/openai), on this listener or, with openai_port >= 0, on a
    # listener of its own at this address (Triton's two-port layout)
    openai: bool = True
    openai_port: int = -1


@dataclass(frozen=True, slots=True)
class GrpcOptions:
    """The gRPC front-end: tritium's own HTTP/2 server on the event loop (frontends/grpc)."""

    enabled: bool = True
    address: str = "0.0.0.0"
    port: int = 8001
    reuse_port: bool = False  # SO_REUSEPORT
    use_ssl: bool = False  # TLS (also true with use_ssl_mutual)
    use_ssl_mutual: bool = False  # TLS with client certificates
    server_cert: str = ""  # PEM certificate chain file
    server_key: str = ""  # PEM private key file
    root_cert: str = ""  # PEM CA bundle of client certificates
    infer_response_compression_level: str = "none"  # none | low | medium | high
    header_forward_pattern: str = ""  # regex; matching metadata become request parameters
    # Keepalive and HTTP/2 pings, with Triton's (grpc core's) defaults.
    keepalive_time_ms: int = 7_200_000  # between our keepalive pings
    keepalive_timeout_ms: int = 20_000  # to wait for a keepalive ping's acknowledgement
    keepalive_permit_without_calls: bool = False  # clients may ping with no call active
    http2_max_pings_without_data: int = 2
    http2_min_recv_ping_interval_without_data_ms: int = 300_000
    http2_max_ping_strikes: int = 2
    max_concurrent_streams: int = 0  # per connection; 0: 1024 (listener.py)
    stream_inflight: int = 256  # requests in flight per ModelStreamInfer stream
    max_connection_age_ms: int = 0  # 0: connections live for ever
    max_connection_age_grace_ms: int = 0  # 0: no bound on the drain after the age's GOAWAY
    max_send_message_size: int = (1 << 31) - 1  # Triton's MAX_GRPC_MESSAGE_SIZE
    # What one connection may hold, and for how long (tritium's own, issue 22;
    # transport/grpc/bounds.py, given them by frontends/grpc/listener.py:grpc_settings).
    preface_timeout_secs: float = 10.0  # from accept: TLS handshake and the HTTP/2 preface
    idle_timeout_secs: float = 300.0  # no open stream that long: GOAWAY and close
    stall_timeout_secs: float = 60.0  # a call waiting on its client that long is reset
    connection_input_bytes: int = 64 << 20  # request bytes its calls may hold unread
    connection_output_bytes: int = 64 << 20  # response bytes that may wait for the client


@dataclass(frozen=True, slots=True)
class MetricsOptions:
    """The Prometheus endpoint and what it renders (metrics/, frontends/http/metrics_app.py)."""

    enabled: bool = True
    address: str = ""  # "" = the HTTP address (every address when HTTP is off)
    port: int = 8002
    interval_ms: int = 2000  # the CPU families are sampled at most once per interval
    allow_cpu: bool = True  # the nv_cpu_* families
    settings: MetricsSettings = MetricsSettings()  # --metrics-config


@dataclass(frozen=True, slots=True)
class LogOptions:
    """Triton's log settings, for the server's records and Python models' pb_utils.Logger
    alike (logs/settings.py); the logging extension changes them at run time."""

    verbose: int = 0  # >= 1: verbose records
    info: bool = True
    warning: bool = True
    error: bool = True
    format: str = "default"  # default | ISO8601 | json
    file: str = ""  # records appended to this file; "" = the console
    # The per-request access log (tritium's own; logs/access_log.py): one JSON line per
    # inference request ("" = off), rotated before it would pass access_log_max_bytes (0:
    # never) into access_log_backup_count older files.
    access_log_file: str = ""
    access_log_max_bytes: int = 100 << 20
    access_log_backup_count: int = 5
    # --workers: the supervisor's lock (a memfd descriptor; not a flag): every worker
    # appends and rotates the one file under it (logs/access_log.py). -1: this process alone
    access_log_lock_fd: int = -1


@dataclass(frozen=True, slots=True)
class RepositoryOptions:
    """The model repositories and how models are loaded (repository/)."""

    paths: tuple[Path, ...] = ()
    control_mode: str = "none"  # none | poll | explicit
    poll_secs: float = 15.0  # poll mode's interval
    load_models: tuple[str, ...] = ()  # explicit mode: loaded at start ("*": every model)
    auto_complete_config: bool = True  # complete configs from the model files
    config_name: str = ""  # <model>/configs/<name>.pbtxt when it exists
    load_thread_count: int = 4  # versions loaded at once
    load_retry_count: int = 0  # a version that fails to load is tried again this many times
    namespacing: bool = False  # one model per (repository, name); a shared bare name is ambiguous
    # Sequences a sequence model's backlog holds while they wait for a slot (tritium's bound;
    # 0: none, as Triton): a new sequence beyond it is UNAVAILABLE (scheduling/sequence_slots.py).
    sequence_backlog_limit: int = 1024


@dataclass(frozen=True, slots=True)
class BackendOptions:
    """What the backends are given (backends/)."""

    onnxruntime_default_max_batch_size: int = 4  # what auto-complete gives a batching model
    # A crashed Python stub is restarted at most this many times within the window; 0 never
    # restarts it (Triton's behaviour).
    instance_max_restarts: int = 5
    instance_restart_window_secs: float = 60.0
    # Where EXECUTION_ENV_PATH archives are unpacked (content-keyed, private to the user);
    # "" = <system temp>/tritium-python-envs-<uid>.
    python_env_cache_dir: str = ""


@dataclass(frozen=True, slots=True)
class RateLimitOptions:
    """Triton's rate limiter (scheduling/)."""

    mode: str = "off"  # off | execution_count
    resources: tuple[tuple[str, int, int], ...] = ()  # (name, count, device; -1: every device)


@dataclass(frozen=True, slots=True)
class RedisCacheOptions:
    """``--cache-config redis,<key>=<value>``: Triton's redis cache keys (timeouts in ms; tritium
    bounds every call, so a timeout is never 0) and tritium's own circuit cool-down and entry
    bound (``extensions/redis_cache.py``)."""

    host: str
    port: int
    user: str = ""  # "": no AUTH user (Redis's "default")
    password: str = ""
    db: int = 0
    connect_timeout_ms: int = 1000
    socket_timeout_ms: int = 1000
    pool_size: int = 4
    wait_timeout_ms: int = 1000
    tls_enabled: bool = False
    cert: str = ""
    key: str = ""
    cacert: str = ""
    cacert_dir: str = ""
    cooldown_ms: int = 2000  # after a failure, Redis is left alone this long (misses)
    max_entry_bytes: int = 64 << 20  # a stored or fetched entry larger than this is a miss
    ttl: int = 0  # seconds an entry lives in Redis (SET ... EX); 0: until Redis evicts it


@dataclass(frozen=True, slots=True)
class ServerOptions:
    server_id: str = "triton"  # the server metadata's name
    exit_on_error: bool = True  # stop when a model fails to load at start
    strict_readiness: bool = True  # ready only when every model is
    exit_timeout_secs: float = 30.0  # drain time for in-flight requests at shutdown
    allow_client_shm: bool = False  # Triton's default since 2.69
    response_cache_size: int = 0  # bytes of the local response cache; 0: no local cache
    response_cache_ttl: int = 0  # seconds a local cache entry lives; 0: until evicted
    response_cache_redis: RedisCacheOptions | None = None  # the shared Redis cache, if any
    ports_file: str = ""  # the bound ports are written there as JSON once serving
    workers: int = 1  # processes serving the same ports (--workers; 1: this process alone)
    worker_heartbeat_secs: float = 10.0  # a worker silent this long is killed and restarted
    worker_sockets: str = "shared"  # shared: one accept queue; reuseport: one per worker
    worker_affinity: str = "auto"  # auto: a CPU each when workers == CPUs; cpu; none
    # bytes every connection of this process may hold for its clients, all together
    # (requests not yet taken, answers not yet sent; frontends/memory.py): 1 GiB
    connection_memory_bytes: int = 1 << 30
    http: HttpOptions = HttpOptions()
    grpc: GrpcOptions = GrpcOptions()
    metrics: MetricsOptions = MetricsOptions()
    logging: LogOptions = LogOptions()
    repository: RepositoryOptions = RepositoryOptions()
    access: AccessOptions = AccessOptions()
    backends: BackendOptions = BackendOptions()
    rate_limit: RateLimitOptions = RateLimitOptions()
    tracing: TraceConfig = TraceConfig()  # --trace-config (tracing/)


def delay_count(value: str | None) -> int:
    """A count from one of Triton's test hooks in the environment (the requests a batcher
    waits for at start, the seconds a gRPC answer is held): the variable's leading integer,
    as C's atoi reads it (0 when unset, not a number or negative)."""
    found = re.match(r"\s*[+-]?\d+", value or "")
    return max(int(found.group()), 0) if found else 0
