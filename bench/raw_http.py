"""Minimal HTTP/1.1 on raw sockets, for the hostile clients (the hostile-http and soak suites):
a client library would refuse to send what they send, or would read the answer for them.
Also the ``simple`` JSON inference and the "serves after" check the two scripts end with."""

from __future__ import annotations

import json
import socket
import threading
import time
import zlib
from collections.abc import Iterable
from typing import Any

HOST = "127.0.0.1"
MODEL = "simple"
INFER_PATH = f"/v2/models/{MODEL}/infer"
MIB = 1 << 20
AFTER_TIMEOUT_S = 10.0


class ResponseReader:
    """Reads consecutive HTTP/1.1 responses (status line, headers, Content-Length body) from
    one socket until a deadline; ``None`` for a response that did not come."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.buf, self.eof = sock, b"", False

    def _fill(self, deadline: float) -> bool:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or self.eof:
            return False
        self.sock.settimeout(min(remaining, 0.25))
        try:
            chunk = self.sock.recv(1 << 16)
        except TimeoutError:
            return True
        except OSError:
            chunk = b""
        self.eof = not chunk
        self.buf += chunk
        return bool(chunk)

    def read(self, deadline: float) -> tuple[int, bytes] | None:
        while b"\r\n\r\n" not in self.buf:
            if not self._fill(deadline) and (self.eof or time.monotonic() >= deadline):
                return None
        head, _, rest = self.buf.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        status = int(lines[0].split()[1])
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(rest) < length:
            if not self._fill(deadline) and (self.eof or time.monotonic() >= deadline):
                return None
            rest = self.buf.partition(b"\r\n\r\n")[2]
        self.buf = rest[length:]
        return status, rest[:length]


def request_head(method: str, path: str, headers: dict[str, Any] | None = None) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: {HOST}"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def http_call(port: int, payload: bytes, timeout: float) -> tuple[int, bytes] | None:
    """One request on a new connection; the answer, or None (refused, closed, timed out)."""
    deadline = time.monotonic() + timeout
    try:
        with socket.create_connection((HOST, port), timeout=timeout) as sock:
            sock.sendall(payload)
            return ResponseReader(sock).read(deadline)
    except (OSError, ValueError, IndexError):
        return None


def http_status(port: int, path: str, timeout: float = 2.0) -> int | None:
    answer = http_call(port, request_head("GET", path, {"Connection": "close"}), timeout)
    return answer[0] if answer else None


def exchange(port: int, chunks: Iterable[bytes], deadline: float, responses: int = 1) -> dict:
    """Send ``chunks`` on one connection (a thread: the server may stop reading) while reading
    up to ``responses`` answers until ``deadline``."""
    started = time.monotonic()
    sock = socket.create_connection((HOST, port), timeout=5)
    sent: dict[str, Any] = {"bytes": 0, "error": None}

    def send() -> None:
        try:
            for chunk in chunks:
                view = memoryview(chunk)
                for start in range(0, len(view), MIB):  # pieces: sent_mib says how far it got
                    sock.settimeout(max(0.1, deadline - time.monotonic()))
                    sock.sendall(view[start : start + MIB])
                    sent["bytes"] += min(MIB, len(view) - start)
        except OSError as exc:
            sent["error"] = type(exc).__name__

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    reader, statuses, first = ResponseReader(sock), [], None
    try:
        while len(statuses) < responses:
            answer = reader.read(deadline)
            if answer is None:
                break
            statuses.append(answer[0])
            first = first or round(time.monotonic() - started, 2)
    finally:
        try:
            sock.shutdown(socket.SHUT_RDWR)  # wakes the sender if it is blocked in send()
        except OSError:
            pass
        sender.join(5)
        sock.close()
    return {
        "expected": responses,
        "statuses": statuses,
        "first_answer_s": first,
        "closed_by_server": reader.eof,
        "sent_mib": round(sent["bytes"] / MIB, 1),
        "send_error": sent["error"],
    }


_BOMBS: dict[str, bytes] = {}


def bomb_body(encoding: str, inflated_mib: int) -> bytes:
    """``inflated_mib`` MiB of zeros, gzip (wbits 31) or zlib-wrapped deflate (wbits 15);
    built once per process (seconds of CPU: callers build it before the server or the load)."""
    key = f"{encoding}/{inflated_mib}"
    if key not in _BOMBS:
        packer = zlib.compressobj(9, zlib.DEFLATED, 31 if encoding == "gzip" else 15)
        zeros = bytes(16 * MIB)
        parts = [packer.compress(zeros) for _ in range(inflated_mib // 16)]
        _BOMBS[key] = b"".join(parts) + packer.flush()
    return _BOMBS[key]


# ---------------------------------------------------------------------------------------------
# The ``simple`` inference as JSON, and the check both scripts end with
# ---------------------------------------------------------------------------------------------
INPUT0 = list(range(16))
INPUT1 = [3] * 16


def infer_json(pad_to: int = 0) -> bytes:
    """A valid ``simple`` JSON inference body, padded with spaces (valid JSON) to ``pad_to``."""
    tensors = [
        {"name": name, "shape": [1, 16], "datatype": "INT32", "data": data}
        for name, data in (("INPUT0", INPUT0), ("INPUT1", INPUT1))
    ]
    body = json.dumps({"inputs": tensors}).encode()
    return body + b" " * max(0, pad_to - len(body))


def infer_request(body: bytes, headers: dict[str, Any] | None = None) -> bytes:
    base = {"Content-Type": "application/json", "Content-Length": len(body)}
    return request_head("POST", INFER_PATH, {**base, **(headers or {})}) + body


def serves_after(port: int) -> str:
    """``yes`` when ready and a ``simple`` inference answers correctly within 10 s."""
    deadline = time.monotonic() + AFTER_TIMEOUT_S
    while time.monotonic() < deadline:
        if http_status(port, "/v2/health/ready") == 200:
            break
        time.sleep(0.1)
    else:
        return "no: /v2/health/ready unanswered for 10 s"
    answer = http_call(port, infer_request(infer_json(), {"Connection": "close"}), 10.0)
    if answer is None or answer[0] != 200:
        return f"no: inference answered {answer[0] if answer else 'nothing'}"
    outputs = {o["name"]: o["data"] for o in json.loads(answer[1])["outputs"]}
    if outputs.get("OUTPUT0") != [a + b for a, b in zip(INPUT0, INPUT1, strict=True)]:
        return "no: wrong OUTPUT0"
    return "yes"
