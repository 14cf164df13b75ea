"""The ``ensembles`` scenario list: the example image pipeline as ONE call of
the ``image_classifier`` ensemble vs the same three models called one after another by the
client (``preprocess`` → ``classifier`` → ``postprocess``, each answer's output sent as the
next request's input), over binary HTTP and gRPC at concurrency 1 and 16.

The ensemble rows run on the generic unary worker (catalog.worker; ``contract()`` is the
model's request / answer contract); the chained rows on the same worker with ``ChainDriver``
around the protocol's driver, so that warm-up, window, latency, CPU accounting and checks are
the same. One inference is one image through the whole pipeline: three requests for a chained
row. The ensemble and its steps (``ENSEMBLE``, ``STEPS``, ``CHAINS``) are in common.py, as
``Scenario.models`` needs them; catalog.py registers the contract and the baseline.
"""

from __future__ import annotations

import functools
import io
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.baselines import closed_loop, load_python_model, onnx_session
from bench.common import CHAINS, ENSEMBLE, STEPS, Contract, Issue, Scenario, Step
from bench.report import CONC, Column, rows_table

BATCHING_STEP = "classifier"  # the step with dynamic batching: its avg batch is reported

IMAGE_SIDE = 128
IMAGE_SETS = 4  # different images, as the unary worker's four prepared requests per worker
JPEG_QUALITY = 90
OTHER_CPU_WARNING = 0.1  # cores used by other processes during a window, flagged in the report
LABEL_TOLERANCE = 1e-4  # on each printed probability (a batched execution may round apart)


def scenarios() -> list[Scenario]:
    """Each (protocol, concurrency) cell twice: the ensemble, then the client's chain."""
    return [
        Scenario(ENSEMBLE, protocol, concurrency, chained=chained)
        for protocol in ("http", "grpc")
        for concurrency in (1, 16)
        for chained in (False, True)
    ]


# ---------------------------------------------------------------------------------------------
# The images: small, photo-like JPEGs (smooth gradients, a few soft shapes, sensor-like noise),
# generated from fixed seeds and encoded once per run.
# ---------------------------------------------------------------------------------------------
def _photo(seed: int) -> bytes:
    from PIL import Image, ImageDraw, ImageFilter

    rng = np.random.default_rng(7000 + seed)
    side = IMAGE_SIDE
    y, x = np.mgrid[0:side, 0:side].astype(np.float32) / (side - 1)
    top, bottom = rng.uniform(40, 220, 3), rng.uniform(20, 200, 3)
    sky = top[None, None, :] * (1 - y[..., None]) + bottom[None, None, :] * y[..., None]
    sky += 25 * np.sin(2 * np.pi * (x * rng.uniform(0.5, 2) + rng.uniform()))[..., None]
    image = Image.fromarray(np.clip(sky, 0, 255).astype(np.uint8), "RGB")
    draw = ImageDraw.Draw(image)
    for _ in range(6):
        x0, y0 = rng.integers(-20, side - 10, 2)
        w, h = rng.integers(15, 70, 2)
        color = tuple(int(c) for c in rng.integers(0, 256, 3))
        box = (int(x0), int(y0), int(x0 + w), int(y0 + h))
        (draw.ellipse if rng.random() < 0.5 else draw.rectangle)(box, fill=color)
    image = image.filter(ImageFilter.GaussianBlur(1.2))
    noisy = np.asarray(image, np.float32) + rng.normal(0, 4, (side, side, 3))
    buffer = io.BytesIO()
    Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8), "RGB").save(
        buffer, "JPEG", quality=JPEG_QUALITY
    )
    return buffer.getvalue()


@functools.cache
def jpeg_images() -> tuple[bytes, ...]:
    return tuple(_photo(k) for k in range(IMAGE_SETS))


def image_inputs(seed: int, batch: int) -> list[dict[str, np.ndarray]]:
    """The IMAGE_SETS images (the same for every worker), ``batch`` rows of ``[1]`` each."""
    return [{"IMAGE": np.array([[jpeg]] * batch, dtype=np.object_)} for jpeg in jpeg_images()]


# ---------------------------------------------------------------------------------------------
# The in-process pipeline: the reference answers and the baseline.
# ---------------------------------------------------------------------------------------------
class Pipeline:
    """preprocess and postprocess ``model.py`` (baselines.load_python_model: tritium's
    pb_utils, ``initialize`` with the server's args) around an onnxruntime session on the
    classifier's ``model.onnx`` with the server's session options."""

    def __init__(self, repo: Path) -> None:
        self.pre, self.pb = load_python_model(repo / "preprocess")
        self.post, _ = load_python_model(repo / "postprocess")
        self.session, self.options = onnx_session(repo / "classifier")
        self.classifier_input = self.session.get_inputs()[0].name

    def _execute(self, model: Any, name: str, tensor: str, array: np.ndarray, out: str) -> Any:
        pb = self.pb
        request = pb.InferenceRequest(
            inputs=[pb.Tensor(tensor, array)], requested_output_names=[out], model_name=name
        )
        (response,) = model.execute([request])
        if response.has_error():
            raise RuntimeError(f"{name}: {response.error().message()}")
        return pb.get_output_tensor_by_name(response, out).as_numpy()

    def preprocess(self, images: np.ndarray) -> np.ndarray:
        return self._execute(self.pre, "preprocess", "IMAGE", images, "PIXELS")

    def classify(self, pixels: np.ndarray) -> np.ndarray:
        return self.session.run(None, {self.classifier_input: pixels})[0]

    def postprocess(self, probabilities: np.ndarray) -> np.ndarray:
        return self._execute(self.post, "postprocess", "PROBABILITIES", probabilities, "LABELS")

    def __call__(self, images: np.ndarray) -> np.ndarray:
        return self.postprocess(self.classify(self.preprocess(images)))


