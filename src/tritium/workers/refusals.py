"""The worker flags given without workers: refused at start with the reason, never
accepted and ignored. (Every other option keeps its whole-server meaning with ``--workers N``:
see docs/architecture.md §7.)"""

from __future__ import annotations

from ..options import ServerOptions


def single_refusal(options: ServerOptions) -> str:
    """Why these options ask for workers that ``--workers 1`` does not start ('' if not)."""
    default = ServerOptions()
    changed = [
        flag
        for flag, given, usual in (
            ("--worker-sockets", options.worker_sockets, default.worker_sockets),
            ("--worker-affinity", options.worker_affinity, default.worker_affinity),
            (
                "--worker-heartbeat-secs",
                options.worker_heartbeat_secs,
                default.worker_heartbeat_secs,
            ),
        )
        if given != usual
    ]
    if changed:
        return f"{' and '.join(changed)} only apply with --workers > 1"
    return ""
