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
        f.write(json.dumps({"id": tid, "outcome": outcome, "pid": os.getpid(), "argv": " ".join(sys.argv[:3]), "cwd": os.getcwd(), "detail": detail[-1500:]}) + "\n")
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
if _path:
    # a test file that fails at import runs none of its cases: recorded as NOT RUN (importcheck.py
    # also finds it in the client log), not as failures
    def _notrun(name, err):
        with open(_path, "a") as f:
            f.write(json.dumps({"id": name, "outcome": "notrun", "argv": " ".join(sys.argv[:3]), "cwd": os.getcwd(), "detail": (f"{type(err).__name__}: {err}".strip().splitlines() or [""])[-1]}) + "\n")
    _hook = sys.excepthook
    def _excepthook(etype, value, tb):
        if issubclass(etype, ImportError) and sys.argv and sys.argv[0].endswith(".py"):
            _notrun(os.path.basename(sys.argv[0]), value)
        return _hook(etype, value, tb)
    sys.excepthook = _excepthook
    def addError(self, test, err):  # noqa: F811  (unittest's loader: `python -m unittest MODULE`)
        tid = getattr(test, "id", lambda: "")()
        if tid.startswith("unittest.loader._FailedTest.") and issubclass(err[0], ImportError):
            _notrun(tid.rsplit(".", 1)[1] + ".py", err[1])
            return _e(self, test, err)
        _rec(test, "error", self._exc_info_to_string(err, test)); return _e(self, test, err)
    R.addError = addError
if not hasattr(unittest.TestCase, "_feedErrorsToResult"):
    # Python 3.11 removed these unittest internals (and reports a case's errors to the result
    # at once); v2.51's L0_model_update tearDown reads them to tell whether its case failed
    # (later trees read `self._outcome.result`). The shim gives it the same answer.
    def _feed(self, result, errors):
        done = self._outcome.result
        result.errors.extend(getattr(done, "errors", []))
        result.failures.extend(getattr(done, "failures", []))
    unittest.TestCase._feedErrorsToResult = _feed
    unittest.case._Outcome.errors = property(lambda self: [])
