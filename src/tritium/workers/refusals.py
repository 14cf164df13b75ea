"""What ``--workers N`` (N > 1) cannot give its whole-server meaning yet: refused at start
with the reason, never accepted and ignored."""

from __future__ import annotations

from ..options import ServerOptions
from ..tracing.settings import TraceMode


def refusal(options: ServerOptions) -> str:
    """Why these options cannot run as several workers ('' when they can)."""
    if options.rate_limit.mode == "execution_count":
        return (
            "--rate-limit=execution_count: the rate limiter's resources are per process; "
            "several workers would each grant them (not implemented yet)"
        )
    if options.logging.access_log_file and options.logging.access_log_max_bytes > 0:
        return (
            "--access-log-file with rotation: every worker appends to the one file and would "
            "rotate it on its own; give --access-log-max-bytes 0 (rotate it from outside)"
        )
    values = options.tracing.values
    if values.file and values.mode is TraceMode.TRITON:
        return (
            "--trace-config triton,file=...: every worker would write its own JSON array over "
            "the same file (use the opentelemetry mode, exported by every worker)"
        )
    return ""


def single_refusal(options: ServerOptions) -> str:
    """Why these options ask for workers that ``--workers 1`` does not start ('' if not)."""
    default = ServerOptions()
    changed = [
        flag
        for flag, given, usual in (
            ("--worker-sockets", options.worker_sockets, default.worker_sockets),
            ("--worker-heartbeat-secs", options.worker_heartbeat_secs,
             default.worker_heartbeat_secs),
        )
        if given != usual
    ]
    if changed:
        return f"{' and '.join(changed)} only apply with --workers > 1"
    return ""
