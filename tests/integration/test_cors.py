"""CORS over the real server (``--http-cors-allow-origin``; frontends/http/cors.py).

- Raw HTTP (http.client, so every response header is seen): a preflight from an allowed
  origin is 204 with the allow headers even though ``--auth-token-file`` is on, the real
  request is still guarded (its 401 readable by the page) and then answered with the origin's
  headers; another origin gets 403 / no CORS headers; with CORS off OPTIONS is answered as
  before (405).
- A real browser: headless Chromium loads a page from a second origin (a small HTTP server
  on another loopback port) whose script ``fetch()``es ``/v2/models/<m>/infer`` with
  ``Content-Type: application/json`` and a bearer token (a preflight), then a binary answer
  read with ``Inference-Header-Content-Length`` (an exposed header); the page writes what it
  got, read back with ``--dump-dom``. With CORS off, or from an origin not allowed, the
  fetch fails. Skipped only where ``chromium`` is not installed (``make browser-deps``).
- gRPC is no browser protocol here: its inference works unchanged with the flags on.
"""

from __future__ import annotations

import http.client
import http.server
import json
import re
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tests.support.models import build_test_repository
from testkit.server_process import ServerProcess

MODEL = "identity_fp32"
INFER = f"/v2/models/{MODEL}/infer"
TOKEN = "browser-5f4e3d2c1b0a99887766554433221100"
DATA = [1.5, 2.0, 3.0, 4.0]
BODY = json.dumps(
    {"inputs": [{"name": "INPUT0", "shape": [4], "datatype": "FP32", "data": DATA}]}
).encode()
CHROMIUM = shutil.which("chromium")
NO_BROWSER = "chromium is not installed (`make browser-deps` installs Debian's package)"
TIMEOUT_S = 120