@functools.cache
def pipeline(repo: Path) -> Pipeline:
    return Pipeline(repo)


EXPECTED: dict[bytes, list[tuple[int, str, float]]] = {}  # image bytes -> top 3 of the pipeline


def parse_labels(row: Any) -> list[tuple[int, str, float]]:
    """``b"<probability>:<index>:<label>"`` entries -> (index, label, probability)."""
    parsed = []
    for entry in row:
        text = entry.decode() if isinstance(entry, bytes) else str(entry)
        probability, index, label = text.split(":", 2)
        parsed.append((int(index), label, float(probability)))
    return parsed


def precompute(repo: Path) -> None:
    """The expected LABELS of every image, from the in-process pipeline (before the server
    starts, so that checking an answer is a dict look-up)."""
    run = pipeline(repo)
    for jpeg in jpeg_images():
        EXPECTED[jpeg] = parse_labels(run(np.array([[jpeg]], dtype=np.object_))[0])


def check_labels(result: Any, inputs: dict[str, np.ndarray]) -> str | None:
    got = result.as_numpy("LABELS")
    if got is None:
        return "missing LABELS"
    images = inputs["IMAGE"]
    if got.shape != (images.shape[0], 3):
        return f"LABELS shape {list(got.shape)}, [{images.shape[0]}, 3] expected"
    for row, image in zip(got, images[:, 0], strict=True):
        want, have = EXPECTED[bytes(image)], parse_labels(row)
        same = [(i, label) for i, label, _ in have] == [(i, label) for i, label, _ in want]
        close = all(abs(a[2] - b[2]) <= LABEL_TOLERANCE for a, b in zip(have, want, strict=True))
        if not (same and close):
            return f"LABELS {[e.decode() for e in row]}, top 3 {want} expected"
    return None


def contract() -> Contract:
    return Contract(("LABELS",), image_inputs, check_labels)


def baseline(model_dir: Path, seconds: float) -> dict[str, Any]:
    """The bare pipeline in this process, one image per call: preprocess ``execute`` →
    ``InferenceSession.run`` → postprocess ``execute``, with the time of each step."""
    run = pipeline(model_dir.parent)
    images = [d["IMAGE"] for d in image_inputs(0, 1)]
    spent = dict.fromkeys((s.model for s in STEPS), 0.0)

    def call(i: int) -> None:
        t0 = time.perf_counter()
        pixels = run.preprocess(images[i % len(images)])
        t1 = time.perf_counter()
        probabilities = run.classify(pixels)
        t2 = time.perf_counter()
        run.postprocess(probabilities)
        t3 = time.perf_counter()
        for step, seconds_ in zip(spent, (t1 - t0, t2 - t1, t3 - t2), strict=True):
            spent[step] += seconds_

    result = closed_loop(call, seconds)
    calls = result["calls"] + 50  # closed_loop's warm-up calls are timed here too
    steps_us = {step: total * 1e6 / calls for step, total in spent.items()}
    steps = ", ".join(f"{step} {us:,.0f} µs" for step, us in steps_us.items())
    return {
        "what": f"preprocess model.py → onnxruntime (options from {run.options}) → "
        f"postprocess model.py, in-process, one {IMAGE_SIDE}×{IMAGE_SIDE} JPEG per call "
        f"({steps})",
        "steps_us": steps_us,
        **result,
    }


# ---------------------------------------------------------------------------------------------
# The client's chain.
# ---------------------------------------------------------------------------------------------
class ChainDriver:
    """A protocol driver that answers an ensemble request by calling its composing models one
    after another: the first step's request is prepared once (as the ensemble's), each next
    request is built from the previous answer's output (``as_numpy`` → ``InferInput``), and the
    last answer is returned (it holds the ensemble's output)."""

    def __init__(self, inner: Any, steps: tuple[Step, ...]) -> None:
        self.inner, self.steps = inner, steps
        self.url_key = inner.url_key

    def client(self, url: str) -> Any:
        return self.inner.client(url)

    def prepare_tensors(
        self, arrays: dict[str, np.ndarray], output_names: tuple[str, ...]
    ) -> tuple[list, list]:
        return self.inner.prepare_tensors(arrays, (self.steps[0].output,))

    async def infer(self, client: Any, model: str, inputs: list, outputs: list) -> Any:
        first, *rest = self.steps
        result = await self.inner.infer(client, first.model, inputs, outputs)
        previous = first
        for step in rest:
            tensor = result.as_numpy(previous.output)
            if tensor is None:
                raise RuntimeError(f"{previous.model} answered without {previous.output}")
            inputs, outputs = self.inner.prepare_tensors({step.input: tensor}, (step.output,))
            result = await self.inner.infer(client, step.model, inputs, outputs)
            previous = step
        return result


