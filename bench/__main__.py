"""``python -m bench <suite> [flags]``: the one entry point of the bench (run it from the
repository root). ``python -m bench --list`` lists the suites (bench/suites.py), ``python -m
bench <suite> -h`` gives a suite's flags. Results: ``bench/results/<suite>.md``."""

from __future__ import annotations

import argparse
import importlib
import sys

from bench.suites import BY_NAME, DEFAULT, SUITES


def _listing() -> str:
    width = max(len(s.name) for s in SUITES)
    lines = [f"  {s.name:<{width}}  {s.summary}" for s in SUITES]
    return "suites (* in `make bench`):\n" + "\n".join(
        line.replace("  ", "* ", 1) if s.name in DEFAULT else line
        for s, line in zip(SUITES, lines, strict=True)
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="The one entry point of tritium's benchmarks (run from the repository root).",
        epilog=_listing(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--list", action="store_true", help="list the suites and exit")
    parser.add_argument("suite", nargs="?", choices=sorted(BY_NAME), metavar="suite")
    args, rest = parser.parse_known_args(argv[:1])
    if args.list or args.suite is None:
        print(_listing())
        return 0 if args.list else 2
    suite = BY_NAME[args.suite]
    # argparse's prog in the suite's -h, and the command line its report quotes
    sys.argv[:] = [f"python -m bench {suite.name}", *rest, *argv[1:]]
    run = importlib.import_module(suite.module).main
    return int(run([*suite.args, *rest, *argv[1:]]) or 0)


if __name__ == "__main__":
    sys.exit(main())
