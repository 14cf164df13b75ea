"""The ``tritium`` command's first step, taken before the server's modules are imported (they
take seconds on a loaded machine): ``serve``'s ``--log-file`` is created at once, as Triton's is
within moments of its start, so that whoever waits for the file (a log shipper, Triton's
qa/L0_logging, which gives it 5 s) sees it while the rest loads. A file that cannot be created
here is left to ``main._setup_logging``, which stops the server with the reason; a command line
refused later leaves the (empty) file created."""

from __future__ import annotations

import sys

_FLAG = "--log-file"


def log_file_argument(argv: list[str]) -> str | None:
    """The ``--log-file`` value of ``serve``'s arguments (``--log-file=P`` or ``--log-file P``;
    the last one wins, as argparse's), None when there is none or it is empty."""
    found: str | None = None
    for i, arg in enumerate(argv):
        if arg == "--":
            break
        if arg.startswith(_FLAG + "="):
            found = arg[len(_FLAG) + 1 :]
        elif arg == _FLAG and i + 1 < len(argv):
            found = argv[i + 1]
    return found or None


def create_log_file(argv: list[str]) -> None:
    """Create (append to nothing) the log file ``argv`` names, if it can be."""
    path = log_file_argument(argv)
    if path is None:
        return
    try:
        open(path, "a", encoding="utf-8").close()  # noqa: SIM115
    except OSError:  # _setup_logging reports it
        pass


def main(argv: list[str] | None = None) -> int:
    """``tritium``: the log file first, then the command (``main.main``)."""
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["serve"]:
        create_log_file(args[1:])
    from .main import main as run

    return run(argv)
