"""The OpenAI-compatible API (docs/openai.md) on the real server's HTTP port, over the examples
``mock_llm`` (decoupled, TensorRT-LLM format, counts tokens) and ``echo_text`` (plain), and this
module's ``vllm_echo`` (vLLM format: it answers the settings it was given) and ``probe_llm``
(records cancellations in a folder; fails on request).

The clients: the official ``openai`` package, sync and async (the test extra; its tests skip
where it is not installed), and raw HTTP (``http.client``; aiohttp for many streams at once)
reading the wire format itself (JSON documents, server-sent events ``data: {...}`` ending
``data: [DONE]``, OpenAI's error document). Expected texts are computed from the prompts
sent."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import http.client
import json
import re
import shutil
import socket
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pytest

from testkit.server_process import ServerProcess

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "model_repository"
WAIT_S = 60.0
MAX_INPUT = 4 << 20  # the server's --http-max-input-size here
TOKEN = re.compile(r"\S+\s*")

VLLM_CONFIG = """
name: "vllm_echo"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [
  { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "stream" data_type: TYPE_BOOL dims: [ 1 ] },
  { name: "sampling_parameters" data_type: TYPE_STRING dims: [ 1 ] optional: true },
  { name: "exclude_input_in_output" data_type: TYPE_BOOL dims: [ 1 ] optional: true },
  { name: "return_num_input_tokens" data_type: TYPE_BOOL dims: [ 1 ] optional: true },
  { name: "return_num_output_tokens" data_type: TYPE_BOOL dims: [ 1 ] optional: true }
]
output [
  { name: "text_output" data_type: TYPE_STRING dims: [ -1 ] },
  { name: "num_input_tokens" data_type: TYPE_UINT32 dims: [ 1 ] },
  { name: "num_output_tokens" data_type: TYPE_UINT32 dims: [ 1 ] },
  { name: "finish_reason" data_type: TYPE_STRING dims: [ -1 ] }
]
"""
# Answers, as its text, the JSON of what it received (the settings, stream, the echo flag).
VLLM_MODEL = """
import json
import numpy as np
import triton_python_backend_utils as pb_utils

def _get(request, name):
    t = pb_utils.get_input_tensor_by_name(request, name)
    return None if t is None else t.as_numpy().reshape(-1)[0]

