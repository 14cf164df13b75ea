"""Every ``tritonserver`` flag, and tritium's own: one definition each (``FLAGS``).

A definition is the only place a flag is written down. ``parser.py:add_flags`` builds
``tritium serve``'s argparse parser from it, ``build.py:options_from_args`` builds
``ServerOptions`` from its target, ``docs/flags.md`` is generated from it
(``python -m tritium.cli.flags``) and ``--help`` files it under its group.

How to add a flag:

1. Add its field to the right group of ``options.py`` (``HttpOptions``, ``GrpcOptions``...),
   with its default and a comment saying what it means.
2. Add one row below, in its Triton group: ``_on(name, group, value syntax, reason, help,
   target, ...)`` for a Triton flag, ``_own(name, group, value syntax, reason, target,
   help, ...)`` for tritium's own. The target is the field's path (``"grpc.port"``);
   ``Into(path, convert)`` when the value must be converted or checked first
   (``convert.py``; ``SystemExit("error: ...")`` for a bad one); a ``Combine`` shared by
   every flag it reads when several flags make one setting. The keywords are ``spec.py:Arg``:
   ``parse`` (a ``values.py`` parser; by default from the value syntax: int, float, Triton's
   boolean, str), ``style`` (``REPEAT`` for a repeatable flag; ``BOOL`` and ``PRESENT`` follow
   from the syntax ``boolean`` and ``""``), ``choices``, ``metavar`` and ``default`` (by
   default the target field's default in ``ServerOptions()``; a ``Combine`` needs one).
3. Regenerate ``docs/flags.md``: ``python -m tritium.cli.flags > docs/flags.md``.

The authority for Triton's flags is the option table of Triton's ``src/command_line_parser.cc``
(``TritonParser::SetupOptions``, server commit e1db8a603d86): names, value syntax (Triton's
``arg_desc``), groups (``SetupOptionGroups``). A unit test holds the names against a copy of
that list and against ``tritium serve``'s parser.

A flag is never accepted and then ignored: it is implemented; or accepted because, in Triton
too, it only tunes a resource tritium does not have (a thread pool, an allocation pool: logged
once at verbose level, the reason says why); or GPU-only (accepted, one log line at start says
it has no effect without a GPU); or, for a directory of shared libraries that tritium has built
in, accepted with one warning at start saying so and that the directory is not read (Triton's
QA command lines pass them); or refused with a message naming the reason; or not
implemented yet because another piece of work owns it (refused with "not implemented yet").
Only implemented flags have a parser (``arg``) and a target (``to``); the others are put on
the parser with Triton's value syntax and handled by ``parser.py:check_table_flags``.
"""

from __future__ import annotations

from typing import Any

from ...frontends.http.cors import DEFAULT_MAX_AGE_SECS
from .convert import (
    AUTO_COMPLETE,
    CORS,
    GRPC_RESTRICTIONS,
    GRPC_TLS,
    HTTP_RESTRICTIONS,
    HTTP_TLS,
    METRICS_SERVED,
    OPENAI,
    RESPONSE_CACHE,
    TRACING,
    address,
    backend_batch_size,
    forward_pattern,
    inflight_per_client,
    metrics_settings,
    repositories,
)
from .spec import Arg, Decision, Flag, Into, Style, Target
from .values import (
    config_name,
    log_format,
    non_negative_float,
    non_negative_int,
    origin,
    positive,
    positive_ms,
    positive_seconds,
    rate_limit_mode,
    rate_limit_resource,
    worker_count,
)

__all__ = ["BY_NAME", "FLAGS", "GROUPS", "Decision", "Flag"]

# Triton's groups, in its order (``SetupOptionGroups``), then tritium's own.
GROUPS = (
    "Server",
    "Logging",
    "Model Repository",
    "HTTP",
    "GRPC",
    "Sagemaker",
    "Vertex",
    "Metrics",
    "Tracing",
    "Backend",
    "Repository Agent",
    "Response Cache",
    "Rate Limiter",
    "Memory/Device Management",
    "Shared Memory",
    "DEPRECATED",
    "tritium",
)

I, T, G, B, R, N = (  # noqa: E741 - one letter per decision keeps the table readable
    Decision.IMPLEMENTED,
    Decision.TUNING,
    Decision.GPU_ONLY,
    Decision.BUILT_IN,
    Decision.REFUSED,
    Decision.NOT_YET,
)
REPEAT = Style.REPEAT
_B, _I, _S, _F = "boolean", "integer", "string", "float"
_NO_GPU = "no effect without a GPU: tritium runs every model on the CPU"
_SAGEMAKER = "tritium has no SageMaker front-end"
_VERTEX = "tritium has no Vertex AI front-end"
_ADDRESS = "a host or address; Triton's ipv6:[::1] form (and [::1]) binds that IPv6 address only"
_PORT = (
    "bound before the models load: a port in use stops the start, naming this flag; "
    "connections are accepted once the startup models are loaded (refused before, as "
    "Triton's port opens then)"
)
_THREADS = "tritium serves {} on its one event loop; Triton's thread count only sizes a pool"
_TRACE_DEPRECATED = "read as --trace-config (which wins)"


