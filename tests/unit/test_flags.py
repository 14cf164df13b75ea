"""The flag table (tritium/cli/flags) against Triton's flag list and against the parser: every
``tritonserver`` flag has a decision, every decision is what the parser does."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import pytest

from tritium.cli.main import build_parser, options_from_args
from tritium.cli.flags import FLAGS, GROUPS, Decision, markdown
from tritium.cli.flags.backend_config import parse_backend_config
from tritium.cli.flags.parser import check_table_flags, option_default, parser_flags
from tritium.cli.flags.spec import Into
from tritium.cli.flags.table import BY_NAME
from tritium.options import ServerOptions

ROOT = Path(__file__).resolve().parents[2]

# The long flags of tritonserver --help: the option table of Triton's src/command_line_parser.cc
# (TritonParser::SetupOptions) at triton-inference-server/server commit
# e1db8a603d863b1317ee859bdeea2be19959462e (2026-08-19), "help" left out.
TRITON_FLAGS = """
id exit-timeout-secs model-store model-repository exit-on-error disable-auto-complete-config
strict-readiness model-control-mode repository-poll-secs load-model model-config-name
model-load-thread-count model-load-retry-count model-namespacing enable-peer-access allow-http
http-address http-port reuse-http-port http-header-forward-pattern http-thread-count
http-max-input-size http-restricted-api allow-grpc grpc-address grpc-port reuse-grpc-port
grpc-header-forward-pattern grpc-infer-thread-count grpc-infer-allocation-pool-size
grpc-max-response-pool-size grpc-use-ssl grpc-use-ssl-mutual grpc-server-cert grpc-server-key
grpc-root-cert grpc-infer-response-compression-level grpc-keepalive-time grpc-keepalive-timeout
grpc-keepalive-permit-without-calls grpc-http2-max-pings-without-data
grpc-http2-min-recv-ping-interval-without-data grpc-http2-max-ping-strikes
grpc-max-connection-age grpc-max-connection-age-grace grpc-restricted-protocol log-verbose
log-info log-warning log-error log-format log-file allow-sagemaker sagemaker-port
sagemaker-safe-port-range sagemaker-thread-count allow-vertex-ai vertex-ai-port
vertex-ai-thread-count vertex-ai-default-model allow-metrics allow-gpu-metrics
allow-cpu-metrics metrics-address metrics-port metrics-interval-ms metrics-config trace-config
cache-config cache-directory rate-limit rate-limit-resource pinned-memory-pool-byte-size
cuda-memory-pool-byte-size cuda-virtual-address-size min-supported-compute-capability
buffer-manager-thread-count host-policy model-load-gpu-limit allow-client-shm backend-directory
backend-config repoagent-directory strict-model-config response-cache-byte-size trace-file
trace-level trace-rate trace-count trace-log-frequency
""".split()

# Triton's groups (TritonParser::SetupOptionGroups), in order.
TRITON_GROUPS = [
    "Server", "Logging", "Model Repository", "HTTP", "GRPC", "Sagemaker", "Vertex", "Metrics",
    "Tracing", "Backend", "Repository Agent", "Response Cache", "Rate Limiter",
    "Memory/Device Management", "Shared Memory", "DEPRECATED",
]  # fmt: skip

# A valid value for each of Triton's value syntaxes.
SAMPLE = {
    "boolean": "true",
    "integer": "4",
    "float": "6.0",
    "string": "x",
    "<integer>:<integer>": "0:1024",
    "<integer>-<integer>": "8000-8100",
    "<device_id>:<fraction>": "0:0.5",
    "<string>,<string>=<string>": "a,b=c",
    "<string>=<string>": "a=b",
    "<string>:<integer>:<integer>": "R1:4:0",
    "<string>:<string>=<string>": "health:k=v",
}


def _parse(*flags: str):  # type: ignore[no-untyped-def]
    return build_parser().parse_args(["serve", "--model-repository", "r", *flags])


def test_every_triton_flag_has_one_decision() -> None:
    names = [f.name for f in FLAGS]
    assert len(names) == len(set(names))
    assert {f.name for f in FLAGS if f.triton} == set(TRITON_FLAGS)
    for flag in FLAGS:
        assert flag.reason, flag.name
        assert flag.group in GROUPS, flag.name
        assert (flag.decision is Decision.NOT_YET) == bool(flag.owner), flag.name


def test_groups_are_tritons_in_order() -> None:
    assert list(GROUPS[: len(TRITON_GROUPS)]) == TRITON_GROUPS


def test_every_parser_flag_is_in_the_table() -> None:
    parser_names = parser_flags(_serve_parser())
    assert parser_names == {f.name for f in FLAGS}


def _serve_parser():  # type: ignore[no-untyped-def]
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    return sub.choices["serve"]


def test_help_groups_flags_as_triton() -> None:
    text = _serve_parser().format_help()
    positions = [text.index(f"\n{group}:\n") for group in GROUPS if f"\n{group}:\n" in text]
    assert positions == sorted(positions) and len(positions) == len(GROUPS)
    model_repo = text.index("\nModel Repository:\n")
    assert model_repo < text.index("--model-config-name") < text.index("\nHTTP:\n")


@pytest.mark.parametrize("flag", [f for f in FLAGS if f.triton], ids=lambda f: f.name)
def test_every_triton_flag_parses(flag) -> None:  # type: ignore[no-untyped-def]
    """Each flag is known to the parser with Triton's value syntax: never 'unrecognized'."""
    value = SAMPLE.get(flag.value)
    if flag.value == "boolean" and flag.decision is not Decision.REFUSED:
        value = "false"  # true may need companions (--grpc-use-ssl needs a certificate)
    if flag.name == "backend-config":
        value = "default-max-batch-size=8"
    elif flag.name == "cache-config":
        value = "local,size=1024"
    elif flag.name == "model-control-mode":
        value = "explicit"
    elif flag.name == "log-format":
        value = "ISO8601"
    elif flag.name == "metrics-config":
        value = "summary_latencies=true"
    elif flag.name == "rate-limit":
        value = "execution_count"
    elif flag.name in ("trace-config", "trace-level"):
        value = "level=OFF" if flag.name == "trace-config" else "OFF"
    elif flag.name == "grpc-infer-response-compression-level":
        value = "low"
    elif flag.name == "http-restricted-api" or flag.name == "grpc-restricted-protocol":
        value = "health:k=v"
    args = _parse(f"--{flag.name}") if not flag.value else _parse(f"--{flag.name}={value}")
    if flag.decision is Decision.NOT_YET:
        with pytest.raises(SystemExit, match="not implemented yet in tritium"):
            options_from_args(args)
    elif flag.decision is Decision.REFUSED:
        with pytest.raises(SystemExit, match=flag.reason.split(" (")[0]):
            options_from_args(args)
    else:
        options_from_args(args)