class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sampling = _get(request, "sampling_parameters")
            seen = {
                "sampling": json.loads(sampling) if sampling is not None else None,
                "stream": bool(_get(request, "stream")),
                "exclude": bool(_get(request, "exclude_input_in_output")),
                "counts": bool(_get(request, "return_num_output_tokens")),
            }
            text = json.dumps(seen, sort_keys=True).encode()
            out = pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("text_output", np.array([text], dtype=np.object_)),
                pb_utils.Tensor("num_input_tokens", np.array([3], dtype=np.uint32)),
                pb_utils.Tensor("num_output_tokens", np.array([1], dtype=np.uint32)),
                pb_utils.Tensor("finish_reason", np.array([b"length"], dtype=np.object_)),
            ])
            sender = request.get_response_sender()
            sender.send(out, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""
PROBE_CONFIG = """
name: "probe_llm"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "text_output" data_type: TYPE_STRING dims: [ 1 ] } ]
parameters { key: "probe_dir" value: { string_value: "%s" } }
"""
# One word every 50 ms, from a thread per request; a cancelled request leaves a file
# "cancelled-<prompt's first word>" in probe_dir; a prompt starting "FAIL" sends one word,
# then an error.
PROBE_MODEL = """
import json, os, threading, time
import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL

def _text(word):
    return pb_utils.InferenceResponse(output_tensors=[
        pb_utils.Tensor("text_output", np.array([word.encode()], dtype=np.object_))])

class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.dir = config["parameters"]["probe_dir"]["string_value"]

    def execute(self, requests):
        for request in requests:
            prompt = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy()
            words = prompt.reshape(-1)[0].decode().split()
            sender = request.get_response_sender()
            threading.Thread(target=self.run, args=(sender, words), daemon=True).start()
        return None

    def run(self, sender, words):
        for i, word in enumerate(words):
            if i == 1 and words[0] == "FAIL":
                error = pb_utils.TritonError("the probe failed on purpose")
                sender.send(pb_utils.InferenceResponse(error=error), flags=FINAL)
                return
            if sender.is_cancelled():
                open(os.path.join(self.dir, "cancelled-" + words[0]), "w").close()
                sender.send(flags=FINAL)
                return
            sender.send(_text(word + " "))
            time.sleep(0.05)
        sender.send(flags=FINAL)
"""


def _model(repo: Path, name: str, config: str, model: str) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(config)
    (repo / name / "1" / "model.py").write_text(model)


@pytest.fixture(scope="module")
def probe_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("probe")


@pytest.fixture(scope="module")
def openai_repo(tmp_path_factory: pytest.TempPathFactory, probe_dir: Path) -> Path:
    repo = tmp_path_factory.mktemp("openai") / "repo"
    repo.mkdir()
    for name in ("mock_llm", "echo_text", "add_sub_python", "embed_text"):
        shutil.copytree(EXAMPLES / name, repo / name)
    config = repo / "mock_llm" / "config.pbtxt"  # 2 ms a token: quick tests
    config.write_text(config.read_text().replace('string_value: "10"', 'string_value: "2"'))
    shutil.copytree(EXAMPLES / "echo_text", repo / "echo_chat")  # with a template of its own
    config = repo / "echo_chat" / "config.pbtxt"
    config.write_text(
        config.read_text().replace('name: "echo_text"', 'name: "echo_chat"')
        + 'parameters { key: "chat_template" value: { string_value: "<|{role}|>{content}\\n" } }\n'
        + 'parameters { key: "chat_generation_prompt" value: { string_value: "<|assistant|>" } }\n'
    )
    _model(repo, "vllm_echo", VLLM_CONFIG, VLLM_MODEL)
    _model(repo, "probe_llm", PROBE_CONFIG % probe_dir, PROBE_MODEL)
    return repo


@pytest.fixture(scope="module")
def srv(openai_repo: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess([openai_repo], "--http-max-input-size", str(MAX_INPUT))
    try:
        proc.wait_live(90.0, endpoint="ready")
        yield proc
    finally:
        proc.stop()


# -- clients -----------------------------------------------------------------------------------
def _request(
    srv: ServerProcess, method: str, path: str, body: Any = None, raw: bytes | None = None
) -> tuple[int, str, bytes]:
    host, port = srv.http_url.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=WAIT_S)
    try:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        headers = {"Content-Type": "application/json"} if data is not None else {}
        conn.request(method, path, body=data, headers=headers)
        response = conn.getresponse()
        return response.status, response.getheader("Content-Type") or "", response.read()
    finally:
        conn.close()


def _post(srv: ServerProcess, path: str, body: Any) -> dict[str, Any]:
    status, kind, data = _request(srv, "POST", path, body)
    assert status == 200, data
    assert kind.startswith("application/json")
    doc: dict[str, Any] = json.loads(data)
    return doc


def _events(srv: ServerProcess, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    status, kind, data = _request(srv, "POST", path, {**body, "stream": True})
    assert status == 200, data
    assert kind.startswith("text/event-stream")
    return _parse_events(data)


def _parse_events(data: bytes) -> list[dict[str, Any]]:
    blocks = data.decode().split("\n\n")
    assert blocks[-1] == "" and blocks[-2] == "data: [DONE]", data[-200:]
    assert all(b.startswith("data: ") for b in blocks[:-1])
    return [json.loads(b[len("data: ") :]) for b in blocks[:-2]]


def _error(
    srv: ServerProcess, path: str, body: Any, status: int, raw: bytes | None = None
) -> dict[str, Any]:
    got, _, data = _request(srv, "POST", path, body, raw)
    assert got == status, data
    error: dict[str, Any] = json.loads(data)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return error


def _words(text: str) -> list[str]:
    return TOKEN.findall(text)


def _chat_prompt(*messages: tuple[str, str]) -> str:
    return "\n".join([f"{role}: {content}" for role, content in messages] + ["assistant:"])


# -- models ------------------------------------------------------------------------------------
def test_models_are_listed_and_found(srv: ServerProcess) -> None:
    status, _, data = _request(srv, "GET", "/v1/models")
    assert status == 200
    doc = json.loads(data)
    assert doc["object"] == "list"
    ids = [m["id"] for m in doc["data"]]
    expected = ["mock_llm", "echo_text", "echo_chat", "add_sub_python", "vllm_echo", "probe_llm"]
    expected.append("embed_text")
    assert ids == sorted(expected)
    assert all(m["object"] == "model" and m["owned_by"] == "tritium" for m in doc["data"])
    status, _, data = _request(srv, "GET", "/v1/models/mock_llm")
    assert status == 200 and json.loads(data)["id"] == "mock_llm"
    status, _, data = _request(srv, "GET", "/v1/models/nope")
    assert status == 404
    assert json.loads(data)["error"]["code"] == "model_not_found"


# -- completions -------------------------------------------------------------------------------
def test_completion_at_once_with_usage_and_length(srv: ServerProcess) -> None:
    prompt = "the quick brown fox jumps"
    doc = _post(srv, "/v1/completions", {"model": "mock_llm", "prompt": prompt, "max_tokens": 3})
    assert doc["object"] == "text_completion" and doc["model"] == "mock_llm"
    assert doc["id"].startswith("cmpl-")
    assert doc["choices"] == [
        {
            "index": 0,
            "text": "".join(_words(prompt)[:3]),
            "logprobs": None,
            "finish_reason": "length",
        }
    ]
    assert doc["usage"] == {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}


def test_completion_stream_with_usage_chunk(srv: ServerProcess) -> None:
    prompt = "one two three four"
    events = _events(
        srv,
        "/v1/completions",
        {"model": "mock_llm", "prompt": prompt, "stream_options": {"include_usage": True}},
    )
    *chunks, usage = events
    assert [c["choices"][0]["text"] for c in chunks] == [*_words(prompt), ""]
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None] * 4 + ["stop"]
    assert all(c["usage"] is None and c["object"] == "text_completion" for c in chunks)
    assert len({c["id"] for c in events}) == 1
    assert usage["choices"] == []
    assert usage["usage"] == {"prompt_tokens": 4, "completion_tokens": 4, "total_tokens": 8}


def test_n_choices_stream_each_their_own_text(srv: ServerProcess) -> None:
    prompt = "alpha beta gamma"
    events = _events(srv, "/v1/completions", {"model": "mock_llm", "prompt": prompt, "n": 3})
    texts: dict[int, str] = {}
    finishes: dict[int, str] = {}
    for event in events:
        (choice,) = event["choices"]
        texts[choice["index"]] = texts.get(choice["index"], "") + choice["text"]
        if choice["finish_reason"] is not None:
            finishes[choice["index"]] = choice["finish_reason"]
    assert texts == {0: prompt, 1: prompt, 2: prompt}
    assert finishes == {0: "stop", 1: "stop", 2: "stop"}
    doc = _post(srv, "/v1/completions", {"model": "mock_llm", "prompt": prompt, "n": 2})
    assert [c["text"] for c in doc["choices"]] == [prompt, prompt]
    assert doc["usage"] == {"prompt_tokens": 3, "completion_tokens": 6, "total_tokens": 9}


def test_stop_and_echo_applied_by_the_server(srv: ServerProcess) -> None:
    prompt = "red green blue yellow"
    body = {"model": "mock_llm", "prompt": prompt, "stop": ["blue", "nothing"], "echo": True}
    doc = _post(srv, "/v1/completions", body)
    assert doc["choices"][0]["text"] == prompt + "red green "
    assert doc["choices"][0]["finish_reason"] == "stop"
    events = _events(srv, "/v1/completions", body)
    assert "".join(e["choices"][0]["text"] for e in events) == prompt + "red green "


def test_plain_model_answers_and_refuses_what_it_cannot_honour(srv: ServerProcess) -> None:
    doc = _post(srv, "/v1/completions", {"model": "echo_text", "prompt": "hi", "stop": "i"})
    assert doc["choices"][0]["text"] == "echo: h" and doc["usage"] is None
    events = _events(srv, "/v1/completions", {"model": "echo_text", "prompt": "hi"})
    assert [e["choices"][0]["text"] for e in events] == ["echo: hi", ""]
    for key, value in [("temperature", 0.2), ("max_tokens", 4), ("seed", 3), ("top_p", 0.5)]:
        error = _error(
            srv, "/v1/completions", {"model": "echo_text", "prompt": "x", key: value}, 400
        )
        assert (error["param"], error["code"]) == (key, "unsupported_parameter")
        assert "echo_text" in error["message"]
    body = {
        "model": "echo_text",
        "prompt": "x",
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    assert _error(srv, "/v1/completions", body, 400)["param"] == "stream_options"


def test_vllm_format_gets_sampling_parameters(srv: ServerProcess) -> None:
    body = {
        "model": "vllm_echo",
        "prompt": "p",
        "max_tokens": 5,
        "temperature": 0.7,
        "top_p": 0.9,
        "seed": 11,
        "stop": "zz",
        "echo": True,
    }
    doc = _post(srv, "/v1/completions", body)
    (choice,) = doc["choices"]
    seen = json.loads(choice["text"])
    assert seen == {
        "sampling": {"max_tokens": 5, "temperature": 0.7, "top_p": 0.9, "seed": 11, "stop": ["zz"]},
        "stream": False,
        "exclude": False,
        "counts": True,
    }
    assert choice["finish_reason"] == "length"  # the model's own
    assert doc["usage"] == {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}
    events = _events(srv, "/v1/completions", {"model": "vllm_echo", "prompt": "p"})
    assert json.loads(events[0]["choices"][0]["text"])["stream"] is True


# -- chat --------------------------------------------------------------------------------------
def test_chat_at_once(srv: ServerProcess) -> None:
    messages = [
        {"role": "system", "content": "be kind"},
        {"role": "user", "content": "hello there"},
    ]
    doc = _post(
        srv,
        "/v1/chat/completions",
        {"model": "mock_llm", "messages": messages, "max_completion_tokens": 50},
    )
    assert doc["object"] == "chat.completion" and doc["id"].startswith("chatcmpl-")
    (choice,) = doc["choices"]
    prompt = _chat_prompt(("system", "be kind"), ("user", "hello there"))
    assert choice["message"] == {"role": "assistant", "content": prompt}
    assert choice["finish_reason"] == "stop"
    assert doc["usage"]["prompt_tokens"] == len(_words(prompt))


def test_chat_stream_role_first_then_content(srv: ServerProcess) -> None:
    messages = [{"role": "user", "content": "a b c"}]
    events = _events(
        srv,
        "/v1/chat/completions",
        {
            "model": "mock_llm",
            "messages": messages,
            "stream_options": {"include_usage": True},
            "stop": "c",
        },
    )
    *chunks, usage = events
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all(c["object"] == "chat.completion.chunk" for c in events)
    content = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert content == "user: a b "
    assert chunks[-1]["choices"][0] == {
        "index": 0,
        "delta": {},
        "logprobs": None,
        "finish_reason": "stop",
    }
    assert usage["usage"]["prompt_tokens"] == len(_words(_chat_prompt(("user", "a b c"))))


def test_chat_template_of_the_model(srv: ServerProcess) -> None:
    messages = [{"role": "system", "content": "s {x}"}, {"role": "user", "content": "u"}]
    doc = _post(srv, "/v1/chat/completions", {"model": "echo_chat", "messages": messages})
    content = doc["choices"][0]["message"]["content"]
    assert content == "echo: <|system|>s {x}\n<|user|>u\n<|assistant|>"
    doc = _post(srv, "/v1/chat/completions", {"model": "echo_text", "messages": messages})
    assert doc["choices"][0]["message"]["content"] == "echo: system: s {x}\nuser: u\nassistant:"


# -- embeddings --------------------------------------------------------------------------------
def _embedding(text: str, size: int = 32) -> tuple[list[float], int]:
    """embed_text's vector, computed here from its documented rule."""
    vector = np.zeros(32)
    words = re.findall(r"[0-9a-z]+", text.lower())
    for word in words:
        digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
        vector[digest[0] % 32] += 1.0 if digest[1] & 1 else -1.0
    vector = vector[:size]
    norm = np.linalg.norm(vector)
    return list(vector / norm if norm else vector), len(words)


def test_embeddings_float_base64_and_dimensions(srv: ServerProcess) -> None:
    texts = ["The cat sat", "a dog ran far away"]
    doc = _post(srv, "/v1/embeddings", {"model": "embed_text", "input": texts})
    assert doc["object"] == "list" and doc["model"] == "embed_text"
    expected = [_embedding(t) for t in texts]
    assert [d["index"] for d in doc["data"]] == [0, 1]
    for item, (vector, _) in zip(doc["data"], expected, strict=True):
        assert item["object"] == "embedding"
        assert np.allclose(item["embedding"], vector, atol=1e-6)
    words = sum(n for _, n in expected)
    assert doc["usage"] == {"prompt_tokens": words, "total_tokens": words}
    packed = _post(
        srv,
        "/v1/embeddings",
        {"model": "embed_text", "input": texts[0], "encoding_format": "base64"},
    )
    raw = np.frombuffer(base64.b64decode(packed["data"][0]["embedding"]), dtype="<f4")
    assert np.allclose(raw, expected[0][0], atol=1e-6)
    short = _post(
        srv, "/v1/embeddings", {"model": "embed_text", "input": texts[1], "dimensions": 8}
    )
    assert np.allclose(short["data"][0]["embedding"], _embedding(texts[1], 8)[0], atol=1e-6)


def test_embeddings_refusals(srv: ServerProcess) -> None:
    error = _error(srv, "/v1/embeddings", {"model": "embed_text", "input": [[1, 2]]}, 400)
    assert (error["param"], error["code"]) == ("input", "unsupported_parameter")
    error = _error(srv, "/v1/embeddings", {"model": "embed_text", "input": ["x"] * 65}, 400)
    assert error["param"] == "input"
    error = _error(srv, "/v1/embeddings", {"model": "mock_llm", "input": "x"}, 400)
    assert error["code"] == "model_not_supported" and "'embedding'" in error["message"]
    error = _error(
        srv, "/v1/embeddings", {"model": "embed_text", "input": "x", "dimensions": 40}, 400
    )
    assert "dimensions must be between 1 and 32" in error["message"]
    error = _error(srv, "/v1/embeddings", {"model": "nope", "input": "x"}, 404)
    assert error["code"] == "model_not_found"
    error = _error(srv, "/v1/embeddings", {"model": "embed_text", "input": "x", "user": "u"}, 400)
    assert error["param"] == "user"


# -- refusals ----------------------------------------------------------------------------------
def test_refusals_in_openai_error_format(srv: ServerProcess) -> None:
    error = _error(srv, "/v1/completions", None, 400, raw=b"{not json")
    assert error["type"] == "invalid_request_error" and "JSON" in error["message"]
    error = _error(srv, "/v1/completions", {"model": "nope", "prompt": "x"}, 404)
    assert error["code"] == "model_not_found"
    error = _error(srv, "/v1/completions", {"model": "mock_llm", "prompt": "x", "bogus": 1}, 400)
    assert error["message"] == "Unrecognized request argument supplied: bogus"
    error = _error(srv, "/v1/chat/completions", {"model": "mock_llm", "messages": [], "n": 1}, 400)
    assert error["param"] == "messages"
    error = _error(srv, "/v1/completions", {"model": "add_sub_python", "prompt": "x"}, 400)
    assert "text_input" in error["message"] and error["param"] == "model"
    error = _error(srv, "/v1/completions", {"model": "mock_llm", "prompt": "x", "logprobs": 1}, 400)
    assert error["code"] == "unsupported_parameter"
    status, _, _ = _request(srv, "GET", "/v1/completions")
    assert status == 405


def test_body_over_the_limit_is_refused_and_a_large_one_is_served(srv: ServerProcess) -> None:
    big = "w " * (MAX_INPUT // 2 + 16)
    error = _error(srv, "/v1/completions", {"model": "echo_text", "prompt": big}, 413)
    assert "exceeds the maximum allowed value" in error["message"]
    assert error["type"] == "invalid_request_error"
    status, _, data = _request(
        srv, "POST", "/v2/models/echo_text/infer", raw=b"x" * (MAX_INPUT + 1)
    )
    assert status == 400 and "exceeds" in json.loads(data)["error"]  # Triton's answer there
    prompt = "x" * (2 << 20)  # over the front-end's 1 MiB: parsed off the loop
    doc = _post(srv, "/v1/completions", {"model": "echo_text", "prompt": prompt})
    assert doc["choices"][0]["text"] == "echo: " + prompt


def test_model_error_mid_stream_is_an_error_event(srv: ServerProcess) -> None:
    status, _, data = _request(
        srv, "POST", "/v1/completions", {"model": "probe_llm", "prompt": "FAIL now", "stream": True}
    )
    assert status == 200
    blocks = data.decode().split("\n\n")
    first = json.loads(blocks[0][len("data: ") :])
    assert first["choices"][0]["text"] == "FAIL "
    error = json.loads(blocks[1][len("data: ") :])["error"]
    assert error["message"] == "the probe failed on purpose" and error["type"] == "server_error"
    assert blocks[2] == "data: [DONE]"
    error = _error(srv, "/v1/completions", {"model": "probe_llm", "prompt": "FAIL now"}, 500)
    assert error["message"] == "the probe failed on purpose"


# -- disconnects and load ----------------------------------------------------------------------
def test_client_gone_mid_stream_cancels_the_request(srv: ServerProcess, probe_dir: Path) -> None:
    host, port = srv.http_url.split(":")
    words = " ".join(["gone"] + [f"w{i}" for i in range(400)])  # 20 s at 50 ms a word
    body = json.dumps({"model": "probe_llm", "prompt": words, "stream": True}).encode()
    with socket.create_connection((host, int(port)), timeout=WAIT_S) as sock:
        sock.sendall(
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        seen = b""
        while b"gone " not in seen:
            seen += sock.recv(4096)
        assert seen.startswith(b"HTTP/1.1 200")
    deadline = time.monotonic() + WAIT_S
    while not (probe_dir / "cancelled-gone").exists():
        assert time.monotonic() < deadline, "the model's request was never cancelled"
        time.sleep(0.05)
    doc = _post(srv, "/v1/completions", {"model": "mock_llm", "prompt": "still here"})
    assert doc["choices"][0]["text"] == "still here"


def test_client_gone_before_an_unstreamed_answer_cancels_it(
    srv: ServerProcess, probe_dir: Path
) -> None:
    host, port = srv.http_url.split(":")
    words = " ".join(["unstreamed"] + [f"w{i}" for i in range(400)])
    body = json.dumps({"model": "probe_llm", "prompt": words}).encode()
    with socket.create_connection((host, int(port)), timeout=WAIT_S) as sock:
        sock.sendall(
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        time.sleep(0.3)  # the model is sending its words (into the server's answer)
    deadline = time.monotonic() + WAIT_S
    while not (probe_dir / "cancelled-unstreamed").exists():
        assert time.monotonic() < deadline, "the model's request was never cancelled"
        time.sleep(0.05)


async def _stream_async(session: aiohttp.ClientSession, url: str, prompt: str) -> tuple[str, float]:
    started = time.perf_counter()
    first = 0.0
    text = ""
    body = {"model": "mock_llm", "messages": [{"role": "user", "content": prompt}], "stream": True}
    async with session.post(url, json=body) as response:
        assert response.status == 200
        buffer = b""
        async for data in response.content.iter_any():
            buffer += data
        for block in buffer.decode().split("\n\n"):
            if block.startswith("data: {"):
                delta = json.loads(block[6:])["choices"][0]["delta"]
                if delta.get("content") and not first:
                    first = time.perf_counter() - started
                text += delta.get("content", "")
        assert buffer.endswith(b"data: [DONE]\n\n")
    return text, first


def test_many_concurrent_streams_async(srv: ServerProcess) -> None:
    url = f"http://{srv.http_url}/v1/chat/completions"

    async def main() -> list[tuple[str, float]]:
        timeout = aiohttp.ClientTimeout(total=WAIT_S)
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
            jobs = [_stream_async(session, url, f"client {i} says hi") for i in range(64)]
            return await asyncio.gather(*jobs)

    results = asyncio.run(main())
    for i, (text, _) in enumerate(results):
        assert text == _chat_prompt(("user", f"client {i} says hi"))
    firsts = sorted(first for _, first in results)
    p50, top = firsts[32] * 1000, firsts[-1] * 1000
    print(f"64 streams: time to first token p50 {p50:.1f} ms, max {top:.1f} ms")


def test_openai_off_by_flag(openai_repo: Path) -> None:
    proc = ServerProcess([openai_repo], "--openai=false", "--model-control-mode=explicit")
    try:
        for method, path in [("GET", "/v1/models"), ("POST", "/v1/completions")]:
            status, _, data = _request(proc, method, path, {"model": "mock_llm", "prompt": "x"})
            assert status == 404, data
    finally:
        proc.stop()


# -- the official client -----------------------------------------------------------------------
def test_official_client_sync(srv: ServerProcess) -> None:
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=f"http://{srv.http_url}/v1", api_key="unused", max_retries=0)
    assert "mock_llm" in [m.id for m in client.models.list()]
    assert client.models.retrieve("echo_text").id == "echo_text"
    prompt = "left right up down"
    done = client.completions.create(model="mock_llm", prompt=prompt, max_tokens=2)
    assert done.choices[0].text == "left right " and done.choices[0].finish_reason == "length"
    assert done.usage is not None and done.usage.completion_tokens == 2
    chat = client.chat.completions.create(
        model="mock_llm", messages=[{"role": "user", "content": "yes no"}], n=2
    )
    expected = _chat_prompt(("user", "yes no"))
    assert [c.message.content for c in chat.choices] == [expected, expected]
    stream = client.chat.completions.create(
        model="mock_llm",
        messages=[{"role": "user", "content": "yes no"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == expected
    assert chunks[-1].usage is not None and chunks[-1].usage.prompt_tokens == len(_words(expected))
    with pytest.raises(openai.BadRequestError) as bad:
        client.completions.create(model="echo_text", prompt="x", temperature=0.1)
    assert bad.value.code == "unsupported_parameter" and bad.value.param == "temperature"
    with pytest.raises(openai.NotFoundError) as missing:
        client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
    assert missing.value.code == "model_not_found"
    vectors = client.embeddings.create(model="embed_text", input=["red fox", "blue sky"])
    assert [len(d.embedding) for d in vectors.data] == [32, 32]  # the client asks for base64
    assert np.allclose(vectors.data[0].embedding, _embedding("red fox")[0], atol=1e-6)
    with pytest.raises(openai.APIError, match="failed on purpose"):
        list(client.completions.create(model="probe_llm", prompt="FAIL x", stream=True))


def test_official_client_async(srv: ServerProcess) -> None:
    openai = pytest.importorskip("openai")

    async def one(client: Any, i: int) -> str:
        prompt = f"async client {i}"
        stream = await client.completions.create(model="mock_llm", prompt=prompt, stream=True)
        text = "".join([chunk.choices[0].text async for chunk in stream])
        assert text == prompt
        return text

    async def main() -> None:
        client = openai.AsyncOpenAI(
            base_url=f"http://{srv.http_url}/v1", api_key="unused", max_retries=0
        )
        texts = await asyncio.gather(*(one(client, i) for i in range(16)))
        assert len(set(texts)) == 16
        done = await client.completions.create(model="echo_text", prompt="hey")
        assert done.choices[0].text == "echo: hey"
        await client.close()

    asyncio.run(main())


def test_restricted_api_covers_the_openai_routes(openai_repo: Path) -> None:
    proc = ServerProcess(
        [openai_repo],
        "--http-restricted-api=inference:infer-key=secret",
        "--http-restricted-api=metadata:meta-key=secret",
        "--model-control-mode=explicit",
        "--load-model=echo_text",
    )
    try:
        body = {"model": "echo_text", "prompt": "x"}
        for method, path in [
            ("POST", "/v1/completions"),
            ("POST", "/v1/chat/completions"),
            ("GET", "/v1/models"),
            ("GET", "/v1/models/echo_text"),
        ]:
            status, _, data = _request(proc, method, path, body)
            assert status == 403, (path, data)
            assert b"This API is restricted" in data
        host, port = proc.http_url.split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=WAIT_S)
        headers = {"Content-Type": "application/json", "infer-key": "secret"}
        conn.request("POST", "/v1/completions", body=json.dumps(body), headers=headers)
        response = conn.getresponse()
        assert response.status == 200
        assert json.loads(response.read())["choices"][0]["text"] == "echo: x"
        conn.close()
    finally:
        proc.stop()


def _log_lines(path: Path, count: int) -> list[dict[str, Any]]:
    deadline = time.monotonic() + WAIT_S
    while True:
        lines = path.read_text().splitlines() if path.exists() else []
        if len(lines) >= count or time.monotonic() > deadline:
            return [json.loads(line) for line in lines]
        time.sleep(0.05)


def test_access_log_has_a_line_per_choice(openai_repo: Path, tmp_path: Path) -> None:
    log = tmp_path / "access.jsonl"
    proc = ServerProcess([openai_repo], "--access-log-file", str(log))
    try:
        proc.wait_live(90.0, endpoint="ready")
        doc = _post(proc, "/v1/completions", {"model": "mock_llm", "prompt": "a b"})
        events = _events(
            proc,
            "/v1/chat/completions",
            {"model": "mock_llm", "messages": [{"role": "user", "content": "c"}], "n": 2},
        )
        _error(proc, "/v1/completions", {"model": "nope", "prompt": "x"}, 404)
        _error(proc, "/v1/completions", {"model": "probe_llm", "prompt": "FAIL x"}, 500)
        lines = _log_lines(log, 5)
    finally:
        proc.stop()
    assert len(lines) == 5, lines
    once, chat0, chat1, missing, failed = lines
    assert (once["model"], once["status"], once["code"], once["stream"]) == (
        "mock_llm",
        "SUCCESS",
        200,
        False,
    )
    assert once["request_id"] == doc["id"] + "-0" and once["protocol"] == "http"
    assert once["bytes_out"] == len(json.dumps(doc, separators=(",", ":")))
    assert once["bytes_in"] > 0 and once["compute_us"] is not None
    assert {chat0["request_id"], chat1["request_id"]} == {
        events[0]["id"] + "-0",
        events[0]["id"] + "-1",
    }
    assert all(
        c["stream"] and c["status"] == "SUCCESS" and c["code"] == 200 for c in (chat0, chat1)
    )
    assert chat0["bytes_out"] + chat1["bytes_out"] > 0
    assert (missing["model"], missing["status"], missing["code"]) == ("nope", "NOT_FOUND", 404)
    assert (failed["model"], failed["status"], failed["code"]) == ("probe_llm", "INTERNAL", 500)


def _samples(srv: ServerProcess) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    from prometheus_client.parser import text_string_to_metric_families

    url = f"http://127.0.0.1:{srv.ports['metrics']}/metrics"
    with urllib.request.urlopen(url, timeout=WAIT_S) as response:
        text = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith("tritium_openai_")
    }


def test_metrics_per_route_and_token_times(srv: ServerProcess) -> None:
    before = _samples(srv)
    _request(srv, "GET", "/v1/models/nope")
    body = {"model": "mock_llm", "messages": [{"role": "user", "content": "a b c"}]}
    events = _events(srv, "/v1/chat/completions", body)
    tokens = len([e for e in events if e["choices"][0]["delta"].get("content")])
    assert tokens == len(_words(_chat_prompt(("user", "a b c"))))
    after = _samples(srv)

    def grew(name: str, **labels: str) -> float:
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0.0) - before.get(key, 0.0)

    assert grew("tritium_openai_requests_total", route="model", code="404") == 1
    assert grew("tritium_openai_requests_total", route="chat_completions", code="200") == 1
    first = "tritium_openai_time_to_first_token_seconds"
    assert grew(f"{first}_count", model="mock_llm") == 1
    assert grew(f"{first}_bucket", model="mock_llm", le="+Inf") == 1
    assert grew(f"{first}_sum", model="mock_llm") > 0
    per = "tritium_openai_time_per_output_token_seconds_count"
    assert grew(per, model="mock_llm") == tokens - 1


def test_openai_port_of_its_own(openai_repo: Path) -> None:
    proc = ServerProcess(
        [openai_repo],
        "--openai-port",
        "0",
        "--model-control-mode=explicit",
        "--load-model=echo_text",
    )
    try:

        def ask(port: int, method: str, path: str, body: Any = None) -> tuple[int, bytes]:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT_S)
            try:
                data = None if body is None else json.dumps(body).encode()
                conn.request(method, path, body=data)
                response = conn.getresponse()
                return response.status, response.read()
            finally:
                conn.close()

        openai_port, http_port = proc.ports["openai"], proc.ports["http"]
        assert openai_port not in (http_port, proc.ports["grpc"], proc.ports["metrics"])
        status, data = ask(openai_port, "GET", "/v1/models")
        assert status == 200 and [m["id"] for m in json.loads(data)["data"]] == ["echo_text"]
        body = {"model": "echo_text", "messages": [{"role": "user", "content": "hi"}]}
        status, data = ask(openai_port, "POST", "/v1/chat/completions", body)
        assert status == 200
        assert json.loads(data)["choices"][0]["message"]["content"] == "echo: user: hi\nassistant:"
        assert ask(openai_port, "GET", "/v2/health/ready")[0] == 404  # KServe stays on its port
        assert ask(http_port, "GET", "/v1/models")[0] == 404  # and OpenAI on its own
        assert ask(http_port, "GET", "/v2/health/ready")[0] == 200
        assert f"Started OpenAI Service at 127.0.0.1:{openai_port}" in proc.log_text()
    finally:
        proc.stop()
