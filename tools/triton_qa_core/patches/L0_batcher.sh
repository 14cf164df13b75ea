export BACKENDS=python
. /tmp/qa23core/patches/idsed.sh
