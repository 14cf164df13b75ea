"""The hostile clients, on raw sockets (bench/raw_http.py): the cases of the hostile-http suite
(``cases``: one per fresh server, each ``run(port, deadline) -> what it saw``) and the hostile
requests the soak suite mixes into its load (``hostile_kinds``: ``run(port, count) ->
outcome``). The two share the bomb and the oversized header."""

from __future__ import annotations

import functools
import json
import selectors
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from bench.raw_http import (
    HOST,
    INFER_PATH,
    MIB,
    ResponseReader,
    bomb_body,
    exchange,
    http_call,
    infer_json,
    infer_request,
    request_head,
)

SERVER_NOFILE = 1024
PIPELINED, PIPELINED_MIB = 24, 32
IDLE_CONNECTIONS = 1000
SOAK_TIMEOUT_S = 30.0  # how long a soak's hostile request waits for its answer
SHM_KEYS = ("/../../etc/passwd", "../../../../etc/passwd")


# ---------------------------------------------------------------------------------------------
# Shared by both scripts
# ---------------------------------------------------------------------------------------------
def bomb_exchange(port: int, deadline: float, encoding: str, inflated_mib: int) -> dict:
    """A ``simple`` infer whose ``encoding`` body inflates to ``inflated_mib`` MiB of zeros."""
    body = bomb_body(encoding, inflated_mib)  # built before the server / the load
    payload = infer_request(body, {"Content-Encoding": encoding})
    return {"body_mib": round(len(body) / MIB, 2), **exchange(port, [payload], deadline)}


def header_exchange(port: int, deadline: float, pad: int) -> dict:
    """``GET /v2/health/ready`` with one header of ``pad`` bytes."""
    head = request_head("GET", "/v2/health/ready")[:-2]  # without the blank line
    return exchange(port, [head, b"X-Pad: ", b"a" * pad, b"\r\n\r\n"], deadline)


# ---------------------------------------------------------------------------------------------
# the hostile-http suite: one case per fresh server
# ---------------------------------------------------------------------------------------------
def header_block_case(port: int, deadline: float) -> dict:
    return header_exchange(port, deadline, 64 * MIB)


def many_headers_case(port: int, deadline: float) -> dict:
    head = request_head("GET", "/v2/health/ready")[:-2]
    many = b"".join(b"X-H%d: 1\r\n" % i for i in range(100_000))
    return exchange(port, [head, many, b"\r\n"], deadline)


def long_url_case(port: int, deadline: float) -> dict:
    path = "/v2/health/ready?pad=" + "a" * (8 * MIB)
    return exchange(port, [request_head("GET", path)], deadline)


def pipelined_case(port: int, deadline: float) -> dict:
    body = infer_json(PIPELINED_MIB * MIB)
    head = request_head("POST", INFER_PATH, {"Content-Length": len(body)})

    def chunks() -> Iterator[bytes]:
        for _ in range(PIPELINED):
            yield head
            yield body

    return exchange(port, chunks(), deadline, responses=PIPELINED)


def slow_body_case(port: int, deadline: float) -> dict:
    """Content-Length says 1 MiB, 1 KiB comes, then nothing (the client keeps the socket)."""
    head = request_head("POST", INFER_PATH, {"Content-Length": MIB})
    return exchange(port, [head, b" " * 1024], deadline)


def idle_connections_case(port: int, deadline: float) -> dict:
    """1,000 connections that send nothing, held until the deadline; how many the server
    closed meanwhile, and how many could not even connect."""
    socks, refused = [], 0
    for _ in range(IDLE_CONNECTIONS):
        if time.monotonic() >= deadline:
            break
        try:
            socks.append(socket.create_connection((HOST, port), timeout=0.5))
        except OSError:
            refused += 1
    try:
        closed = hold_idle(socks, deadline)
    finally:
        for sock in socks:
            sock.close()
    return {"connected": len(socks), "connect_failed": refused, "closed_by_server": closed}


def hold_idle(socks: list[socket.socket], deadline: float) -> int:
    """Wait until ``deadline``; count the sockets the server closed (EOF or reset)."""
    selector, closed = selectors.DefaultSelector(), 0
    for sock in socks:
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ)
    while (remaining := deadline - time.monotonic()) > 0:
        for key, _ in selector.select(min(remaining, 0.5)):
            try:
                data = key.fileobj.recv(4096)
            except OSError:
                data = b""
            if not data:
                closed += 1
                selector.unregister(key.fileobj)
    selector.close()
    return closed


@dataclass(frozen=True)
class Case:
    name: str
    item: int  # the item
    what: str
    run: Callable[[int, float], dict]
    nofile: int | None = None  # the server's RLIMIT_NOFILE
    prepare: Callable[[], object] | None = None  # slow client-side set-up, before the server


