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
(server and its Python stub, from /proc) per token. Results: bench/results/openai.md/.json
(``openai-delay<N>ms.*`` for another ``--delay-ms``).

Baselines (``--no-baselines`` leaves them out), on the same model.py: tritium's own
``generate_stream`` (what the OpenAI layer adds), and Triton 2.51's ``generate_stream`` when
``../shared/triton`` is set up (Triton's OpenAI front-end needs its in-process Python API,
which the CPU build there lacks). Every level runs on each target in turn.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench import proctree
from bench.common import RESULTS_DIR
from bench.report import machine_info
from bench.vs_triton import Triton, shared_scripts, triton_installed
from testkit.server_process import ServerProcess

ROOT = Path(__file__).resolve().parent.parent
CONTENT = b'"delta":{"content":"'  # one per token of a chat stream
TEXT = b'"text_output"'  # one per token of a generate_stream
DEFAULT_DELAY_MS = 10.0  # results: openai.md; another delay: openai-delay<N>ms.md
END = b"\r\n0\r\n\r\n"


def _repository(path: Path, delay_ms: float) -> Path:
    repo = path / "repo"
    shutil.copytree(ROOT / "examples" / "model_repository" / "mock_llm", repo / "mock_llm")
    config = repo / "mock_llm" / "config.pbtxt"
    text = config.read_text().replace('string_value: "10"', f'string_value: "{delay_ms:g}"')
    config.write_text(text)
    return repo


@dataclass(frozen=True)
class Target:
    """A server and the streaming request a client sends it."""

    label: str
    port: int
    pid: int  # its process (the Python stubs are its children)
    openai: bool  # chat completions on /v1; else Triton's generate_stream


def _request(target: Target, words: int, client: int) -> bytes:
    content = " ".join(f"w{client}x{i}" for i in range(words))
    if target.openai:
        path = b"/v1/chat/completions"
        doc: dict[str, Any] = {
            "model": "mock_llm",
            "messages": [{"role": "user", "content": content}],
            "stream": True,
        }
    else:
        path = b"/v2/models/mock_llm/generate_stream"
        doc = {"text_input": content, "stream": True}
    body = json.dumps(doc).encode()
    head = (
        b"POST %s HTTP/1.1\r\nHost: bench\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % (path, len(body))
    )
    return head + body


async def _client(
    target: Target, request: bytes, until: float, samples: list[tuple[float, int]]
) -> None:
    marker = CONTENT if target.openai else TEXT
    reader, writer = await asyncio.open_connection("127.0.0.1", target.port)
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
                if not first and marker in seen:
                    first = time.perf_counter() - started
            if not seen.startswith(b"HTTP/1.1 200"):
                raise RuntimeError(seen[:300].decode(errors="replace"))
            samples.append((first, seen.count(marker)))
    finally:
        writer.close()


async def _level(target: Target, concurrency: int, seconds: float, words: int) -> dict[str, Any]:
    samples: list[tuple[float, int]] = []
    until = time.perf_counter() + seconds
    started = time.perf_counter()
    clients = [
        _client(target, _request(target, words, i), until, samples) for i in range(concurrency)
    ]
    await asyncio.gather(*clients)
    elapsed = time.perf_counter() - started
    ttft = np.array([s[0] for s in samples]) * 1000
    tokens = sum(s[1] for s in samples)
    return {
        "target": target.label,
        "concurrency": concurrency,
        "requests": len(samples),
        "tokens": tokens,
        "tokens_per_s": tokens / elapsed,
        "ttft_p50_ms": float(np.percentile(ttft, 50)),
        "ttft_p99_ms": float(np.percentile(ttft, 99)),
        "ttft_max_ms": float(ttft.max()),
    }


def _measure_one(target: Target, concurrency: int, args: argparse.Namespace) -> dict[str, Any]:
    cpu, own = proctree.tree_cpu_seconds(target.pid), proctree.cpu_seconds(target.pid)
    row = asyncio.run(_level(target, concurrency, args.seconds, args.words))
    tokens = max(row["tokens"], 1)
    row["server_cpu_us_per_token"] = (proctree.tree_cpu_seconds(target.pid) - cpu) / tokens * 1e6
    row["frontend_cpu_us_per_token"] = (proctree.cpu_seconds(target.pid) - own) / tokens * 1e6
    row["ttft_p99_over_delay_ms"] = row["ttft_p99_ms"] - args.delay_ms
    row["load_average"] = proctree.load_average()  # other work on the machine
    print(
        f"{target.label} c{concurrency}: {row['requests']} streams, "
        f"{row['tokens_per_s']:.0f} tokens/s, TTFT p50 {row['ttft_p50_ms']:.1f} ms "
        f"p99 {row['ttft_p99_ms']:.1f} ms (p99 {row['ttft_p99_over_delay_ms']:.1f} ms over the "
        f"model's {args.delay_ms:g} ms), server CPU {row['server_cpu_us_per_token']:.0f} us/token "
        f"({row['frontend_cpu_us_per_token']:.0f} in the server process), "
        f"load average {row['load_average']:.1f}",
        flush=True,
    )
    return row


