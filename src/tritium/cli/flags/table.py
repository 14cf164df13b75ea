"""Every ``tritonserver`` flag, and tritium's own, with a decision each.

The authority is the option table of Triton's ``src/command_line_parser.cc``
(``TritonParser::SetupOptions``, server commit e1db8a603d86): names, value syntax (Triton's
``arg_desc``), groups (``SetupOptionGroups``) and help texts, abridged. A unit test holds the
names against a copy of that list and against ``tritium serve``'s parser, and
``docs/flags.md`` is generated from this table (``python -m tritium.cli.flags``).

A flag is never accepted and then ignored: it is implemented; or accepted because, in Triton
too, it only tunes a resource tritium does not have (a thread pool, an allocation pool: logged
once at verbose level, the reason says why); or GPU-only (accepted, one log line at start says
it has no effect without a GPU); or, for a directory of shared libraries that tritium has built
in, accepted with one warning at start saying so and that the directory is not read (Triton's
QA command lines pass them); or refused with a message naming the reason; or not
implemented yet because another piece of work owns it (refused with "not implemented yet").
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Decision(enum.Enum):
    IMPLEMENTED = "implemented"
    TUNING = "accepted: tuning only"
    GPU_ONLY = "GPU only"
    BUILT_IN = "accepted: built in"
    REFUSED = "refused"
    NOT_YET = "not implemented yet"


@dataclass(frozen=True, slots=True)
class Flag:
    name: str  # without the leading '--'
    group: str  # Triton's option group
    value: str  # Triton's value syntax ('' for a flag without a value)
    decision: Decision
    reason: str
    help: str = ""  # Triton's help text, abridged
    triton: bool = True  # False: tritium's own flag
    owner: str = ""  # NOT_YET: the piece of work that implements it


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
_B, _I, _S, _F = "boolean", "integer", "string", "float"
_NO_GPU = "no effect without a GPU: tritium runs every model on the CPU"
_SAGEMAKER = "tritium has no SageMaker front-end"
_VERTEX = "tritium has no Vertex AI front-end"
_ADDRESS = (
    "a host or address; Triton's ipv6:[::1] form (and [::1]) binds that IPv6 address only"
)
_PORT = "bound before the models load: a port in use stops the start, naming this flag"
_THREADS = "tritium serves {} on its one event loop; Triton's thread count only sizes a pool"


def _f(
    name: str, group: str, value: str, decision: Decision, reason: str, help_text: str = ""
) -> Flag:
    return Flag(name, group, value, decision, reason, help_text)


def _own(name: str, group: str, value: str, reason: str) -> Flag:
    return Flag(name, group, value, Decision.IMPLEMENTED, reason, reason, triton=False)


def _not_yet(name: str, group: str, value: str, owner: str, help_text: str) -> Flag:
    reason = f"owned by {owner}"
    return Flag(name, group, value, Decision.NOT_YET, reason, help_text, owner=owner)


FLAGS: tuple[Flag, ...] = (
    # -- Server ------------------------------------------------------------------------------
    _f("id", "Server", _S, I, "the server metadata's name", "Identifier for this server."),
    _f("exit-timeout-secs", "Server", _I, I, "drain time for in-flight requests at shutdown",
       "Seconds to wait at exit for in-flight inferences to finish."),
    # -- Logging -----------------------------------------------------------------------------
    _f("log-verbose", "Logging", _I, I, "levels >= 1 log tritium's debug messages",
       "Verbose logging level; 0 disables verbose logging."),
    _f("log-info", "Logging", _B, I, "the server's and Python models' INFO records",
       "Enable/disable info-level logging."),
    _f("log-warning", "Logging", _B, I, "the server's and Python models' WARNING records",
       "Enable/disable warning-level logging."),
    _f("log-error", "Logging", _B, I, "the server's and Python models' ERROR records",
       "Enable/disable error-level logging."),
    _f("log-format", "Logging", _S, I,
       "Triton's default and ISO8601 layouts, and tritium's json (one object per line); "
       "changeable at run time",
       "Logging format: default or ISO8601."),
    _f("log-file", "Logging", _S, I, "records appended to the file instead of the console",
       "File that log output is written to."),
    # -- Model Repository ----------------------------------------------------------------------
    _f("model-store", "Model Repository", _S, I, "alias of --model-repository",
       "Equivalent to --model-repository."),
    _f("model-repository", "Model Repository", _S, I,
       "repeatable; local directories only: a missing path, a file or a cloud URL (s3://, "
       "gs://, as://) stops the start",
       "Path to a model repository directory; may be given several times."),
    _f("exit-on-error", "Model Repository", _B, I, "exit if a model fails to load at start",
       "Exit the server if an error occurs during initialization."),
    _f("disable-auto-complete-config", "Model Repository", "", I,
       "configs are used as written", "Do not auto-complete model configurations."),
    _f("strict-readiness", "Model Repository", _B, I,
       "ready only when every model is (a model unloaded on purpose does not count; one that "
       "failed to load does, even once unloaded, as in Triton)",
       "Ready only when the server is responsive and every model is available."),
    _f("model-control-mode", "Model Repository", _S, I, "none, poll or explicit",
       "Model management mode: none, poll or explicit."),
    _f("repository-poll-secs", "Model Repository", _I, I, "poll mode's interval",
       "Seconds between polls of the model repositories (poll mode)."),
    _f("load-model", "Model Repository", _S, I, "explicit mode's start-up models",
       "A model to load at start-up (explicit mode; repeatable; * = all)."),
    _f("model-config-name", "Model Repository", _S, I,
       "reads <model>/configs/<name>.pbtxt, else config.pbtxt",
       "Custom configuration name: <model>/configs/<name>.pbtxt instead of config.pbtxt."),
    _f("model-load-thread-count", "Model Repository", _I, I, "models loaded at once",
       "Number of threads that load models concurrently."),
    _f("model-load-retry-count", "Model Repository", _I, I,
       "a version that fails to load is tried again that many times",
       "Number of retries to load a model."),
    _f("model-namespacing", "Model Repository", _B, I,
       "each repository is a namespace; a name held by several is ambiguous in a request",
       "Models with the same name may be served from different repositories."),
    _f("enable-peer-access", "Model Repository", _B, G, "CUDA peer access between GPUs; "
       + _NO_GPU, "Try to enable peer access between GPUs."),
    # -- HTTP --------------------------------------------------------------------------------
    _f("allow-http", "HTTP", _B, I, "serve HTTP/REST", "Listen for HTTP requests."),
    _f("http-address", "HTTP", _S, I, _ADDRESS, "Address the HTTP server binds to."),
    _f("http-port", "HTTP", _I, I, _PORT, "Port of the HTTP server."),
    _f("reuse-http-port", "HTTP", _B, I, "SO_REUSEPORT on the HTTP socket",
       "Let several servers listen on the same HTTP port."),
    _f("http-header-forward-pattern", "HTTP", _S, I,
       "matching request headers become inference parameters",
       "Regular expression: HTTP headers forwarded as inference request parameters."),
    _f("http-thread-count", "HTTP", _I, T, _THREADS.format("HTTP"),
       "Number of threads handling HTTP requests."),
    _f("http-max-input-size", "HTTP", _I, I, "bounds a request body (decompressed too)",
       "Maximum HTTP request input size in bytes."),
    _f("http-restricted-api", "HTTP", "<string>:<string>=<string>", I,
       "API groups that need a header", "Restricted HTTP APIs: <apis>:<key>=<value>."),
    # -- GRPC --------------------------------------------------------------------------------
    _f("allow-grpc", "GRPC", _B, I, "serve gRPC", "Listen for GRPC requests."),
    _f("grpc-address", "GRPC", _S, I, _ADDRESS, "Address the GRPC server binds to."),
    _f("grpc-port", "GRPC", _I, I, _PORT, "Port of the GRPC server."),
    _f("reuse-grpc-port", "GRPC", _B, I, "SO_REUSEPORT on the gRPC socket",
       "Let several servers listen on the same GRPC port."),
    _f("grpc-header-forward-pattern", "GRPC", _S, I,
       "matching metadata become inference parameters",
       "Regular expression: GRPC headers forwarded as inference request parameters."),
    _f("grpc-infer-thread-count", "GRPC", _I, T, _THREADS.format("gRPC") + " (2 to 128)",
       "Number of gRPC inference handler threads."),
    _f("grpc-infer-allocation-pool-size", "GRPC", _I, T,
       "sizes Triton's pool of reusable request states; tritium allocates per request",
       "Request/response states kept allocated for reuse."),
    _f("grpc-max-response-pool-size", "GRPC", _I, T,
       "sizes Triton's pool of response objects; a tritium stream is bounded by "
       "--grpc-stream-inflight-limit and the socket's back-pressure (must be > 0)",
       "Inference response objects that may stay allocated in a response queue."),
    _f("grpc-use-ssl", "GRPC", _B, I, "TLS", "Use SSL for GRPC requests."),
    _f("grpc-use-ssl-mutual", "GRPC", _B, I, "mutual TLS", "Use mutual SSL for GRPC."),
    _f("grpc-server-cert", "GRPC", _S, I, "PEM chain", "File holding the PEM server cert."),
    _f("grpc-server-key", "GRPC", _S, I, "PEM key", "File holding the PEM server key."),
    _f("grpc-root-cert", "GRPC", _S, I, "PEM CA bundle", "File holding the PEM root cert."),
    _f("grpc-infer-response-compression-level", "GRPC", _S, I, "none, low, medium, high",
       "Compression level of inference responses."),
    _f("grpc-keepalive-time", "GRPC", _I, I, "ms between keepalive pings",
       "Period (ms) after which a keepalive ping is sent."),
    _f("grpc-keepalive-timeout", "GRPC", _I, I, "ms to wait for a ping's ack",
       "Period (ms) the sender of a keepalive ping waits for an ack."),
    _f("grpc-keepalive-permit-without-calls", "GRPC", _B, I, "pings with no call in flight",
       "Allow keepalive pings with no calls in flight."),
    _f("grpc-http2-max-pings-without-data", "GRPC", _I, I, "as grpc core",
       "Pings that may be sent with no data/header frame to send."),
    _f("grpc-http2-min-recv-ping-interval-without-data", "GRPC", _I, I, "as grpc core",
       "Minimum time (ms) between received pings without data."),
    _f("grpc-http2-max-ping-strikes", "GRPC", _I, I, "as grpc core",
       "Bad pings tolerated before GOAWAY."),
    _f("grpc-max-connection-age", "GRPC", _I, I, "ms before GOAWAY",
       "Maximum time (ms) a channel may exist."),
    _f("grpc-max-connection-age-grace", "GRPC", _I, I, "ms after the age's GOAWAY",
       "Grace period (ms) after the channel reaches its max age."),
    _f("grpc-restricted-protocol", "GRPC", "<string>:<string>=<string>", I,
       "protocol groups that need metadata",
       "Restricted GRPC protocols: <protocols>:<key>=<value>."),
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
    _f("allow-metrics", "Metrics", _B, I, "serve Prometheus metrics",
       "Provide Prometheus metrics."),
    _f("allow-gpu-metrics", "Metrics", _B, G, _NO_GPU, "Provide GPU metrics."),
    _f("allow-cpu-metrics", "Metrics", _B, I, "the nv_cpu_* families",
       "Provide CPU metrics."),
    _f("metrics-address", "Metrics", _S, I, "default: --http-address; " + _ADDRESS,
       "Address the metrics server binds to."),
    _f("metrics-port", "Metrics", _I, I, _PORT, "Port reporting Prometheus metrics."),
    _f("metrics-interval-ms", "Metrics", _F, I,
       "the nv_cpu_* families are sampled from /proc at most once per interval",
       "Milliseconds between metric collections."),
    _f("metrics-config", "Metrics", "<string>=<string>", I,
       "counter_latencies, histogram_latencies, summary_latencies, summary_quantiles "
       "(docs/metrics.md); any other setting stops the start",
       "A metrics setting: <setting>=<value> (repeatable)."),
    # -- Tracing -----------------------------------------------------------------------------
    _f("trace-config", "Tracing", "<string>,<string>=<string>", I,
       "triton (trace file) and opentelemetry (OTLP/HTTP) modes; an unknown setting stops "
       "the start",
       "A trace setting: [<mode>,]<setting>=<value> (repeatable)."),
    # -- Backend -----------------------------------------------------------------------------
    _f("backend-directory", "Backend", _S, B,
       "tritium's backends (ensemble, onnxruntime, python) are built in: the directory is "
       "not read; a model of any other backend is UNAVAILABLE, naming it",
       "Directory searched for backend shared libraries."),
    _f("backend-config", "Backend", "<string>,<string>=<string>", I,
       "the settings tritium honours, per backend (docs/flags.md); any other is refused",
       "A backend setting: [<backend>,]<setting>=<value> (repeatable)."),
    # -- Repository Agent --------------------------------------------------------------------
    _f("repoagent-directory", "Repository Agent", _S, B,
       "tritium has no repository agents: the directory is not read; a model that names "
       "one (model_repository_agents) fails to load",
       "Directory searched for repository agent shared libraries."),
    # -- Response Cache ----------------------------------------------------------------------
    _f("cache-config", "Response Cache", "<string>,<string>=<string>", I,
       "local,size=<bytes>", "A cache setting: <cache>,<setting>=<value>."),
    _f("cache-directory", "Response Cache", _S, R,
       "tritium's local cache is built in; it loads no cache shared libraries",
       "Directory searched for cache shared libraries."),
    # -- Rate Limiter ------------------------------------------------------------------------
    _f("rate-limit", "Rate Limiter", _S, I,
       "execution_count gates every execution on its instance's rate_limiter resources",
       "Rate limiting: execution_count or off."),
    _f("rate-limit-resource", "Rate Limiter", "<string>:<integer>:<integer>", I,
       "how many of a resource exist, per device or for all",
       "A resource count: <name>:<count>[:<device>] (repeatable)."),
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
    _f("allow-client-shm", "Shared Memory", _B, I, "default false, as Triton 2.69+",
       "Let clients register and use shared-memory regions."),
    # -- DEPRECATED --------------------------------------------------------------------------
    _f("strict-model-config", "DEPRECATED", _B, I, "true: --disable-auto-complete-config",
       "DEPRECATED: use --disable-auto-complete-config."),
    _f("response-cache-byte-size", "DEPRECATED", _I, I, "as --cache-config local,size=<bytes>",
       "DEPRECATED: use --cache-config."),
    _f("trace-file", "DEPRECATED", _S, I, "read as --trace-config (which wins)",
       "DEPRECATED: --trace-config triton,file=."),
    _f("trace-level", "DEPRECATED", _S, I, "read as --trace-config (which wins)",
       "DEPRECATED: --trace-config level=."),
    _f("trace-rate", "DEPRECATED", _I, I, "read as --trace-config (which wins)",
       "DEPRECATED: --trace-config rate=."),
    _f("trace-count", "DEPRECATED", _I, I, "read as --trace-config (which wins)",
       "DEPRECATED: --trace-config count=."),
    _f("trace-log-frequency", "DEPRECATED", _I, I, "read as --trace-config (which wins)",
       "DEPRECATED: --trace-config triton,log-frequency=."),
    # -- tritium's own -----------------------------------------------------------------------
    _own("grpc-max-concurrent-streams", "GRPC", _I, "HTTP/2 streams per connection (0: 1024)"),
    _own("grpc-stream-inflight-limit", "GRPC", _I,
         "requests in flight per ModelStreamInfer stream (back-pressure)"),
    _own("http-max-header-size", "HTTP", _I, "bytes of request headers (431)"),
    _own("http-max-url-length", "HTTP", _I, "bytes of a request URL (414)"),
    _own("http-max-headers", "HTTP", _I, "header lines per request (431)"),
    _own("http-max-pipelined", "HTTP", _I, "requests held per connection"),
    _own("http-header-timeout-secs", "HTTP", _F, "seconds to receive a request's headers"),
    _own("http-body-timeout-secs", "HTTP", _F, "longest pause while a body arrives"),
    _own("http-keepalive-timeout-secs", "HTTP", _F, "seconds an idle connection stays open"),
    _own("http-ssl-cert", "HTTP", _S, "PEM certificate: serve HTTPS"),
    _own("http-ssl-key", "HTTP", _S, "PEM private key of --http-ssl-cert"),
    _own("http-cors-allow-origin", "HTTP", "<scheme://host[:port]> or *",
         "CORS: an origin whose pages may call the API (repeatable); off without one"),
    _own("http-cors-allow-header", "HTTP", _S,
         "CORS: a request header pages may send, beyond the defaults (repeatable)"),
    _own("http-cors-max-age-secs", "HTTP", _I, "CORS: how long a preflight's answer is kept"),
    _own("http-cors-allow-credentials", "HTTP", _B,
         "CORS: pages may send cookies and HTTP authentication (not with origin *)"),
    _own("model-instance-max-restarts", "Backend", _I,
         "restarts of a crashed Python model instance within the window"),
    _own("model-instance-restart-window-secs", "Backend", _F,
         "the window of --model-instance-max-restarts"),
    _own("python-env-cache-dir", "Backend", _S, "where EXECUTION_ENV_PATH archives unpack"),
    _own("auth-token-file", "tritium", _S, "bearer tokens for HTTP and gRPC"),
    _own("audit-log", "tritium", _S, "control-plane actions and refusals, JSON lines"),
    _own("access-log-file", "Logging", _S, "one JSON line per inference request, off the path"),
    _own("access-log-max-bytes", "Logging", _I, "the access log rotates before this size"),
    _own("access-log-backup-count", "Logging", _I, "rotated access logs kept (FILE.1 ...)"),
    _own("max-inflight-per-client", "tritium", _I, "inference requests in flight per client"),
    _own("ports-file", "tritium", _S, "write the bound ports as JSON once serving"),
)

BY_NAME: dict[str, Flag] = {flag.name: flag for flag in FLAGS}
