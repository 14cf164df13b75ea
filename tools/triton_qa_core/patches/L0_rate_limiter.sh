# no GPU here: the instance groups test.sh appends (`kind: KIND_GPU count: 1`, with rate-limiter
# resources) run on the CPU, on both sides (its sequence-batching step already maps GPU to CPU)
sed -i 's/echo "kind: KIND_GPU count: 1"/echo "kind: KIND_CPU count: 1"/' test.sh