class _Pages(http.server.ThreadingHTTPServer):
    """The second origin: serves the pages the tests put in ``pages`` (by exact path; no
    file is read), on its own loopback port."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _PageHandler)
        self.pages: dict[str, bytes] = {}
        self.port = self.server_address[1]
        self.origin = f"http://127.0.0.1:{self.port}"
        # The same server under another name is another origin, one the server does not allow.
        self.other_origin = f"http://localhost:{self.port}"


class _PageHandler(http.server.BaseHTTPRequestHandler):
    server: _Pages

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        page = self.server.pages.get(self.path)
        self.send_response(404 if page is None else 200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(page or b"")))
        self.end_headers()
        self.wfile.write(page or b"")

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def pages() -> Iterator[_Pages]:
    server = _Pages()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_test_repository(tmp_path_factory.mktemp("cors") / "repo", [MODEL])


def _start(repo: Path, *flags: str) -> ServerProcess:
    proc = ServerProcess([repo], *flags)
    try:
        proc.wait_live(endpoint="ready")
    except BaseException:
        proc.stop()
        raise
    return proc


@pytest.fixture(scope="module")
def cors_server(
    repo: Path, pages: _Pages, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """CORS on for the pages' origin, and access control on: every API but health needs the
    bearer token."""
    tokens = tmp_path_factory.mktemp("cors-tokens") / "tokens"
    tokens.write_text(f"{TOKEN} * browser\n")
    proc = _start(
        repo,
        f"--http-cors-allow-origin={pages.origin}",
        "--http-cors-allow-origin=https://app.example",
        f"--auth-token-file={tokens}",
    )
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def plain_server(repo: Path) -> Iterator[ServerProcess]:
    """CORS off (the default)."""
    proc = _start(repo)
    yield proc
    proc.stop()


def _http(
    server: ServerProcess, method: str, path: str, headers: dict[str, str], body: bytes = b""
) -> tuple[int, dict[str, str], bytes]:
    """One request; the status, the response headers (lower-case names; a repeated one would
    fail the test) and the body."""
    conn = http.client.HTTPConnection("127.0.0.1", server.ports["http"], timeout=30)
    try:
        conn.request(method, path, body=body or None, headers=headers)
        response = conn.getresponse()
        found: dict[str, str] = {}
        for name, value in response.getheaders():
            assert name.lower() not in found, f"{name} sent twice"
            found[name.lower()] = value
        return response.status, found, response.read()
    finally:
        conn.close()


def _preflight_headers(origin: str, requested: str) -> dict[str, str]:
    return {
        "Origin": origin,
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": requested,
    }


def _cors_names(headers: dict[str, str]) -> set[str]:
    return {name for name in headers if name.startswith("access-control-")}


def _infer_headers(origin: str | None, token: str | None = TOKEN) -> dict[str, str]:
    headers = {"Content-Type": "application/json"}
    if origin is not None:
        headers["Origin"] = origin
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return headers


# -- raw HTTP -------------------------------------------------------------------------------


def test_preflight_is_answered_without_credentials_with_access_control_on(
    cors_server: ServerProcess, pages: _Pages
) -> None:
    requested = "authorization,content-type,inference-header-content-length,x-not-allowed"
    status, headers, body = _http(
        cors_server, "OPTIONS", INFER, _preflight_headers(pages.origin, requested)
    )
    assert (status, body) == (204, b"")
    assert "content-length" not in headers
    assert headers["access-control-allow-origin"] == pages.origin
    assert headers["vary"] == "Origin"
    assert headers["access-control-allow-methods"] == "GET, POST"
    assert headers["access-control-allow-headers"] == (
        "Authorization, Content-Type, Inference-Header-Content-Length"
    )
    assert headers["access-control-max-age"] == "600"


def test_real_request_is_still_guarded_and_its_refusal_is_readable(
    cors_server: ServerProcess, pages: _Pages
) -> None:
    status, headers, body = _http(cors_server, "POST", INFER, _infer_headers(pages.origin, None))
    assert status == 401
    assert headers["www-authenticate"] == "Bearer"
    assert headers["access-control-allow-origin"] == pages.origin  # the page can read why
    assert "WWW-Authenticate" in headers["access-control-expose-headers"]
    assert "error" in json.loads(body)


def test_simple_request_from_an_allowed_origin_gets_the_origins_headers(
    cors_server: ServerProcess, pages: _Pages
) -> None:
    status, headers, body = _http(cors_server, "POST", INFER, _infer_headers(pages.origin), BODY)
    assert status == 200
    assert json.loads(body)["outputs"][0]["data"] == DATA
    assert headers["access-control-allow-origin"] == pages.origin
    assert headers["vary"] == "Origin"
    assert "access-control-allow-credentials" not in headers  # not configured


def test_binary_answer_exposes_its_json_length(cors_server: ServerProcess) -> None:
    doc = json.loads(BODY)
    doc["outputs"] = [{"name": "OUTPUT0", "parameters": {"binary_data": True}}]
    status, headers, body = _http(
        cors_server, "POST", INFER, _infer_headers("https://app.example"), json.dumps(doc).encode()
    )
    assert status == 200
    assert headers["access-control-allow-origin"] == "https://app.example"
    assert "Inference-Header-Content-Length" in headers["access-control-expose-headers"]
    length = int(headers["inference-header-content-length"])
    assert json.loads(body[:length])["outputs"][0]["name"] == "OUTPUT0"
    np.testing.assert_array_equal(np.frombuffer(body[length:], np.float32), DATA)


@pytest.mark.parametrize(
    "origin",
    [
        "http://localhost:1",
        "https://app.example.evil",
        "HTTPS://APP.EXAMPLE",
        "https://app.example/",
        "null",
        "https://" + "a" * 2000 + ".example",
    ],
)
def test_another_origin_gets_no_cors_headers(cors_server: ServerProcess, origin: str) -> None:
    status, headers, body = _http(
        cors_server, "OPTIONS", INFER, _preflight_headers(origin, "content-type")
    )
    assert status == 403
    assert json.loads(body) == {"error": "CORS preflight refused: the origin is not allowed"}
    assert not _cors_names(headers)
    status, headers, _ = _http(cors_server, "POST", INFER, _infer_headers(origin), BODY)
    assert status == 200  # answered; a browser keeps it from the page
    assert not _cors_names(headers)
    assert headers["vary"] == "Origin"


def test_a_client_without_origin_gets_no_cors_headers(cors_server: ServerProcess) -> None:
    status, headers, body = _http(cors_server, "POST", INFER, _infer_headers(None), BODY)
    assert status == 200 and json.loads(body)["outputs"][0]["data"] == DATA
    assert not _cors_names(headers)


def test_options_that_is_no_preflight_is_routed_as_before(
    cors_server: ServerProcess, pages: _Pages
) -> None:
    headers = {"Origin": pages.origin, "Authorization": f"Bearer {TOKEN}"}
    status, answer, body = _http(cors_server, "OPTIONS", INFER, headers)
    assert status == 405 and json.loads(body) == {"error": "Method Not Allowed"}
    assert answer["access-control-allow-origin"] == pages.origin
    status, _, _ = _http(cors_server, "OPTIONS", INFER, {"Origin": pages.origin})
    assert status == 401  # no preflight: the guard asks for the token as before


def test_with_cors_off_options_and_origins_are_answered_as_before(
    plain_server: ServerProcess, pages: _Pages
) -> None:
    status, headers, body = _http(
        plain_server, "OPTIONS", INFER, _preflight_headers(pages.origin, "content-type")
    )
    assert status == 405 and json.loads(body) == {"error": "Method Not Allowed"}
    assert not _cors_names(headers) and "vary" not in headers
    status, headers, _ = _http(plain_server, "POST", INFER, _infer_headers(pages.origin), BODY)
    assert status == 200
    assert not _cors_names(headers) and "vary" not in headers


def test_grpc_inference_is_unchanged_with_cors_flags_on(cors_server: ServerProcess) -> None:
    with grpcclient.InferenceServerClient(cors_server.grpc_url) as client:
        array = np.array(DATA, dtype=np.float32)
        inp = grpcclient.InferInput("INPUT0", [4], "FP32")
        inp.set_data_from_numpy(array)
        result = client.infer(MODEL, [inp], headers={"authorization": f"Bearer {TOKEN}"})
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), array)


# -- a real browser --------------------------------------------------------------------------

# Writes "JSON <status> <data>" for a JSON inference and "BINARY <floats>" for a binary one
# split with the exposed Inference-Header-Content-Length, or "FAILED <error>".
_PAGE = """<!doctype html>
<html><body><pre id="out">pending</pre>
<script>
const server = %(server)s, token = %(token)s, body = %(body)s;
const out = document.getElementById("out");
const headers = {"Content-Type": "application/json", "Authorization": "Bearer " + token};
async function run() {
  const url = server + "/v2/models/%(model)s/infer";
  const first = await fetch(url, {method: "POST", headers, body: JSON.stringify(body)});
  const doc = await first.json();
  const lines = ["JSON " + first.status + " " + JSON.stringify(doc.outputs[0].data)];
  const binary = {...body, outputs: [{name: "OUTPUT0", parameters: {binary_data: true}}]};
  const second = await fetch(url, {method: "POST", headers, body: JSON.stringify(binary)});
  const length = Number(second.headers.get("Inference-Header-Content-Length"));
  const bytes = await second.arrayBuffer();
  lines.push("BINARY " + JSON.stringify(Array.from(new Float32Array(bytes.slice(length)))));
  return lines.join("\\n");
}
run().then(text => { out.textContent = text; },
           error => { out.textContent = "FAILED " + error; });