def test_gpu_only_flags_log_one_warning() -> None:
    args = _parse("--cuda-memory-pool-byte-size=0:1024", "--allow-gpu-metrics=true")
    notices = check_table_flags(args)
    assert [n.level for n in notices] == [logging.WARNING, logging.WARNING]
    assert all("no effect without a GPU" in n.message for n in notices)


def test_tuning_flags_log_at_verbose_level() -> None:
    notices = check_table_flags(_parse("--http-thread-count=16", "--buffer-manager-thread-count=2"))
    assert [n.level for n in notices] == [logging.DEBUG, logging.DEBUG]
    assert "event loop" in notices[0].message


def test_tritons_checks_of_tuning_flags() -> None:
    with pytest.raises(SystemExit, match="range 2 to 128"):
        options_from_args(_parse("--grpc-infer-thread-count=1"))
    with pytest.raises(SystemExit, match="greater than 0"):
        options_from_args(_parse("--grpc-max-response-pool-size=0"))
    with pytest.raises(SystemExit):
        _parse("--cuda-memory-pool-byte-size=1024")  # Triton's <integer>:<integer>


def test_cloud_front_ends_are_refused_only_when_enabled() -> None:
    options_from_args(_parse("--allow-sagemaker=false", "--allow-vertex-ai=false"))
    with pytest.raises(SystemExit, match="tritium has no SageMaker front-end"):
        options_from_args(_parse("--allow-sagemaker=true"))
    with pytest.raises(SystemExit, match="tritium has no Vertex AI front-end"):
        options_from_args(_parse("--allow-vertex-ai"))
    with pytest.raises(SystemExit, match="tritium has no SageMaker front-end"):
        options_from_args(_parse("--sagemaker-port=8080"))


def test_model_namespacing_reaches_the_options() -> None:
    assert not options_from_args(_parse("--model-namespacing=false")).repository.namespacing
    assert not options_from_args(_parse()).repository.namespacing
    assert options_from_args(_parse("--model-namespacing=true")).repository.namespacing
    assert options_from_args(_parse("--model-namespacing")).repository.namespacing