def _f(
    name: str, group: str, value: str, decision: Decision, reason: str, help_text: str = ""
) -> Flag:
    """A Triton flag tritium does not implement (tuning, GPU only, built in, refused)."""
    return Flag(name, group, value, decision, reason, help_text)


def _on(
    name: str, group: str, value: str, reason: str, help_text: str, to: Target, **arg: Any
) -> Flag:
    """A Triton flag tritium implements; ``arg``: ``spec.py:Arg``'s fields."""
    return Flag(name, group, value, I, reason, help_text, arg=_arg(value, arg), to=to)


def _own(
    name: str, group: str, value: str, reason: str, to: Target, help_text: str = "", **arg: Any
) -> Flag:
    """tritium's own flag (always implemented); its help is its reason unless given."""
    return Flag(
        name, group, value, I, reason, help_text or reason, False, arg=_arg(value, arg), to=to
    )


def _arg(value: str, arg: dict[str, Any]) -> Arg:
    style = Style.BOOL if value == _B else Style.PRESENT if not value else Style.VALUE
    arg.setdefault("style", style)
    return Arg(**arg)


def _alias(name: str, group: str, value: str, of: str) -> Flag:
    return Flag(name, group, value, I, f"alias of --{of}", f"Equivalent to --{of}.", alias_of=of)


def _not_yet(name: str, group: str, value: str, owner: str, help_text: str) -> Flag:
    reason = f"owned by {owner}"
    return Flag(name, group, value, Decision.NOT_YET, reason, help_text, owner=owner)