def _measure(targets: list[Target], args: argparse.Namespace) -> list[dict[str, Any]]:
    """Each level on each target in turn (the machine's load changes: the targets of one level
    are measured next to each other)."""
    import uvloop

    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    for target in targets:  # warm up
        asyncio.run(_level(target, 4, 1.0, args.words))
    return [_measure_one(t, c, args) for c in args.concurrency for t in targets]


def _report(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    lines = [
        "# OpenAI API: streaming chat completions on mock_llm",
        "",
        f"`python -m bench openai --delay-ms {args.delay_ms:g} --words {args.words} "
        f"--seconds {args.seconds:g}` (bench/openai_stream.py). The model waits "
        f"{args.delay_ms:g} ms before each token; a chat stream is {args.words + 2} tokens (the "
        "default chat template adds `user:` and `assistant:`), a generate_stream one "
        f"{args.words}. Baselines, serving the same `mock_llm` model.py: tritium's and Triton "
        "2.51's `generate_stream` (server-sent events; Triton's OpenAI front-end needs its "
        "in-process Python API, which the CPU build here does not have). Client: raw asyncio on "
        "uvloop, one keep-alive connection per client, on the same machine as the servers; each "
        "level is measured on every target in turn.",
        "",
        "| target | clients | streams | tokens/s | TTFT p50 ms | TTFT p99 ms | p99 over the "
        "model's delay ms | server CPU µs/token (server process + stubs) | load average after |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        stub = r["server_cpu_us_per_token"] - r["frontend_cpu_us_per_token"]
        lines.append(
            f"| {r['target']} | {r['concurrency']} | {r['requests']} | {r['tokens_per_s']:.0f} | "
            f"{r['ttft_p50_ms']:.1f} | {r['ttft_p99_ms']:.1f} | "
            f"{r['ttft_p99_over_delay_ms']:.1f} | {r['server_cpu_us_per_token']:.0f} "
            f"({r['frontend_cpu_us_per_token']:.0f} + {stub:.0f}) | {r['load_average']:.1f} |"
        )
    return "\n".join(lines) + "\n"


def _run(repo: Path, tmp: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    proc = ServerProcess([repo], fast_stop=False)
    triton = None
    try:
        proc.wait_live(90.0, endpoint="ready")
        port, pid = proc.ports["http"], proc.proc.pid
        targets = [Target("tritium /v1/chat", port, pid, True)]
        if args.baselines:
            targets.append(Target("tritium generate_stream", port, pid, False))
            scripts = shared_scripts()
            if scripts is not None and triton_installed():
                triton = Triton(scripts, repo, tmp / "triton.log")
                triton.wait_ready(["mock_llm"])
                targets.append(
                    Target("Triton 2.51 generate_stream", triton.http, triton.pid, False)
                )
            else:
                print("Triton 2.51 is not set up (../shared/triton/setup.sh): left out")
        return _measure(targets, args)
    finally:
        proc.stop()
        if triton is not None:
            triton.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench openai", description=__doc__)
    parser.add_argument(
        "--concurrency", type=lambda s: [int(x) for x in s.split(",")], default=[1, 16, 64]
    )
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--delay-ms", type=float, default=DEFAULT_DELAY_MS)
    parser.add_argument("--words", type=int, default=30)
    parser.add_argument(
        "--no-baselines",
        dest="baselines",
        action="store_false",
        help="measure only tritium's OpenAI API (not the generate_stream baselines)",
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-openai-") as tmp:
        rows = _run(_repository(Path(tmp), args.delay_ms), Path(tmp), args)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    doc = {"args": vars(args), "machine": machine_info(), "rows": rows}
    name = "openai" if args.delay_ms == DEFAULT_DELAY_MS else f"openai-delay{args.delay_ms:g}ms"
    (RESULTS_DIR / f"{name}.json").write_text(json.dumps(doc, indent=2) + "\n")
    (RESULTS_DIR / f"{name}.md").write_text(_report(rows, args))
    return 0