def cases(bomb_mib: int) -> list[Case]:
    bomb = f"{bomb_mib / 1024:.2f} GiB"
    return [
        *(
            Case(
                f"{encoding}_bomb",
                3,
                f"{encoding} body inflating to {bomb}",
                functools.partial(bomb_exchange, encoding=encoding, inflated_mib=bomb_mib),
                prepare=functools.partial(bomb_body, encoding, bomb_mib),
            )
            for encoding in ("gzip", "deflate")
        ),
        Case("header_block", 4, "one 64 MiB header", header_block_case),
        Case("many_headers", 4, "100,000 headers", many_headers_case),
        Case("long_url", 4, "8 MiB URL", long_url_case),
        Case("pipelined", 4, f"{PIPELINED} pipelined {PIPELINED_MIB} MiB infers", pipelined_case),
        Case("slow_body", 4, "Content-Length 1 MiB, 1 KiB sent, silence", slow_body_case),
        Case(
            "idle_connections",
            4,
            f"{IDLE_CONNECTIONS} idle connections, server nofile {SERVER_NOFILE}",
            idle_connections_case,
            nofile=SERVER_NOFILE,
        ),
    ]


# ---------------------------------------------------------------------------------------------
# the soak suite: hostile requests mixed into the load (blocking, run on threads)
# ---------------------------------------------------------------------------------------------
def answer_text(answer: tuple[int, bytes] | None, reader: ResponseReader) -> str:
    if answer is not None:
        return str(answer[0])
    return "closed unanswered" if reader.eof else f"no answer in {SOAK_TIMEOUT_S:.0f} s"


def exchange_text(result: dict) -> str:
    if result["statuses"]:
        return str(result["statuses"][0])
    return "closed unanswered" if result["closed_by_server"] else "no answer"


def bomb(encoding: str, inflated_mib: int) -> Callable[[int, int], str]:
    def run(port: int, _: int) -> str:
        deadline = time.monotonic() + SOAK_TIMEOUT_S
        return exchange_text(bomb_exchange(port, deadline, encoding, inflated_mib))

    return run


def truncated_body(port: int, _: int) -> str:
    """Content-Length 64 KiB, 32 KiB sent, then the write side shut: the body never comes."""
    with socket.create_connection((HOST, port), timeout=5) as sock:
        sock.sendall(request_head("POST", INFER_PATH, {"Content-Length": 64 << 10}))
        sock.sendall(b" " * (32 << 10))
        sock.shutdown(socket.SHUT_WR)
        reader = ResponseReader(sock)
        return answer_text(reader.read(time.monotonic() + SOAK_TIMEOUT_S), reader)


def mid_body_disconnect(port: int, _: int) -> str:
    """Half of an announced 1 MiB body, then the connection closed at once."""
    with socket.create_connection((HOST, port), timeout=5) as sock:
        sock.sendall(request_head("POST", INFER_PATH, {"Content-Length": MIB}))
        sock.sendall(b" " * (MIB // 2))
    return "sent half, closed"


def big_header(port: int, _: int) -> str:
    return exchange_text(header_exchange(port, time.monotonic() + SOAK_TIMEOUT_S, MIB))


def shm_http(port: int, count: int) -> str:
    name, key = f"soak_bad_{count}", SHM_KEYS[count % len(SHM_KEYS)]
    body = json.dumps({"key": key, "offset": 0, "byte_size": 16}).encode()
    path = f"/v2/systemsharedmemory/region/{name}"
    head = {"Content-Type": "application/json", "Content-Length": len(body)}
    answer = http_call(port, request_head("POST", f"{path}/register", head) + body, 10)
    if answer is None:
        return "no answer"
    if answer[0] == 200:  # the key escaped /dev/shm: do not keep the host file mapped
        http_call(port, request_head("POST", f"{path}/unregister", {"Content-Length": 0}), 10)
        return "200 (registered!)"
    return str(answer[0])


def shm_grpc(grpc_port: int, count: int) -> str:
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    name, key = f"soak_bad_grpc_{count}", SHM_KEYS[count % len(SHM_KEYS)]
    client = grpcclient.InferenceServerClient(f"{HOST}:{grpc_port}")
    try:
        client.register_system_shared_memory(name, key, 16, client_timeout=10)
    except InferenceServerException as exc:
        return str(exc.status())
    else:
        client.unregister_system_shared_memory(name, client_timeout=10)
        return "OK (registered!)"
    finally:
        client.close()


@dataclass(frozen=True)
class HostileKind:
    name: str
    # (port, count) -> outcome: a text, or {what: how many} (bench/soak_attacks.py)
    run: Callable[[int, int], str | dict[str, int] | dict[str, float]]
    protocol: str = "http"
    gap_s: float = 0.0  # the least time between two runs (the soak's rotation skips it meanwhile)


def hostile_kinds(bomb_mib: int) -> list[HostileKind]:
    return [
        HostileKind("gzip_bomb", bomb("gzip", bomb_mib)),
        HostileKind("truncated_body", truncated_body),
        HostileKind("bad_shm_http", shm_http),
        HostileKind("deflate_bomb", bomb("deflate", bomb_mib)),
        HostileKind("mid_body_disconnect", mid_body_disconnect),
        HostileKind("big_header", big_header),
        HostileKind("bad_shm_grpc", shm_grpc, "grpc"),
    ]
