"""Streaming chat completions on the OpenAI API (issue 40): time to first token and tokens per
second at 1, 16 and 64 concurrent clients on the example ``mock_llm``.

    python -m bench openai [--concurrency 1,16,64] [--seconds 10] [--delay-ms 10] [--words 30]

The example ``mock_llm`` is copied into a temporary repository with ``token_delay_ms`` set to
``--delay-ms`` and served by the real server (testkit/server_process.py) on 127.0.0.1. Each
client is one keep-alive HTTP/1.1 connection (a raw asyncio client on uvloop: the lightest
client this 2-core machine can run beside the server) sending ``POST /v1/chat/completions``
with ``stream: true`` and a user message of ``--words`` words, one request after the other
for ``--seconds``. Per request: the time from writing the request to reading the first event
with content (time to first token, TTFT; the model itself waits ``--delay-ms`` before its
first token, reported apart as "TTFT over the model's delay"), and the content events (one
per token). Per level: TTFT p50/p99, tokens per second over all clients, and the server's CPU
(server and its Python stub, from /proc) per token. Results: bench/results/openai.md/.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench import proctree
from bench.common import RESULTS_DIR
from bench.report import machine_info
from testkit.server_process import ServerProcess

ROOT = Path(__file__).resolve().parent.parent
CONTENT = b'"delta":{"content":"'
END = b"\r\n0\r\n\r\n"


def _repository(path: Path, delay_ms: float) -> Path:
    repo = path / "repo"
    shutil.copytree(ROOT / "examples" / "model_repository" / "mock_llm", repo / "mock_llm")
    config = repo / "mock_llm" / "config.pbtxt"
    text = config.read_text().replace('string_value: "10"', f'string_value: "{delay_ms:g}"')
    config.write_text(text)
    return repo


def _request(words: int, client: int) -> bytes:
    content = " ".join(f"w{client}x{i}" for i in range(words))
    body = json.dumps(
        {
            "model": "mock_llm",
            "messages": [{"role": "user", "content": content}],
            "stream": True,
        }
    ).encode()
    head = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: bench\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
    )
    return head + body


async def _client(
    port: int, request: bytes, until: float, samples: list[tuple[float, int]]
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        while time.perf_counter() < until:
            started = time.perf_counter()
            writer.write(request)
            first = 0.0
            seen = b""
            while not seen.endswith(END):
                data = await reader.read(65536)
                if not data:
                    raise ConnectionError("the server closed the connection")
                seen += data
                if not first and CONTENT in seen:
                    first = time.perf_counter() - started
            if not seen.startswith(b"HTTP/1.1 200"):
                raise RuntimeError(seen[:300].decode(errors="replace"))
            samples.append((first, seen.count(CONTENT)))
    finally:
        writer.close()


async def _level(port: int, concurrency: int, seconds: float, words: int) -> dict[str, Any]:
    samples: list[tuple[float, int]] = []
    until = time.perf_counter() + seconds
    started = time.perf_counter()
    await asyncio.gather(
        *(_client(port, _request(words, i), until, samples) for i in range(concurrency))
    )
    elapsed = time.perf_counter() - started
    ttft = np.array([s[0] for s in samples]) * 1000
    tokens = sum(s[1] for s in samples)
    return {
        "concurrency": concurrency,
        "requests": len(samples),
        "tokens": tokens,
        "tokens_per_s": tokens / elapsed,
        "ttft_p50_ms": float(np.percentile(ttft, 50)),
        "ttft_p99_ms": float(np.percentile(ttft, 99)),
        "ttft_max_ms": float(ttft.max()),
    }


def _measure(proc: ServerProcess, args: argparse.Namespace) -> list[dict[str, Any]]:
    import uvloop

    port = proc.ports["http"]
    pid = proc.proc.pid
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    asyncio.run(_level(port, 4, 1.0, args.words))  # warm up
    rows = []
    for concurrency in args.concurrency:
        cpu, own = proctree.tree_cpu_seconds(pid), proctree.cpu_seconds(pid)
        row = asyncio.run(_level(port, concurrency, args.seconds, args.words))
        tokens = row["tokens"]
        row["server_cpu_us_per_token"] = (proctree.tree_cpu_seconds(pid) - cpu) / tokens * 1e6
        row["frontend_cpu_us_per_token"] = (proctree.cpu_seconds(pid) - own) / tokens * 1e6
        row["ttft_p99_over_delay_ms"] = row["ttft_p99_ms"] - args.delay_ms
        row["load_average"] = proctree.load_average()  # other work on the machine
        rows.append(row)
        print(
            f"c{concurrency}: {row['requests']} streams, {row['tokens_per_s']:.0f} tokens/s, "
            f"TTFT p50 {row['ttft_p50_ms']:.1f} ms p99 {row['ttft_p99_ms']:.1f} ms "
            f"(p99 {row['ttft_p99_over_delay_ms']:.1f} ms over the model's {args.delay_ms:g} ms), "
            f"server CPU {row['server_cpu_us_per_token']:.0f} us/token "
            f"({row['frontend_cpu_us_per_token']:.0f} in the server process, the rest in the "
            "model's stub)",
            flush=True,
        )
    return rows


def _report(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    lines = [
        "# OpenAI API: streaming chat completions on mock_llm",
        "",
        f"`python -m bench openai --delay-ms {args.delay_ms:g} --words {args.words} "
        f"--seconds {args.seconds:g}` (bench/openai_stream.py). The model waits "
        f"{args.delay_ms:g} ms before each token; a stream is {args.words + 2} tokens (the "
        "default chat template adds `user:` and `assistant:`). Client: raw asyncio on uvloop, "
        "one keep-alive connection per client, on the same machine as the server.",
        "",
        "| clients | streams | tokens/s | TTFT p50 ms | TTFT p99 ms | p99 over the model's "
        "delay ms | server CPU µs/token (server process + stub) | load average after |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['concurrency']} | {r['requests']} | {r['tokens_per_s']:.0f} | "
            f"{r['ttft_p50_ms']:.1f} | {r['ttft_p99_ms']:.1f} | "
            f"{r['ttft_p99_over_delay_ms']:.1f} | {r['server_cpu_us_per_token']:.0f} "
            f"({r['frontend_cpu_us_per_token']:.0f} + "
            f"{r['server_cpu_us_per_token'] - r['frontend_cpu_us_per_token']:.0f}) | "
            f"{r['load_average']:.1f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench openai", description=__doc__)
    parser.add_argument(
        "--concurrency", type=lambda s: [int(x) for x in s.split(",")], default=[1, 16, 64]
    )
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--delay-ms", type=float, default=10.0)
    parser.add_argument("--words", type=int, default=30)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-openai-") as tmp:
        proc = ServerProcess([_repository(Path(tmp), args.delay_ms)], fast_stop=False)
        try:
            proc.wait_live(90.0, endpoint="ready")
            rows = _measure(proc, args)
        finally:
            proc.stop()
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    doc = {"args": vars(args), "machine": machine_info(), "rows": rows}
    (RESULTS_DIR / "openai.json").write_text(json.dumps(doc, indent=2) + "\n")
    (RESULTS_DIR / "openai.md").write_text(_report(rows, args))
    return 0
