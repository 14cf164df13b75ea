. /tmp/qa23core/patches/lib.sh
mkdir -p model_repository/identity/1; py_identity model_repository/identity
