import json
import sys
import collections
import os
def load(side, suite):
    p = f"/tmp/qa23core/runs/{side}/{suite}/results.jsonl"
    res, seen = {}, collections.Counter()
    if not os.path.exists(p): return None
    for l in open(p):
        if not l.strip(): continue
        r = json.loads(l); seen[r["id"]] += 1
        res[(r["id"], seen[r["id"]])] = r
    return res
def main(suites):
  for s in suites:
      a, b = load("triton", s), load("tritium", s)
      if a is None or b is None: print(s, "missing"); continue
      keys = set(a) | set(b)
      ta = sum(1 for k in keys if a.get(k, {}).get("outcome") == "pass")
      tb = sum(1 for k in keys if b.get(k, {}).get("outcome") == "pass")
      both = sum(1 for k in keys if a.get(k, {}).get("outcome") == "pass" and b.get(k, {}).get("outcome") == "pass")
      print(f"{s}: cases={len(keys)} triton={ta} tritium={tb} both={both}")
      for k in sorted(keys):
          oa, ob = a.get(k, {}).get("outcome", "-"), b.get(k, {}).get("outcome", "-")
          if oa == "pass" and ob != "pass":
              print("  REGRESS", k, ob, "|", b.get(k, {}).get("detail", "")[-600:].replace("\n", " / "))
          elif ob == "pass" and oa != "pass":
              print("  only-tritium", k, oa)

if __name__ == "__main__":
    main(sys.argv[1:])
