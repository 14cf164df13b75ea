"""The registries: the scenario lists (``ISSUES``), each model's contract and baseline, and
what runs a scenario (``drive``: the unary worker, the stream sessions or the shared-memory
workers, by protocol)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.baselines import baseline_onnx, baseline_python
from bench.common import (
    BLS_PIPELINE,
    ENSEMBLE,
    PIPELINES,
    SIMPLE_CONTRACT,
    Contract,
    Scenario,
    Settings,
    Target,
    Window,
)
from bench.drivers import PROTOCOLS, GrpcStreamDriver, ShmDriver
from bench.engine import run_window
from bench.scenarios import (
    batching,
    bls,
    ensembles,
    foundation,
    handoff,
    sequence,
    shm,
    streaming,
    transport,
)
from bench.server import Server

ISSUES = {
    issue.name: issue
    for issue in (
        foundation.ISSUE,
        streaming.ISSUE,
        batching.ISSUE,
        shm.ISSUE,
        ensembles.ISSUE,
        transport.ISSUE,
        sequence.ISSUE,
        bls.ISSUE,
        handoff.ISSUE,
    )
}
# `make bench` runs these; batching and shm run with --issue (each starts servers of its own
# for minutes).
DEFAULT_ISSUES = ("foundation", "streaming", "ensembles", "grpc", "sequence", "bls", "handoff")
# The servers of their own that scenarios name (Scenario.target), from every list.
TARGETS: dict[str, Target] = {
    name: target for issue in ISSUES.values() for name, target in issue.targets.items()
}
# Models whose inputs JSON cannot carry (JPEG bytes are not UTF-8; tritonclient refuses them):
# --protocols http-json adds no variant of their scenarios.
BINARY_ONLY_MODELS = (ENSEMBLE, BLS_PIPELINE)
# input + output bytes of one inference, for MB/s
PAYLOAD_BYTES = shm.PAYLOAD_BYTES

CONTRACTS: dict[str, Contract] = {
    **batching.CONTRACTS,
    shm.IDENTITY_MODEL: shm.CONTRACT,
    ENSEMBLE: ensembles.contract(),
    BLS_PIPELINE: ensembles.contract(),  # the ensemble's contract, the same requests
}
BASELINES: dict[str, Callable[[Path, float], dict[str, Any]]] = {
    "simple": baseline_onnx,
    "add_sub_python": baseline_python,
    "mlp": batching.baseline_onnx_ceiling,
    shm.IDENTITY_MODEL: shm.baseline_identity,
    ENSEMBLE: ensembles.baseline,
}
# Models whose baseline is another's (the same model.onnx and session options): measured once.
BASELINE_SAME_AS = {
    "mlp_nobatch": "mlp",
    BLS_PIPELINE: ENSEMBLE,  # the same pipeline in-process
    **transport.BASELINE_SAME_AS,
    **handoff.BASELINE_SAME_AS,
}


def contract_of(model: str) -> Contract:
    return CONTRACTS.get(model, SIMPLE_CONTRACT)


def precompute_references(repo: Path, scenarios: list[Scenario]) -> None:
    """The reference answers of every input set the unary workers will send."""
    batching.precompute(repo, scenarios)
    if any(sc.model in PIPELINES for sc in scenarios):
        ensembles.precompute(repo)


def run_baselines(repo: Path, models: list[str], settings: Settings) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for model in models:
        source = BASELINE_SAME_AS.get(model, model)
        if source not in BASELINES:
            continue
        if source not in results:
            print(f"baseline {source} ...", flush=True)
            results[source] = BASELINES[source](repo / source, settings.baseline_seconds)
        if model != source:
            results[model] = {**results[source], "same_as": source}
    return {m: results[m] for m in models if m in results}


async def worker(sc: Scenario, driver: Any, url: str, wid: int, win: Window, every: int) -> None:
    client = driver.client(url)
    contract = contract_of(sc.model)
    data = contract.make_inputs(wid, sc.batch)
    try:
        prepared = [driver.prepare_tensors(d, contract.outputs) for d in data]
        i = 0
        while not win.closed():
            check = i % every == 0
            k = (i // every if check else i) % len(data)  # checked requests cycle the sets
            inputs, outputs = prepared[k]
            t0 = time.perf_counter()
            result = await driver.infer(client, sc.model, inputs, outputs)
            t1 = time.perf_counter()
            if win.start is not None and win.end is None:
                win.latencies.append(t1 - t0)
            if check:
                problem = contract.check(result, data[k])
                win.verified += 1
                if problem:
                    win.wrong.append(problem)
            i += 1
    except Exception as exc:  # noqa: BLE001 - a failing scenario is reported, not fatal
        win.errors.append(f"{type(exc).__name__}: {exc}")
    finally:
        await client.close()


async def drive(sc: Scenario, server: Server, settings: Settings) -> Window:
    driver = PROTOCOLS[sc.protocol]()
    url = server.url(driver.url_key)
    win, every = Window(), settings.verify_every
    if sc.steps:
        return await sequence.drive(sc, server, settings)
    if sc.child:
        return await bls.drive_calls(sc, server, settings)
    if isinstance(driver, ShmDriver):
        return await shm.drive_shm(sc, driver, url, server, settings, win)
    if isinstance(driver, GrpcStreamDriver):
        session = streaming.decoupled_session if sc.responses else streaming.stream_session
        depths = driver.depths(sc.concurrency)
        workers = [session(sc, url, w, depth, win, every) for w, depth in enumerate(depths)]
    else:
        if sc.chained:
            driver = ensembles.chain_driver(driver, sc.model)
        workers = [worker(sc, driver, url, w, win, every) for w in range(sc.concurrency)]
    await run_window(sc, server, settings, win, workers)
    return win
