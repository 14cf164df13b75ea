# Records every unittest case outcome to $QA23_RESULTS (one JSON line per case).
import json
import os
import sys
import unittest
_path = os.environ.get("QA23_RESULTS")
def _rec(test, outcome, detail=""):
    if not _path:
        return
    try:
        tid = test.id()
    except Exception:
        tid = str(test)
    with open(_path, "a") as f:
        f.write(json.dumps({"id": tid, "outcome": outcome, "argv": " ".join(sys.argv[:3]), "cwd": os.getcwd(), "detail": detail[-1500:]}) + "\n")
if _path:
    R = unittest.TestResult
    _s, _f, _e, _k, _x, _u = R.addSuccess, R.addFailure, R.addError, R.addSkip, R.addExpectedFailure, R.addUnexpectedSuccess
    def addSuccess(self, test): _rec(test, "pass"); return _s(self, test)
    def addFailure(self, test, err): _rec(test, "fail", self._exc_info_to_string(err, test)); return _f(self, test, err)
    def addError(self, test, err): _rec(test, "error", self._exc_info_to_string(err, test)); return _e(self, test, err)
    def addSkip(self, test, reason): _rec(test, "skip", reason); return _k(self, test, reason)
    def addExpectedFailure(self, test, err): _rec(test, "pass"); return _x(self, test, err)
    def addUnexpectedSuccess(self, test): _rec(test, "fail"); return _u(self, test)
    R.addSuccess, R.addFailure, R.addError, R.addSkip, R.addExpectedFailure, R.addUnexpectedSuccess = addSuccess, addFailure, addError, addSkip, addExpectedFailure, addUnexpectedSuccess
if os.environ.get("QA23_NUMPY_COMPAT"):
    # NumPy 1 names some QA clients use (np.NINF...), removed in NumPy 2
    import numpy as _np
    for _k, _v in (("NINF", -_np.inf), ("PINF", _np.inf), ("NZERO", -0.0), ("PZERO", 0.0)):
        if not hasattr(_np, _k) or True:
            try:
                setattr(_np, _k, _v)
            except Exception:
                pass