FLAGS: tuple[Flag, ...] = (
    # -- Server ------------------------------------------------------------------------------
    _on("id", "Server", _S, "the server metadata's name",
        "server identifier in server metadata", "server_id"),
    _on("exit-timeout-secs", "Server", _I, "drain time for in-flight requests at shutdown",
        "Seconds to wait at exit for in-flight inferences to finish.", "exit_timeout_secs",
        parse=float),
    # -- Logging -----------------------------------------------------------------------------
    _on("log-verbose", "Logging", _I, "levels >= 1 log tritium's debug messages",
        "verbose logging level; >= 1 shows verbose records (pb_utils.Logger.log_verbose)",
        "logging.verbose"),
    _on("log-info", "Logging", _B, "the server's and Python models' INFO records",
        "log INFO-level records", "logging.info"),
    _on("log-warning", "Logging", _B, "the server's and Python models' WARNING records",
        "log WARNING-level records", "logging.warning"),
    _on("log-error", "Logging", _B, "the server's and Python models' ERROR records",
        "log ERROR-level records", "logging.error"),
    _on("log-format", "Logging", _S,
        "Triton's default and ISO8601 layouts, and tritium's json (one object per line); "
        "changeable at run time",
        '"default": records as "I1130 14:02:03.123456 <pid> <file>:<line>] <message>"; '
        '"ISO8601": as "2024-11-30T14:02:03Z I <pid> <file>:<line>] <message>"; "json" '
        "(tritium's own): one JSON object per line with time, level, pid, file, line, model "
        "and message",
        "logging.format", parse=log_format),
    _on("log-file", "Logging", _S, "records appended to the file instead of the console",
        "append every log record to this file instead of the console (stdout for INFO, "
        "stderr for warnings and errors)", "logging.file"),
    # -- Model Repository ----------------------------------------------------------------------
    _alias("model-store", "Model Repository", _S, "model-repository"),
    _on("model-repository", "Model Repository", _S,
        "repeatable; local directories only: a missing path, a file or a cloud URL (s3://, "
        "gs://, as://) stops the start (with --exit-on-error=false a missing path or a file "
        "leaves the server running not live, as Triton's)",
        "path of a model repository (repeatable)",
        Into("repository.paths", repositories), style=REPEAT, required=True),
    _on("exit-on-error", "Model Repository", _B, "exit if a model fails to load at start",
        "exit if any model fails to load at startup", "exit_on_error"),
    _on("disable-auto-complete-config", "Model Repository", "", "configs are used as written",
        "do not complete model configurations from the model files", AUTO_COMPLETE,
        default=False),
    _on("strict-readiness", "Model Repository", _B,
        "ready only when every model is (a model unloaded on purpose does not count; one that "
        "failed to load does, even once unloaded, as in Triton)",
        "ready only when every model is ready", "strict_readiness"),
    _on("model-control-mode", "Model Repository", _S, "none, poll or explicit",
        "Model management mode: none, poll or explicit.", "repository.control_mode",
        choices=("none", "poll", "explicit"), parse=str.lower),
    _on("repository-poll-secs", "Model Repository", _I, "poll mode's interval",
        "Seconds between polls of the model repositories (poll mode).",
        Into("repository.poll_secs", lambda secs: max(secs, 0.1)), parse=float),
    _on("load-model", "Model Repository", _S, "explicit mode's start-up models",
        "explicit mode: a model to load at startup (repeatable; * = all)",
        Into("repository.load_models", tuple), style=REPEAT),
    _on("model-config-name", "Model Repository", _S,
        "reads <model>/configs/<name>.pbtxt, else config.pbtxt",
        "load <model>/configs/<name>.pbtxt instead of config.pbtxt when it exists",
        Into("repository.config_name", lambda name: name or ""), parse=config_name,
        default=None),
    _on("model-load-thread-count", "Model Repository", _I, "models loaded at once",
        "Number of threads that load models concurrently.", "repository.load_thread_count"),
    _on("model-load-retry-count", "Model Repository", _I,
        "a version that fails to load is tried again that many times",
        "try a model version that fails to load again, up to this many times",
        "repository.load_retry_count", parse=non_negative_int),
    _on("model-namespacing", "Model Repository", _B,
        "each repository is a namespace; a name held by several is ambiguous in a request",
        "each repository is a namespace: one model name may be served from several",
        "repository.namespacing"),
    _f("enable-peer-access", "Model Repository", _B, G, "CUDA peer access between GPUs; "
       + _NO_GPU, "Try to enable peer access between GPUs."),
    # -- HTTP --------------------------------------------------------------------------------
    _on("allow-http", "HTTP", _B, "serve HTTP/REST", "serve HTTP/REST", "http.enabled"),
    _on("http-address", "HTTP", _S, _ADDRESS, "Address the HTTP server binds to.",
        Into("http.address", address("--http-address"))),
    _on("http-port", "HTTP", _I, _PORT, "Port of the HTTP server.", "http.port"),
    _on("reuse-http-port", "HTTP", _B, "SO_REUSEPORT on the HTTP socket",
        "SO_REUSEPORT on the HTTP socket", "http.reuse_port"),
    _on("http-header-forward-pattern", "HTTP", _S,
        "matching request headers become inference parameters",
        "regex: request headers whose name matches become inference parameters",
        Into("http.header_forward_pattern", forward_pattern("--http-header-forward-pattern"))),
    _f("http-thread-count", "HTTP", _I, T, _THREADS.format("HTTP"),
       "Number of threads handling HTTP requests."),
    _on("http-max-input-size", "HTTP", _I, "bounds a request body (decompressed too)",
        "Maximum HTTP request input size in bytes.", "http.max_input_size"),
    _on("http-restricted-api", "HTTP", "<string>:<string>=<string>",
        "API groups that need a header",
        "these HTTP API groups need header <key> with <value> (repeatable; groups: "
        "health, metadata, inference, shared-memory, model-config, model-repository, "
        "statistics, trace, logging)",
        Into("access.http_restrictions", HTTP_RESTRICTIONS), style=REPEAT,
        metavar="<api>[,<api>...]:<key>=<value>"),
    # -- GRPC --------------------------------------------------------------------------------
    _on("allow-grpc", "GRPC", _B, "serve gRPC", "serve gRPC", "grpc.enabled"),
    _on("grpc-address", "GRPC", _S, _ADDRESS, "Address the GRPC server binds to.",
        Into("grpc.address", address("--grpc-address"))),
    _on("grpc-port", "GRPC", _I, _PORT, "Port of the GRPC server.", "grpc.port"),
    _on("reuse-grpc-port", "GRPC", _B, "SO_REUSEPORT on the gRPC socket",
        "SO_REUSEPORT on the gRPC socket", "grpc.reuse_port"),
    _on("grpc-header-forward-pattern", "GRPC", _S,
        "matching metadata become inference parameters",
        "regex: request metadata whose name matches becomes an inference parameter",
        Into("grpc.header_forward_pattern", forward_pattern("--grpc-header-forward-pattern"))),
    _f("grpc-infer-thread-count", "GRPC", _I, T, _THREADS.format("gRPC") + " (2 to 128)",
       "Number of gRPC inference handler threads."),
    _f("grpc-infer-allocation-pool-size", "GRPC", _I, T,
       "sizes Triton's pool of reusable request states; tritium allocates per request",
       "Request/response states kept allocated for reuse."),
    _f("grpc-max-response-pool-size", "GRPC", _I, T,
       "sizes Triton's pool of response objects; a tritium stream is bounded by "
       "--grpc-stream-inflight-limit and the socket's back-pressure (must be > 0)",
       "Inference response objects that may stay allocated in a response queue."),
    _on("grpc-use-ssl", "GRPC", _B, "TLS", "serve gRPC over TLS", GRPC_TLS, default=False),
    _on("grpc-use-ssl-mutual", "GRPC", _B, "mutual TLS",
        "TLS with client certificates (implies SSL)", GRPC_TLS, default=False),
    _on("grpc-server-cert", "GRPC", _S, "PEM chain", "PEM certificate chain file", GRPC_TLS,
        default=""),
    _on("grpc-server-key", "GRPC", _S, "PEM key", "PEM private key file", GRPC_TLS,
        default=""),
    _on("grpc-root-cert", "GRPC", _S, "PEM CA bundle", "PEM CA bundle for client certs",
        GRPC_TLS, default=""),
    _on("grpc-infer-response-compression-level", "GRPC", _S, "none, low, medium, high",
        "compress inference responses for clients that accept gzip/deflate",
        "grpc.infer_response_compression_level", choices=("none", "low", "medium", "high"),
        parse=str.lower),
    _on("grpc-keepalive-time", "GRPC", _I, "ms between keepalive pings",
        "ms between keepalive pings", "grpc.keepalive_time_ms"),
    _on("grpc-keepalive-timeout", "GRPC", _I, "ms to wait for a ping's ack",
        "ms to wait for a keepalive ping's acknowledgement", "grpc.keepalive_timeout_ms"),
    _on("grpc-keepalive-permit-without-calls", "GRPC", _B, "pings with no call in flight",
        "allow keepalive pings when no call is active", "grpc.keepalive_permit_without_calls"),
    _on("grpc-http2-max-pings-without-data", "GRPC", _I, "as grpc core",
        "Pings that may be sent with no data/header frame to send.",
        "grpc.http2_max_pings_without_data"),
    _on("grpc-http2-min-recv-ping-interval-without-data", "GRPC", _I, "as grpc core",
        "Minimum time (ms) between received pings without data.",
        "grpc.http2_min_recv_ping_interval_without_data_ms"),
    _on("grpc-http2-max-ping-strikes", "GRPC", _I, "as grpc core",
        "Bad pings tolerated before GOAWAY.", "grpc.http2_max_ping_strikes"),
    _on("grpc-max-connection-age", "GRPC", _I, "ms before GOAWAY",
        "ms a connection lives before GOAWAY (0: no limit)", "grpc.max_connection_age_ms",
        parse=non_negative_int),
    _on("grpc-max-connection-age-grace", "GRPC", _I, "ms after the age's GOAWAY",
        "ms in-flight calls get after the age's GOAWAY (0: no limit)",
        "grpc.max_connection_age_grace_ms", parse=non_negative_int),
    _on("grpc-restricted-protocol", "GRPC", "<string>:<string>=<string>",
        "protocol groups that need metadata",
        "these gRPC protocol groups need metadata triton-grpc-protocol-<key> with <value> "
        "(repeatable; the groups of --http-restricted-api)",
        Into("access.grpc_restrictions", GRPC_RESTRICTIONS), style=REPEAT,
        metavar="<protocol>[,<protocol>...]:<key>=<value>"),
    # -- Sagemaker / Vertex ------------------------------------------------------------------
    _f("allow-sagemaker", "Sagemaker", _B, R, _SAGEMAKER + " (false is accepted)",
       "Listen for SageMaker requests."),
    _f("sagemaker-port", "Sagemaker", _I, R, _SAGEMAKER, "Port for SageMaker requests."),
    _f("sagemaker-safe-port-range", "Sagemaker", "<integer>-<integer>", R, _SAGEMAKER,
       "Allowed port range for endpoints other than SageMaker's."),
    _f("sagemaker-thread-count", "Sagemaker", _I, R, _SAGEMAKER,
       "Number of threads handling SageMaker requests."),
    _f("allow-vertex-ai", "Vertex", _B, R, _VERTEX + " (false is accepted)",
       "Listen for Vertex AI requests."),
    _f("vertex-ai-port", "Vertex", _I, R, _VERTEX, "Port for Vertex AI requests."),
    _f("vertex-ai-thread-count", "Vertex", _I, R, _VERTEX,
       "Number of threads handling Vertex AI requests."),
    _f("vertex-ai-default-model", "Vertex", _S, R, _VERTEX,
       "Model used for single-model Vertex AI requests."),
    # -- Metrics -----------------------------------------------------------------------------
    _on("allow-metrics", "Metrics", _B, "serve Prometheus metrics", "serve Prometheus metrics",
        METRICS_SERVED, default=True),
    _f("allow-gpu-metrics", "Metrics", _B, G, _NO_GPU, "Provide GPU metrics."),
    _on("allow-cpu-metrics", "Metrics", _B, "the nv_cpu_* families",
        "serve the nv_cpu_* families (ignored unless --allow-metrics is true)",
        METRICS_SERVED, default=True),
    _on("metrics-address", "Metrics", _S, "default: --http-address; " + _ADDRESS,
        "address the metrics server binds to (default: --http-address)",
        Into("metrics.address", address("--metrics-address"))),
    _on("metrics-port", "Metrics", _I, _PORT, "Port reporting Prometheus metrics.",
        "metrics.port"),
    _on("metrics-interval-ms", "Metrics", _F,
        "the nv_cpu_* families are sampled from /proc at most once per interval",
        "the CPU families are sampled at most once per interval (ms)", "metrics.interval_ms",
        parse=positive_ms),
    _on("metrics-config", "Metrics", "<string>=<string>",
        "counter_latencies, histogram_latencies, summary_latencies, summary_quantiles "
        "(docs/metrics.md); any other setting stops the start",
        "counter_latencies, summary_latencies, histogram_latencies (true|false) or "
        "summary_quantiles=<q>:<error>,... (repeatable)",
        Into("metrics.settings", metrics_settings), style=REPEAT, metavar="<setting>=<value>"),
    # -- Tracing -----------------------------------------------------------------------------
    _on("trace-config", "Tracing", "<string>,<string>=<string>",
        "triton (trace file) and opentelemetry (OTLP/HTTP) modes; an unknown setting stops "
        "the start",
        "a trace setting (repeatable): level=OFF|TIMESTAMPS|TENSORS, rate=N, count=N, "
        "mode=triton|opentelemetry; triton,file=PATH, triton,log-frequency=N; "
        "opentelemetry,url=URL, opentelemetry,resource=KEY=VALUE, opentelemetry,bsp_*=N; "
        "with --workers, each worker writes PATH.w<i>, joined into PATH when the server "
        "stops",
        TRACING, style=REPEAT, metavar="[<mode>,]<setting>=<value>"),
    # -- Backend -----------------------------------------------------------------------------
    _f("backend-directory", "Backend", _S, B,
       "tritium's backends (ensemble, onnxruntime, openvino, python, pytorch) are built in: the "
       "directory is not read; a model of any other backend is UNAVAILABLE, naming it",
       "Directory searched for backend shared libraries."),
    _on("backend-config", "Backend", "<string>,<string>=<string>",
        "the settings tritium honours, per backend (docs/flags.md); any other is refused",
        "a backend setting tritium honours (see docs/flags.md; others are refused)",
        Into("backends.onnxruntime_default_max_batch_size", backend_batch_size),
        style=REPEAT, metavar="[<backend>,]<setting>=<value>"),
    # -- Repository Agent --------------------------------------------------------------------
    _f("repoagent-directory", "Repository Agent", _S, B,
       "tritium has no repository agents: the directory is not read; a model that names "
       "one (model_repository_agents) fails to load",
       "Directory searched for repository agent shared libraries."),
    # -- Response Cache ----------------------------------------------------------------------
    _on("cache-config", "Response Cache", "<string>,<string>=<string>", "local,size=<bytes>",
        "local,size=1048576: the in-process cache and its size in bytes (+ tritium's ttl, in "
        "seconds); redis,host=<h> and redis,port=<p> (+ Triton's user, password, db, "
        "connect_timeout, socket_timeout, pool_size, wait_timeout, tls_enabled, cert, key, "
        "cacert, cacert_dir; tritium's circuit_cooldown, max_entry_bytes, ttl): a Redis cache "
        "shared by servers (tritium[redis]); sni is refused", RESPONSE_CACHE,
        style=REPEAT),
    _f("cache-directory", "Response Cache", _S, R,
       "tritium's local and redis caches are built in; it loads no cache shared libraries",
       "Directory searched for cache shared libraries."),
    # -- Rate Limiter ------------------------------------------------------------------------
    _on("rate-limit", "Rate Limiter", _S,
        "execution_count gates every execution on its instance's rate_limiter resources",
        '"execution_count": an instance executes only when the resources its '
        "rate_limiter lists are free, waiting instances served by priority and execution "
        'count; "off" (the default): rate_limiter settings have no effect; with '
        "--workers, the resources are counted over every worker's instances",
        "rate_limit.mode", parse=rate_limit_mode),
    _on("rate-limit-resource", "Rate Limiter", "<string>:<integer>:<integer>",
        "how many of a resource exist, per device or for all",
        "how many of a resource exist (repeatable; without a device, on every device); "
        "by default the most any instance needs",
        Into("rate_limit.resources", tuple), style=REPEAT, parse=rate_limit_resource,
        metavar="<name>:<count>[:<device>]"),
    # -- Memory/Device Management ------------------------------------------------------------
    _f("pinned-memory-pool-byte-size", "Memory/Device Management", _I, G,
       "page-locked host memory for host/GPU copies; " + _NO_GPU,
       "Bytes of pinned system memory for host/device transfers."),
    _f("cuda-memory-pool-byte-size", "Memory/Device Management", "<integer>:<integer>", G,
       _NO_GPU, "CUDA memory pool per GPU: <device>:<bytes> (repeatable)."),
    _f("cuda-virtual-address-size", "Memory/Device Management", "<integer>:<integer>", G,
       _NO_GPU, "CUDA virtual address size per GPU for growable implicit state."),
    _f("min-supported-compute-capability", "Memory/Device Management", _F, G, _NO_GPU,
       "Minimum CUDA compute capability of the GPUs used."),
    _f("buffer-manager-thread-count", "Memory/Device Management", _I, T,
       "sizes Triton's pool of tensor-copy threads; tritium copies on the request's own path",
       "Threads used to accelerate tensor copies."),
    _f("host-policy", "Memory/Device Management", "<string>,<string>=<string>", R,
       "tritium does not bind model instances to NUMA nodes or CPU cores",
       "A host policy setting: <policy>,<setting>=<value> (numa-node, cpu-cores)."),
    _f("model-load-gpu-limit", "Memory/Device Management", "<device_id>:<fraction>", G,
       _NO_GPU, "Limit on GPU memory use as a fraction, per device."),
    # -- Shared Memory -----------------------------------------------------------------------
    _on("allow-client-shm", "Shared Memory", _B, "default false, as Triton 2.69+",
        "let clients register shared-memory regions", "allow_client_shm"),
    # -- DEPRECATED --------------------------------------------------------------------------
    _on("strict-model-config", "DEPRECATED", _B, "true: --disable-auto-complete-config",
        "deprecated: same as --disable-auto-complete-config when true", AUTO_COMPLETE,
        default=None),
    _on("response-cache-byte-size", "DEPRECATED", _I, "as --cache-config local,size=<bytes>",
        "deprecated: --cache-config local,size=<bytes>", RESPONSE_CACHE, default=None),
    _on("trace-file", "DEPRECATED", _S, _TRACE_DEPRECATED,
        "deprecated: --trace-config triton,file=PATH", TRACING, default=None),
    _on("trace-level", "DEPRECATED", _S, _TRACE_DEPRECATED,
        "deprecated: --trace-config level=OFF|TIMESTAMPS|TENSORS (repeatable)", TRACING,
        style=REPEAT),
    _on("trace-rate", "DEPRECATED", _I, _TRACE_DEPRECATED, "deprecated: --trace-config rate=N",
        TRACING, default=None),
    _on("trace-count", "DEPRECATED", _I, _TRACE_DEPRECATED,
        "deprecated: --trace-config count=N", TRACING, default=None),
    _on("trace-log-frequency", "DEPRECATED", _I, _TRACE_DEPRECATED,
        "deprecated: --trace-config triton,log-frequency=N", TRACING, default=None),
    # -- tritium's own -----------------------------------------------------------------------
    _own("grpc-max-concurrent-streams", "GRPC", _I, "HTTP/2 streams per connection (0: 1024)",
         "grpc.max_concurrent_streams",
         "HTTP/2 streams per connection (0: 1024, tritium's default)"),
    _own("grpc-stream-inflight-limit", "GRPC", _I,
         "requests in flight per ModelStreamInfer stream (back-pressure)",
         Into("grpc.stream_inflight", lambda limit: max(1, limit)),
         "tritium: requests in flight per ModelStreamInfer stream; more are not read until "
         "responses are written (back-pressure)"),
    _own("grpc-preface-timeout-secs", "GRPC", _F,
         "seconds from accept for the TLS handshake and the HTTP/2 preface",
         "grpc.preface_timeout_secs",
         "tritium: seconds from accept for a gRPC client's TLS handshake and HTTP/2 preface; "
         "a connection still silent then is closed", parse=positive(float)),
    _own("grpc-idle-timeout-secs", "GRPC", _F,
         "seconds a connection with no open stream stays open (then GOAWAY)",
         "grpc.idle_timeout_secs",
         "tritium: seconds a gRPC connection with no open stream stays open (then GOAWAY; "
         "pings do not count as activity)", parse=positive(float)),
    _own("grpc-stall-timeout-secs", "GRPC", _F,
         "a stream whose client sends or reads nothing of a message for this long is reset",
         "grpc.stall_timeout_secs",
         "tritium: a gRPC stream whose client sends nothing of a message it began (having "
         "window to), or reads nothing of a response waiting for its window, this long is "
         "reset", parse=positive(float)),
    _own("grpc-connection-input-bytes", "GRPC", _I,
         "bytes of unfinished request messages a connection may hold",
         "grpc.connection_input_bytes",
         "tritium: bytes of unfinished request messages one gRPC connection may hold "
         "(default 64 MiB); past it its newest calls holding some end RESOURCE_EXHAUSTED "
         "(the oldest always goes on)", parse=positive(int)),
    _own("grpc-connection-output-bytes", "GRPC", _I,
         "bytes of responses a connection may hold for a client that does not read",
         "grpc.connection_output_bytes",
         "tritium: bytes of responses one gRPC connection may hold waiting for the client to "
         "read them (default 64 MiB); at it, new calls and responses that would wait end "
         "RESOURCE_EXHAUSTED", parse=positive(int)),
    _own("connection-memory-bytes", "tritium", _I,
         "bytes all connections together may hold for their clients",
         "connection_memory_bytes",
         "tritium: bytes every HTTP and gRPC connection of a server process may hold for "
         "their clients, all together (requests not yet taken, answers not yet sent; "
         "default 1 GiB, per worker with --workers); past it new gRPC calls end "
         "RESOURCE_EXHAUSTED and the connections holding the most are reset first",
         parse=positive(int)),
    _own("http-max-header-size", "HTTP", _I, "bytes of request headers (431)",
         "http.max_header_size", parse=positive(int)),
    _own("http-max-url-length", "HTTP", _I, "bytes of a request URL (414)",
         "http.max_url_length", parse=positive(int)),
    _own("http-max-headers", "HTTP", _I, "header lines per request (431)", "http.max_headers",
         parse=positive(int)),
    _own("http-max-pipelined", "HTTP", _I, "requests held per connection",
         "http.max_pipelined",
         "requests held per connection; more are not read until one is answered",
         parse=positive(int)),
    _own("http-header-timeout-secs", "HTTP", _F, "seconds to receive a request's headers",
         "http.header_timeout_secs", "seconds to receive a request's headers (408)",
         parse=positive(float)),
    _own("http-body-timeout-secs", "HTTP", _F, "longest pause while a body arrives",
         "http.body_timeout_secs", "longest pause in seconds while a request body arrives (408)",
         parse=positive(float)),
    _own("http-keepalive-timeout-secs", "HTTP", _F, "seconds an idle connection stays open",
         "http.keepalive_timeout_secs", parse=positive(float)),
    _own("http-drain-idle-secs", "HTTP", _F,
         "at shutdown, seconds an idle keep-alive connection is still served",
         "http.drain_idle_secs",
         "tritium: at shutdown (the exit timeout), a keep-alive connection idle this long "
         "since the signal or its last answer is closed (default 5; 0: idle ones at once); "
         "Triton waits for every connection to close", parse=non_negative_float),
    _own("http-ssl-cert", "HTTP", _S, "PEM certificate: serve HTTPS", HTTP_TLS, default=""),
    _own("http-ssl-key", "HTTP", _S, "PEM private key of --http-ssl-cert", HTTP_TLS,
         default=""),
    _own("http-cors-allow-origin", "HTTP", "<scheme://host[:port]> or *",
         "CORS: an origin whose pages may call the API (repeatable); off without one", CORS,
         "tritium: let pages of this origin call the HTTP API from a browser (CORS; "
         "repeatable; * for any origin). Off when none is given",
         style=REPEAT, parse=origin, metavar="<scheme://host[:port]>|*"),
    _own("http-cors-allow-header", "HTTP", _S,
         "CORS: a request header pages may send, beyond the defaults (repeatable)", CORS,
         "tritium: a request header pages may send, beyond Authorization, Content-Type, "
         "Content-Encoding, Inference-Header-Content-Length, traceparent, tracestate and the "
         "--http-restricted-api headers (repeatable)",
         style=REPEAT, metavar="<name>"),
    _own("http-cors-max-age-secs", "HTTP", _I, "CORS: how long a preflight's answer is kept",
         CORS,
         "tritium: how long a browser may keep a preflight's answer (seconds; default "
         f"{DEFAULT_MAX_AGE_SECS})",
         parse=non_negative_int, default=None),
    _own("http-cors-allow-credentials", "HTTP", _B,
         "CORS: pages may send cookies and HTTP authentication (not with origin *)", CORS,
         "tritium: let pages send cookies and HTTP authentication along (not with origin *)",
         default=False),
    _own("openai", "HTTP", _B,
         "the OpenAI-compatible API (/v1/...) on the HTTP port", OPENAI,
         "tritium: serve the OpenAI-compatible API (/v1/models, /v1/completions, "
         "/v1/chat/completions, /v1/embeddings) on the HTTP port (docs/openai.md)",
         default=True),
    _own("openai-port", "HTTP", _I,
         "the OpenAI API on a port of its own, not the HTTP port (Triton's two-port layout)",
         OPENAI,
         "tritium: serve the OpenAI-compatible API on this port (at --http-address) instead "
         "of the HTTP port, as Triton's OpenAI front-end has a port of its own",
         parse=non_negative_int, default=None),
    _own("model-instance-max-restarts", "Backend", _I,
         "restarts of a crashed Python model instance within the window",
         "backends.instance_max_restarts",
         "tritium: restart a crashed Python model instance (stub process) at most this "
         "many times within --model-instance-restart-window-secs, after which it stays "
         "UNAVAILABLE until the model is reloaded; 0: never restart",
         parse=non_negative_int),
    _own("model-instance-restart-window-secs", "Backend", _F,
         "the window of --model-instance-max-restarts", "backends.instance_restart_window_secs",
         "tritium: the window in which --model-instance-max-restarts counts crashes",
         parse=positive_seconds),
    _own("python-env-cache-dir", "Backend", _S, "where EXECUTION_ENV_PATH archives unpack",
         "backends.python_env_cache_dir",
         "tritium: where EXECUTION_ENV_PATH archives are unpacked, once per distinct "
         "content; created 0700, must be owned by the server's user and not writable by "
         "others (default: <system temp>/tritium-python-envs-<uid>)"),
    _own("auth-token-file", "tritium", _S, "bearer tokens for HTTP and gRPC",
         "access.auth_token_file",
         "tritium: require 'Authorization: Bearer <token>' on HTTP and gRPC; one "
         "'<token> [<groups>|*] [<name>]' per line, '#' comments; health stays open"),
    _own("audit-log", "tritium", _S, "control-plane actions and refusals, JSON lines",
         "access.audit_log",
         "tritium: append control-plane actions and refused requests to FILE (JSON lines)"),
    _own("access-log-file", "Logging", _S, "one JSON line per inference request, off the path",
         "logging.access_log_file",
         "tritium: append one JSON line per inference request (HTTP and gRPC) to this "
         "file, written off the request path; off by default"),
    _own("access-log-max-bytes", "Logging", _I, "the access log rotates before this size",
         "logging.access_log_max_bytes",
         "tritium: rotate the access log before it would grow past this many bytes "
         "(0: never rotate); with --workers, every worker appends to the one file and "
         "they rotate it together",
         parse=non_negative_int),
    _own("access-log-backup-count", "Logging", _I, "rotated access logs kept (FILE.1 ...)",
         "logging.access_log_backup_count",
         "tritium: rotated access logs kept as FILE.1 ... FILE.<n> (0: the file starts "
         "over at the bound)",
         parse=non_negative_int),
    _own("max-inflight-per-client", "tritium", _I, "inference requests in flight per client",
         Into("access.max_inflight_per_client", inflight_per_client),
         "tritium: inference requests in flight per client address (0: unbounded); "
         "more are refused (HTTP 429, gRPC RESOURCE_EXHAUSTED); with --workers, counted "
         "over every worker"),
    _own("sequence-backlog-limit", "tritium", _I,
         "sequences a model's sequence backlog holds (0: no bound); one more is UNAVAILABLE",
         "repository.sequence_backlog_limit",
         "tritium: sequences a sequence model's backlog holds while they wait for a slot; "
         "a new one beyond is refused (UNAVAILABLE); 0: no bound, as Triton",
         parse=non_negative_int),
    _own("ports-file", "tritium", _S, "write the bound ports as JSON once serving",
         "ports_file", "tritium: write the bound ports as JSON to this file once serving"),
    _own("workers", "tritium", _S, "processes serving the same ports, as one server",
         "workers",
         "tritium: serve the HTTP, gRPC and metrics ports from this many worker processes "
         "(each a full replica; 'auto': one per CPU this process may use), kept one server "
         "by a supervisor: model control, readiness, statistics and metrics are the whole "
         "server's; a worker that crashes or hangs is restarted",
         parse=worker_count, metavar="N|auto"),
    _own("worker-sockets", "tritium", _S,
         "how the workers share a port: one accept queue, or one each (SO_REUSEPORT)",
         "worker_sockets",
         "tritium: with --workers, 'shared': every worker accepts from the supervisor's "
         "listening socket, one holding more connections leaving a new one to one "
         "holding fewer (a worker that dies loses only its own connections); "
         "'reuseport': each worker listens with a socket of its own in a SO_REUSEPORT "
         "group (the kernel spreads the connections evenly; those waiting in a dying "
         "worker's queue are reset)",
         choices=("shared", "reuseport")),
    _own("worker-affinity", "tritium", _S,
         "whether each worker runs on one CPU of its own",
         "worker_affinity",
         "tritium: with --workers, 'cpu': worker i runs on the i-th CPU this process may "
         "use (round robin), its threads and Python stubs with it; 'none': wherever the "
         "kernel puts them; 'auto' (default): 'cpu' when there are as many workers as "
         "CPUs (--workers auto), else 'none'",
         choices=("auto", "cpu", "none")),
    _own("worker-heartbeat-secs", "tritium", _I,
         "a worker silent this long is killed and restarted",
         "worker_heartbeat_secs",
         "tritium: with --workers, a worker whose heartbeat stops for this many seconds "
         "(a blocked event loop, a stopped process) is killed and started again",
         parse=positive_seconds),
)  # fmt: skip

BY_NAME: dict[str, Flag] = {flag.name: flag for flag in FLAGS}
