# a server that already exited (e.g. tritium on a missing --model-repository with
# --exit-on-error=false, where Triton keeps running) makes test.sh's `kill $SERVER_PID` fail
# and, under `set -e`, ends the whole suite: here it only fails its own case
sed -i -e 's/^\(\s*\)kill \$SERVER_PID$/\1kill $SERVER_PID || true/' \
  -e 's/^\(\s*\)wait \$SERVER_PID$/\1wait $SERVER_PID || true/' test.sh
