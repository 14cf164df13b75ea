. /tmp/qa23core/patches/lib.sh; py_identity models/identity_2_float32
