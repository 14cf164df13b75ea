"""``tritium serve``: Triton's command-line flags, names and defaults."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from .. import TRITON_VERSION, __version__, describe_build
from ..logs.settings import LogSettings
from ..options import ServerOptions
from .flags.build import options_from_args
from .flags.convert import notices
from .flags.parser import add_flags, check_table_flags

log = logging.getLogger("tritium")

__all__ = ["build_parser", "main", "options_from_args"]


def build_parser() -> argparse.ArgumentParser:
    """Every flag of ``flags/table.py:FLAGS`` on ``tritium serve``."""
    parser = argparse.ArgumentParser(prog="tritium", description=__doc__)
    parser.add_argument(
        "--version",
        action="version",
        version=f"tritium {__version__} (Triton {TRITON_VERSION} protocols); {describe_build()}",
        help="print the version and which build runs (compiled modules or pure Python)",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser(
        "serve",
        help="serve model repositories (Triton's flags)",
        usage="tritium serve --model-repository <path> [flags] (see docs/flags.md)",
    )
    add_flags(serve)
    return parser


def _setup_logging(options: ServerOptions) -> None:
    """Install the process's log settings; a log file that cannot be opened stops the server
    here, before anything else happens (Triton would fall back to the console silently)."""
    given = options.logging
    settings = LogSettings(
        given.file, (given.info, given.warning, given.error), given.verbose, given.format
    )
    try:
        settings.install()
    except OSError as exc:
        raise SystemExit(
            f"error: --log-file: failed to open log file '{given.file}': {exc.strerror}"
        ) from None


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    options = options_from_args(args)
    _setup_logging(options)
    try:  # TRITIUM_LOOP_SPIN_US, read (and refused if it is no duration) at import
        from .. import loop_spin  # noqa: F401
    except ValueError as exc:
        raise SystemExit(f"error: {exc}") from None
    from ..workers.member import from_environment  # imported late: argument errors stay fast
    from ..access.policy import open_repository_warning

    member = from_environment()  # this process is one worker of a supervisor's
    if member is None:
        for notice in check_table_flags(args) + notices(args):
            log.log(notice.level, "%s", notice.message)
        explicit = options.repository.control_mode == "explicit"
        warning = open_repository_warning(
            options.access, explicit, options.http.enabled, options.grpc.enabled
        )
        if warning:
            log.warning("%s", warning)
    runner = _runner()
    if member is not None:
        from ..runtime import run

        return runner(run(member.worker_options(options), member))
    if options.workers > 1:
        from ..workers.supervisor import supervise

        return runner(supervise(options, sys.argv[1:] if argv is None else list(argv)))
    from ..runtime import run
    from ..workers.refusals import single_refusal

    problem = single_refusal(options)
    if problem:
        raise SystemExit(f"error: {problem}")
    return runner(run(options))


def _runner() -> Callable[[Coroutine[Any, Any, int]], int]:
    try:
        import uvloop

        return uvloop.run
    except ImportError:  # pragma: no cover - uvloop is a dependency
        return asyncio.run


if __name__ == "__main__":
    sys.exit(main())