def test_implemented_flags_reach_the_options() -> None:
    options = options_from_args(
        _parse(
            "--model-config-name=h100",
            "--model-load-retry-count=2",
            "--reuse-http-port=true",
            "--http-header-forward-pattern=x-.*",
            "--allow-cpu-metrics=false",
            "--backend-config=onnxruntime,default-max-batch-size=16",
        )
    )
    assert options.repository.config_name == "h100" and options.repository.load_retry_count == 2
    assert options.http.reuse_port
    assert options.http.header_forward_pattern == "x-.*"
    assert not options.metrics.allow_cpu
    assert options.backends.onnxruntime_default_max_batch_size == 16


def test_model_config_name_must_be_a_name() -> None:
    for bad in ("", "../x", "a b"):
        with pytest.raises(SystemExit):
            _parse(f"--model-config-name={bad}")


def test_response_cache_byte_size_is_the_local_cache() -> None:
    assert options_from_args(_parse("--response-cache-byte-size=4096")).response_cache_size == 4096
    with pytest.raises(SystemExit, match="Incompatible flags"):
        options_from_args(_parse("--response-cache-byte-size=1", "--cache-config=local,size=2"))


def test_backend_config_settings() -> None:
    settings, notes = parse_backend_config(
        ["default-max-batch-size=8", "python,shm-default-byte-size=1048576"]
    )
    assert settings.onnxruntime_max_batch_size == 8
    assert len(notes) == 1 and "no pool to size" in notes[0]
    settings, _ = parse_backend_config(
        ["onnxruntime,default-max-batch-size=2", "default-max-batch-size=8"]
    )
    assert settings.onnxruntime_max_batch_size == 2  # the backend's own wins
    with pytest.raises(ValueError, match="does not honour the setting 'enable-global-thread"):
        parse_backend_config(["onnxruntime,enable-global-threadpool=1"])
    with pytest.raises(ValueError, match="no settings for backend 'tensorflow'"):
        parse_backend_config(["tensorflow,version=2"])
    with pytest.raises(ValueError, match="No backend specified"):
        parse_backend_config([",a=b"])
    with pytest.raises(ValueError, match="option format"):
        parse_backend_config(["python,shm-default-byte-size"])


def test_docs_flags_md_is_the_table() -> None:
    page = (ROOT / "docs" / "flags.md").read_text(encoding="utf-8")
    assert page == markdown(), "docs/flags.md is stale: python -m tritium.cli.flags > docs/flags.md"


def test_built_in_directory_flags_log_one_warning_each() -> None:
    """Triton's QA command lines pass --backend-directory and --repoagent-directory: tritium
    starts, saying its backends are built in and the directories are not read."""
    args = _parse("--backend-directory=/opt/b", "--repoagent-directory=/opt/r")
    notices = check_table_flags(args)
    assert [n.level for n in notices] == [logging.WARNING, logging.WARNING]
    assert notices[0].message.startswith("--backend-directory=/opt/b: ")
    assert "(ensemble, onnxruntime, openvino, python, pytorch) are built in" in notices[0].message
    assert notices[1].message.startswith("--repoagent-directory=/opt/r: ")
    assert all("not read" in n.message for n in notices)


def test_every_implemented_flag_has_a_parser_and_a_target_field() -> None:
    """One definition per flag: an implemented one says how it parses and where its value
    goes; a target path names a field of ServerOptions (defaults come from there)."""
    for flag in FLAGS:
        if flag.decision is not Decision.IMPLEMENTED or flag.alias_of:
            assert flag.arg is None and flag.to is None, flag.name
            continue
        assert flag.arg is not None and flag.to is not None, flag.name
        if isinstance(flag.to, (str, Into)):
            option_default(flag.to if isinstance(flag.to, str) else flag.to.path)
    assert BY_NAME["model-store"].alias_of == "model-repository"


def test_defaults_of_the_parser_are_the_options_defaults() -> None:
    """A flag whose value goes to a field as given defaults to that field's default."""
    defaults = ServerOptions()
    options = options_from_args(_parse())
    assert replace(options, repository=defaults.repository) == defaults
    assert options.repository == replace(defaults.repository, paths=(Path("r"),))


@pytest.mark.parametrize("given", ["POLL", "Explicit", "none"])
def test_model_control_mode_is_case_insensitive(given: str) -> None:
    # Triton lowercases the value (qa/L0_model_namespacing passes --model-control-mode=POLL).
    options = options_from_args(_parse(f"--model-control-mode={given}"))
    assert options.repository.control_mode == given.lower()


def test_compression_level_is_case_insensitive() -> None:
    options = options_from_args(_parse("--grpc-infer-response-compression-level=HIGH"))
    assert options.grpc.infer_response_compression_level == "high"
    with pytest.raises(SystemExit):
        _parse("--model-control-mode=sometimes")
