import json
import os
def pytest_runtest_logreport(report):
    p = os.environ.get("QA23_RESULTS")
    if not p: return
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        o = {"passed": "pass", "failed": "fail", "skipped": "skip"}[report.outcome]
        if report.when == "setup" and o == "fail": o = "error"
        with open(p, "a") as f:
            f.write(json.dumps({"id": report.nodeid, "outcome": o, "pid": os.getpid(), "argv": "pytest", "cwd": os.getcwd(), "detail": str(report.longrepr)[-1500:] if report.failed else ""}) + "\n")


def pytest_collectreport(report):
    # a test file that fails at import (collection error) runs none of its cases: NOT RUN
    p = os.environ.get("QA23_RESULTS")
    if not p or not report.failed:
        return
    text = str(report.longrepr)
    if "ImportError" in text or "ModuleNotFoundError" in text:
        line = [x for x in text.splitlines() if "Error: " in x and "Import" in x or "ModuleNotFound" in x][-1:]
        with open(p, "a") as f:
            f.write(json.dumps({"id": os.path.basename(report.nodeid.split("::")[0]), "outcome": "notrun", "argv": "pytest", "cwd": os.getcwd(), "detail": (line[0] if line else text[-300:]).strip()}) + "\n")
