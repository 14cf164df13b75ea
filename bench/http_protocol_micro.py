"""The HTTP/1.1 connection layer's own cost per request, without sockets or a model.

``frontends/http/protocol.py`` (``HttpProtocol`` → ``HttpConnection``), the HTTP/1.1 reader
(httptools and the bounds) and ``cycle.py:RequestCycle`` on a fake transport
(testkit/http_fakes.py), a handler that answers at once with a fixed small response:
``data_received`` of one whole keep-alive request, its answer written at the end of the loop's
turn. What it leaves out (the model, the codec, the socket) is what an end-to-end run adds and
whose noise hides a change of a µs here; this isolates it. Compare two builds by running it
with each one's interpreter (the compiled and pure builds of one tree: ``TRITIUM_PURE_PYTHON=1``
for the pure one).

    python -m bench http-micro [--requests 50000] [--repeats 5]

Prints the best of the repeats, µs per request, and the build.
"""

from __future__ import annotations

import argparse
import asyncio
import time


import uvloop

from testkit.http_fakes import connect
from tritium import compiled_modules
from tritium.frontends.http.messages import HttpRequest, HttpResponse

REQUEST = (
    b"POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Content-Length: 20\r\n\r\n" + b'{"inputs":[1,2,3,4]}'
)
TURN = 64  # requests per loop turn (the answers of a turn are written at its end)


def handler(request: HttpRequest) -> HttpResponse:
    return HttpResponse(200, [b'{"ok":true}'])


async def measure(requests: int, repeats: int) -> float:
    protocol, transport = connect(handler)
    best = float("inf")
    for _ in range(repeats):
        began = time.perf_counter()
        for i in range(requests):
            protocol.data_received(REQUEST)
            if i % TURN == TURN - 1:
                await asyncio.sleep(0)
                transport.buffer.clear()
        await asyncio.sleep(0)
        transport.buffer.clear()
        best = min(best, (time.perf_counter() - began) / requests * 1e6)
    return best


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=50_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    best = uvloop.run(measure(args.requests, args.repeats))
    build = f"compiled ({len(compiled_modules())} modules)" if compiled_modules() else "pure"
    print(f"{best:.2f} µs per request (best of {args.repeats}); {build} build")