</script></body></html>
"""


def _browse(pages: _Pages, server: ServerProcess, origin: str, tmp_path: Path) -> str:
    """What the page, loaded from ``origin``, wrote after its fetches to ``server``."""
    path = f"/page-{server.ports['http']}.html"
    pages.pages[path] = (
        _PAGE
        % {
            "server": json.dumps(f"http://{server.http_url}"),
            "token": json.dumps(TOKEN),
            "body": BODY.decode(),
            "model": MODEL,
        }
    ).encode()
    assert CHROMIUM is not None
    command = [
        CHROMIUM,
        "--headless",
        "--disable-gpu",
        "--no-sandbox",
        "--no-first-run",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--virtual-time-budget=30000",  # virtual time waits for pending fetches
        "--dump-dom",
        origin + path,
    ]
    done = subprocess.run(command, capture_output=True, timeout=TIMEOUT_S, check=False)
    dom = done.stdout.decode(errors="replace")
    found = re.search(r'<pre id="out">(.*?)</pre>', dom, re.S)
    assert found is not None, f"no page in chromium's output: {done.stderr[-2000:]!r}"
    return found.group(1)


@pytest.mark.skipif(CHROMIUM is None, reason=NO_BROWSER)
def test_browser_fetch_with_a_preflight_reads_the_inference(
    cors_server: ServerProcess, pages: _Pages, tmp_path: Path
) -> None:
    text = _browse(pages, cors_server, pages.origin, tmp_path)
    shown = "[" + ",".join(f"{x:g}" for x in DATA) + "]"  # as JSON.stringify writes them
    assert text.splitlines() == [f"JSON 200 {shown}", f"BINARY {shown}"]


@pytest.mark.skipif(CHROMIUM is None, reason=NO_BROWSER)
def test_browser_fetch_fails_with_cors_off(
    plain_server: ServerProcess, pages: _Pages, tmp_path: Path
) -> None:
    text = _browse(pages, plain_server, pages.origin, tmp_path)
    assert text == "FAILED TypeError: Failed to fetch"


@pytest.mark.skipif(CHROMIUM is None, reason=NO_BROWSER)
def test_browser_fetch_fails_from_an_origin_not_allowed(
    cors_server: ServerProcess, pages: _Pages, tmp_path: Path
) -> None:
    text = _browse(pages, cors_server, pages.other_origin, tmp_path)
    assert text == "FAILED TypeError: Failed to fetch"
