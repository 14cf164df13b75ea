#!/usr/bin/env bash
# batch.sh [-s side] SUITE...: runs each on both sides (in parallel), then compares
sides="triton tritium"; if [ "$1" = -s ]; then sides=$2; shift 2; fi
for s in "$@"; do
  for side in $sides; do /tmp/qa23core/run_suite.sh $s $side ${TO:-1200} & done; wait
  python3 /tmp/qa23core/compare.py $s
done
