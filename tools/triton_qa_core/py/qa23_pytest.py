import json
import os
def pytest_runtest_logreport(report):
    p = os.environ.get("QA23_RESULTS")
    if not p: return
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        o = {"passed": "pass", "failed": "fail", "skipped": "skip"}[report.outcome]
        if report.when == "setup" and o == "fail": o = "error"
        with open(p, "a") as f:
            f.write(json.dumps({"id": report.nodeid, "outcome": o, "argv": "pytest", "cwd": os.getcwd(), "detail": str(report.longrepr)[-1500:] if report.failed else ""}) + "\n")
