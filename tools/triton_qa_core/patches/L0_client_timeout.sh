. /tmp/qa23core/patches/lib.sh
# the C++ identity backend (custom_identity_int32, execute_delay_ms 3000) -> the Python stand-in
py_identity models/custom_identity_int32
# the C++ client_timeout_test (../clients, not built here) runs first and its failure ends the
# script: its steps (not unittest cases) are cut, the server starts and the Python cases stay
python3 - <<'PY'
s = open("test.sh").read()
a, b = s.index("# Test all APIs apart from Infer."), s.index("# Test infer APIs")
s = s[:a] + s[b:]
a, b = s.index("# CASE 1:"), s.index("# CASE 3: Python Library")
s = s[:a] + "set +e\n" + s[b:]
open("test.sh", "w").write(s)
PY