def chain_driver(inner: Any, model: str) -> ChainDriver:
    return ChainDriver(inner, CHAINS[model])


# ---------------------------------------------------------------------------------------------
# Report.
# ---------------------------------------------------------------------------------------------
RATIO_KEYS = ("infer_per_s", "p50_ms", "p99_ms", "server_cpu_us", "stub_cpu_us", "client_cpu_us")


def mode(row: dict[str, Any]) -> str:
    return "chained" if row.get("chained") else "ensemble"


def add_ratios(rows: list[dict[str, Any]]) -> None:
    """``vs_chained`` on each ensemble row: its figures ÷ those of the chained row of the same
    protocol and concurrency."""
    chained = {
        (r["protocol"], r["concurrency"]): r
        for r in rows
        if r.get("chained") and "infer_per_s" in r
    }
    for row in rows:
        ref = chained.get((row["protocol"], row["concurrency"]))
        if row.get("chained") or ref is None or "infer_per_s" not in row:
            continue
        row["vs_chained"] = {k: row[k] / ref[k] if ref[k] else None for k in RATIO_KEYS}


def step_batch(row: dict[str, Any]) -> float | None:
    return (row.get("composing_stats") or {}).get(BATCHING_STEP, {}).get("avg_batch")


COLUMNS = [
    Column("protocol", "protocol", left=True),
    CONC,
    Column("mode", mode, left=True),
    Column("infer/s", "infer_per_s"),
    Column("p50 ms", "p50_ms", 2),
    Column("p99 ms", "p99_ms", 2),
    Column("server CPU µs/inf", "server_cpu_us"),
    Column("stub CPU µs/inf", "stub_cpu_us"),
    Column("client CPU µs/inf", "client_cpu_us"),
    Column("classifier avg batch", step_batch, 2),
    Column("CPU × base", "cpu_ratio", 2),
    Column("thr ens ÷ chained", "vs_chained.infer_per_s", 2),
    Column("p50 ens ÷ chained", "vs_chained.p50_ms", 2),
]


def table(rows: list[dict[str, Any]]) -> list[str]:
    return rows_table(COLUMNS, rows) + verdict(rows) if rows else []


def verdict(rows: list[dict[str, Any]]) -> list[str]:
    compared = [r for r in rows if "vs_chained" in r]
    if not compared:
        return []
    slower = [r for r in compared if r["vs_chained"]["infer_per_s"] < 1.0]
    parts = [
        f"{r['protocol']} c{r['concurrency']} {r['vs_chained']['infer_per_s']:.2f}×"
        for r in compared
    ]
    outcome = (
        "the ensemble is not faster in "
        + ", ".join(f"{r['protocol']} c{r['concurrency']}" for r in slower)
        if slower
        else "the ensemble is faster in every cell"
    )
    lines = ["", f"Ensemble ÷ chained infer/s: {'; '.join(parts)} — {outcome}."]
    busy = [r for r in rows if r.get("other_cpu_util", 0.0) > OTHER_CPU_WARNING]
    if busy:
        lines += [
            "",
            "⚠ other processes were busy on the machine during "
            + ", ".join(f"{r['name']} ({r['other_cpu_util']:.2f} cores)" for r in busy)
            + ": those rows measure a shared CPU.",
        ]
    return lines


NOTE = (
    f"`{ENSEMBLE}` (ensemble) is one request through the server's ensemble scheduler; "
    "`chained` is the same three models called one after another by the client, each answer's "
    "output sent as the next request's input (" + " → ".join(s.model for s in STEPS) + "; "
    "three requests, one connection per coroutine). One inference = one image through the "
    f"whole pipeline: a {IMAGE_SIDE}×{IMAGE_SIDE} JPEG (quality {JPEG_QUALITY}, one of "
    f"{IMAGE_SETS} generated from fixed seeds) as `IMAGE` BYTES [1, 1] → `LABELS` BYTES [1, 3]. "
    "`http` is binary HTTP, `grpc` unary `ModelInfer`. Stub CPU = the Python stubs of "
    "`preprocess` and `postprocess`; classifier avg batch = its inferences ÷ executions over "
    "the window (dynamic batching, statistics extension). CPU × base = (server + stub CPU) ÷ "
    "the in-process pipeline's CPU per image (baseline below). Every Nth answer's top 3 is "
    f"compared with the in-process pipeline (same classes in order, probabilities within "
    f"{LABEL_TOLERANCE:g})."
)
ISSUE = Issue(
    "ensembles",
    scenarios,
    ratios="ens ÷ chained = the ensemble row ÷ the chained row of the same protocol and "
    "concurrency.",
    note=NOTE,
    table=table,
    row_ratios=add_ratios,
)
