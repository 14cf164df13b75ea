"""importcheck.py RUN_DIR: one "notrun" record (JSON line) per test file whose run failed at
import (ImportError/ModuleNotFoundError before any case), found in the run's client logs and
test.out, unless the recorder (sitecustomize/qa23_pytest) already wrote one for that file."""

import json
import os
import re
import sys

# a traceback through a test file, ending in an import error
FRAME = re.compile(r'File "([^"]*?([\w.-]+_test\.py|test_[\w.-]+\.py))", line \d+, in <module>')
ERROR = re.compile(r"^(ModuleNotFoundError|ImportError): (.*)$", re.M)


def scan(text):
    found = {}
    for block in re.split(r"Traceback \(most recent call last\):", text)[1:]:
        end = ERROR.search(block)
        frames = FRAME.findall(block[: end.start()] if end else "")
        if end and frames:
            found[frames[0][1]] = f"{end.group(1)}: {end.group(2)}"
    return found


def recorded(run_dir):
    """The files the recorders already reported as not run."""
    results = os.path.join(run_dir, "results.jsonl")
    done = set()
    if os.path.exists(results):
        for line in open(results):
            if line.strip():
                r = json.loads(line)
                if r["outcome"] == "notrun":
                    done.add(r["id"])
    return done


def main(run_dir):
    done = recorded(run_dir)
    found = {}
    for root, _dirs, files in os.walk(os.path.join(run_dir, "qa")):
        for f in files:
            if f.endswith((".log", ".out", ".txt")) or f == "test.out":
                try:
                    text = open(os.path.join(root, f), errors="replace").read(4_000_000)
                except OSError:
                    continue
                if "Error: " in text:
                    found.update(scan(text))
    test_out = os.path.join(run_dir, "test.out")
    if os.path.exists(test_out):
        found.update(scan(open(test_out, errors="replace").read()))
    for name, why in sorted(found.items()):
        if name not in done:
            print(json.dumps({"id": name, "outcome": "notrun", "detail": why}))


if __name__ == "__main__":
    main(sys.argv[1])
