export BACKENDS=python
. /tmp/qa23core/patches/idsed.sh
# tritium refuses --backend-config for a backend it does not have (tensorflow here; Triton keeps
# it unused): the flag is left out of tritium's command line (docs/triton-differences.md)
[ "$side" = tritium ] && sed -i 's/ --backend-config=tensorflow,version=\${TF_VERSION}//' test.sh
true
