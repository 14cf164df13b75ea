"""The victims of bench/grpc_floods.py (issue 22, findings 1 and 2), and the floods, which
live with the tests (testkit/h2_floods.py: hostile HTTP/2 clients of the gRPC port on raw
sockets). A victim is a thread that repeats one request on its own connection (HTTP
``simple`` infer, gRPC ServerLive) with a generous timeout and records each latency; ``flood``
summarises what the flooding connections saw."""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

from bench.raw_http import HOST, http_call, infer_json, infer_request
from testkit.h2_floods import FLOODS, repeat  # noqa: F401 - FLOODS: grpc_floods.py's

VICTIM_TIMEOUT_S = 60.0


def flood(name: str, port: int, deadline: float) -> dict[str, Any]:
    """``name`` on new connections until ``deadline``; what they saw, summed up."""
    seen = repeat(name, port, deadline)
    goaways = Counter(
        f"{s['goaway']['code']} {s['goaway']['debug']}".strip() for s in seen if s["goaway"]
    )
    summary: dict[str, Any] = {
        "connections": len(seen),
        "ended_by_server": sum(bool(s["closed_by_server"]) for s in seen),
        "goaways": dict(goaways),
        "sent_mib": round(sum(s.get("sent_mib", 0.0) for s in seen), 1),
        "stalled_s": round(sum(s.get("stalled_s", 0.0) for s in seen), 1),
    }
    if name == "empty_messages":
        summary["messages"] = sum(s["messages"] for s in seen)
        summary["answers"] = sum(s["answers"] for s in seen)
    return summary


# -- the victims -----------------------------------------------------------------------------
class Victim(threading.Thread):
    """Repeats one request every ~50 ms until stopped; latencies of the answered ones."""

    def __init__(self, name: str, port: int) -> None:
        super().__init__(daemon=True)
        self.name, self.port = name, port
        self.stop_event = threading.Event()
        self.latencies: list[float] = []
        self.failures = 0

    def run(self) -> None:
        call = self._http() if self.name == "http_infer" else self._grpc()
        while not self.stop_event.is_set():
            start = time.monotonic()
            ok = call()
            if ok:
                self.latencies.append(time.monotonic() - start)
            else:
                self.failures += 1
            self.stop_event.wait(0.05)

    def _http(self) -> Any:
        payload = infer_request(infer_json(), {"Connection": "close"})

        def call() -> bool:
            answer = http_call(self.port, payload, VICTIM_TIMEOUT_S)
            return answer is not None and answer[0] == 200

        return call

    def _grpc(self) -> Any:
        import tritonclient.grpc as grpcclient

        client = grpcclient.InferenceServerClient(f"{HOST}:{self.port}")

        def call() -> bool:
            try:
                return bool(client.is_server_live(client_timeout=VICTIM_TIMEOUT_S))
            except Exception:  # noqa: BLE001 - a failed request is a result
                return False

        return call

    def summary(self) -> dict[str, Any]:
        ms = sorted(x * 1000 for x in self.latencies)

        def pct(p: float) -> float | None:
            return round(ms[min(len(ms) - 1, int(p * len(ms)))], 1) if ms else None

        return {"answered": len(ms), "failed": self.failures, "p50_ms": pct(0.5),
                "p99_ms": pct(0.99), "max_ms": round(ms[-1], 1) if ms else None}  # fmt: skip
