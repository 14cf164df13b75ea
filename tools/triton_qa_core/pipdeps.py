"""pipdeps.py SUITES_TXT QA_DIR: the packages the suites' test.sh files pip-install that the
client venv lacks, one requirement a line (setup.sh installs them from PyPI before any run).
pipdeps.py --later SUITES_TXT: the "SUITE REF" lines (suites taken from a later tree).

An installed distribution is kept whatever version test.sh pins (torch==1.13.0+cpu with -f a
wheel index: the client venv's CPU torch serves), a local path or a pip upgrade is skipped."""

import importlib.metadata
import os
import re
import shlex
import sys

PIP_LINE = re.compile(r"^\s*(?:python3?\s+-m\s+)?pip3?\s+install\s+(.*)$")
TAKES_ARG = {"-f", "--find-links", "-i", "--index-url", "--extra-index-url", "-c", "-r"}


def suites(path):
    for line in open(path):
        line = line.split("#", 1)[0].split()
        if line:
            yield line[0], (line[1] if len(line) > 1 else "")


def specs(test_sh):
    for line in open(test_sh, errors="replace"):
        m = PIP_LINE.match(line.rstrip().rstrip("\\").rstrip("&").rstrip())
        if not m:
            continue
        words, skip = shlex.split(m.group(1), comments=True), False
        for w in words:
            if skip:
                skip = False
            elif w in TAKES_ARG:
                skip = True
            elif not w.startswith("-") and not w.startswith(".") and not w.startswith("/"):
                yield w


def name_of(spec):
    return re.split(r"[\[<>=!~;]", spec, maxsplit=1)[0].strip()


def installed(name):
    try:
        importlib.metadata.version(name)
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


def main(argv):
    if argv[0] == "--later":
        for suite, ref in suites(argv[1]):
            if ref:
                print(suite, ref)
        return
    wanted = {}
    for suite, _ in suites(argv[0]):
        test_sh = os.path.join(argv[1], suite, "test.sh")
        if os.path.exists(test_sh):
            for spec in specs(test_sh):
                name = name_of(spec)
                if name.lower() not in ("pip", "wheel", "setuptools") and not installed(name):
                    wanted.setdefault(name.lower(), re.sub(r"\+[A-Za-z0-9.]+", "", spec))
    for spec in sorted(wanted.values()):
        print(spec)


if __name__ == "__main__":
    main(sys.argv[1:])
