# no GPU here: the instance groups test.sh writes (KIND_GPU, with rate-limiter resources) run on
# the CPU, on both sides
sed -i 's/KIND_GPU/KIND_CPU/g' test.sh
