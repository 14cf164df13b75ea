"""compare.py SUITE...: per suite, the cases, Triton's and tritium's passes, and each case
Triton passes that tritium does not (with the end of tritium's failure text).

Records with outcome "notrun" (a test file that failed at import: importcheck.py,
sitecustomize, qa23_pytest) and "timeout" (the suite hit run_suite.sh's limit) are not cases."""

import collections
import json
import os
import sys

META = ("notrun", "timeout")


def load(side, suite):
    """{(case id, nth run of it): record}. One run of a case is one process's records of it
    (unittest reports a failed case and then its tearDown's error: one case, not passed);
    a record without a pid (older recorders) is a run of its own."""
    p = f"/tmp/qa23core/runs/{side}/{suite}/results.jsonl"
    res, seen, last = {}, collections.Counter(), {}
    if not os.path.exists(p):
        return None
    for line in open(p):
        if not line.strip():
            continue
        r = json.loads(line)
        if r["outcome"] in META:
            res[(r["outcome"], r["id"])] = r
            continue
        run = r.get("pid")
        if not (run is not None and last.get(r["id"]) == run and seen[r["id"]]):
            seen[r["id"]] += 1
        key = (r["id"], seen[r["id"]])
        if key not in res or res[key]["outcome"] == "pass":
            res[key] = r
        last[r["id"]] = run
    return res


def meta(res, kind):
    """{id: detail} of the records of this kind ("notrun" or "timeout")."""
    return {k[1]: r.get("detail", "") for k, r in (res or {}).items() if k[0] == kind}


def outcome(res, key):
    return res.get(key, {}).get("outcome", "-")


def counts(a, b):
    keys = {k for k in set(a) | set(b) if k[0] not in META}
    ta = sum(1 for k in keys if a.get(k, {}).get("outcome") == "pass")
    tb = sum(1 for k in keys if b.get(k, {}).get("outcome") == "pass")
    both = sum(1 for k in keys if outcome(a, k) == outcome(b, k) == "pass")
    return keys, ta, tb, both


def main(suites):
    for s in suites:
        a, b = load("triton", s), load("tritium", s)
        if a is None or b is None:
            print(s, "missing")
            continue
        keys, ta, tb, both = counts(a, b)
        print(f"{s}: cases={len(keys)} triton={ta} tritium={tb} both={both}")
        for side, res in (("triton", a), ("tritium", b)):
            for f, why in sorted(meta(res, "notrun").items()):
                print(f"  NOT RUN on {side}: {f} ({why})")
            for _, why in meta(res, "timeout").items():
                print(f"  DID NOT FINISH on {side}: {why}")
        for k in sorted(keys):
            oa, ob = outcome(a, k), outcome(b, k)
            if oa == "pass" and ob != "pass":
                why = b.get(k, {}).get("detail", "")[-600:].replace("\n", " / ")
                print("  REGRESS", k, ob, "|", why)
            elif ob == "pass" and oa != "pass":
                print("  only-tritium", k, oa)


if __name__ == "__main__":
    main(sys.argv[1:])
