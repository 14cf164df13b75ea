"""The logging extension and the log flags (issue 15 item 2), over HTTP and gRPC with the
official clients.

``get_log_settings`` / ``update_log_settings`` read and change every setting at run time with
Triton's answers and error texts; a change reaches the server's own records and the Python
stubs already running (their ``pb_utils.Logger.log_verbose`` appears only once
``log_verbose_level`` is raised); ``--log-file`` receives every record and the console none;
``--log-format ISO8601`` and the start-up table of models have Triton's layouts.
"""

from __future__ import annotations

import json
import re
import subprocess
import textwrap
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from tests.support.clients import client, make_input
from testkit.server_process import ServerProcess, server_command
from tests.support.stub_procs import wait_until
from tritonclient.grpc import service_pb2
from tritonclient.utils import InferenceServerException

PROTOCOLS = ("http", "grpc")
MODEL = "log_model"
BROKEN = "log_broken"
TIMEOUT_S = 30.0
DEFAULTS = {
    "log_info": True,
    "log_warning": True,
    "log_error": True,
    "log_verbose_level": 0,
    "log_format": "default",
}

MODEL_PY = textwrap.dedent("""
    import numpy as np
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def execute(self, requests):
            responses = []
            for request in requests:
                data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
                tag = f"tag{int(data[0])}"
                pb_utils.Logger.log_verbose(f"model verbose {tag}")
                pb_utils.Logger.log_info(f"model info {tag}")
                pb_utils.Logger.log_error(f"model error {tag}")  # always on: logged last
                responses.append(pb_utils.InferenceResponse(
                    output_tensors=[pb_utils.Tensor("OUTPUT0", data)]
                ))
            return responses
""")

BROKEN_PY = textwrap.dedent("""
    class TritonPythonModel:
        def initialize(self, args):
            raise RuntimeError("broken on purpose")
""")

DEFAULT_LINE = r"^{letter}\d{{4}} \d\d:\d\d:\d\d\.\d{{6}} \d+ {where}\] {text}$"
ISO_LINE = r"^\d{{4}}-\d\d-\d\dT\d\d:\d\d:\d\dZ {letter} \d+ {where}\] {text}$"
# Triton's qa/L0_logging/log_format_test.py reads tables with these.
TABLE_BORDER = re.compile(r"^\+[-+]+\+$")
TABLE_ROW = re.compile(r"^\| (?P<row>.*?) \|$")


def _model(repo: Path, name: str, source: str) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(
        textwrap.dedent(f"""
            name: "{name}"
            backend: "python"
            max_batch_size: 0
            input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
            output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
        """)
    )
    (repo / name / "1" / "model.py").write_text(source)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("logging")
    _model(root, MODEL, MODEL_PY)
    _model(root, BROKEN, BROKEN_PY)
    return root


@pytest.fixture(scope="module")
def log_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("logfile") / "tritium.log"
    path.write_text("a line from before\n")  # --log-file appends
    return path


@pytest.fixture(scope="module")
def server(repo: Path, log_file: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess(
        [repo], "--exit-on-error=false", "--strict-readiness=false", f"--log-file={log_file}"
    )
    yield proc
    proc.stop()


@pytest.fixture
def settled(server: ServerProcess) -> Iterator[ServerProcess]:
    """The shared server, its log settings back to the defaults after the test."""
    yield server
    c = client("http", server.http_url)
    try:
        c.update_log_settings(DEFAULTS)
    finally:
        c.close()


def settings(
    protocol: str, c: Any, update: dict[str, Any] | None = None, headers: Any = None
) -> dict[str, Any]:
    """The settings the server answered, as a plain dict whichever the protocol."""
    if update is None:
        answer = c.get_log_settings(headers=headers)
    else:
        answer = c.update_log_settings(update, headers=headers)
    if protocol == "http":
        return dict(answer)
    return {k: getattr(v, v.WhichOneof("parameter_choice")) for k, v in answer.settings.items()}


def infer(server: ServerProcess, protocol: str, value: float) -> None:
    c = client(protocol, server.url(protocol))
    try:
        data = np.array([value], dtype=np.float32)
        result = c.infer(MODEL, [make_input(protocol, "INPUT0", data, "FP32")])
        assert result.as_numpy("OUTPUT0").tolist() == [value]
    finally:
        c.close()


def lines(path: Path, pattern: str) -> list[str]:
    return [line for line in path.read_text().splitlines() if re.search(pattern, line)]


def wait_for_line(path: Path, pattern: str) -> None:
    assert wait_until(lambda: len(lines(path, pattern)) == 1, TIMEOUT_S), (
        pattern,
        path.read_text()[-3000:],
    )


# ----------------------------------------------------------------------- get / update


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_initial_settings_are_the_flags(settled: ServerProcess, log_file: Path, protocol: str):
    c = client(protocol, settled.url(protocol))
    assert settings(protocol, c) == {"log_file": str(log_file), **DEFAULTS}
    if protocol == "grpc":  # the verbose level is the oneof's uint32 case
        assert c.get_log_settings(as_json=True)["settings"]["log_verbose_level"] == {
            "uint32_param": 0
        }
    c.close()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_update_round_trip_of_every_field(settled: ServerProcess, log_file: Path, protocol: str):
    c = client(protocol, settled.url(protocol))
    changed = {
        "log_info": False,
        "log_warning": False,
        "log_error": False,
        "log_verbose_level": 3,
        "log_format": "ISO8601",
    }
    expected = {"log_file": str(log_file), **changed}
    assert settings(protocol, c, changed) == expected
    assert settings(protocol, c) == expected
    # Only what is named changes; the rest stays.
    assert settings(protocol, c, {"log_warning": True})["log_warning"] is True
    assert settings(protocol, c)["log_verbose_level"] == 3
    assert settings(protocol, c, DEFAULTS) == {"log_file": str(log_file), **DEFAULTS}
    c.close()


HTTP_REFUSALS = [
    ({"log_file": "elsewhere.log"}, "501", "log file location can not be updated through "),
    ({"log_info": "yes"}, "500", "attempt to access JSON non-boolean as boolean"),
    ({"log_error": 1}, "500", "attempt to access JSON non-boolean as boolean"),
    ({"log_verbose_level": -1}, "500", "non-unsigned-integer as unsigned-integer"),
    ({"log_verbose_level": 1.5}, "500", "non-unsigned-integer as unsigned-integer"),
    ({"log_format": 7}, "500", "attempt to access JSON non-string as string"),
    ({"log_format": "xml"}, "503", "invalid argument for --log_format, got: xml"),
]


@pytest.mark.parametrize(("update", "status", "text"), HTTP_REFUSALS)
def test_http_refuses_bad_values_with_tritons_texts(
    settled: ServerProcess, log_file: Path, update: dict[str, Any], status: str, text: str
) -> None:
    c = client("http", settled.http_url)
    with pytest.raises(InferenceServerException) as caught:
        c.update_log_settings({"log_verbose_level": 2, **update})
    assert caught.value.status() == status
    assert text in caught.value.message()
    # Nothing of a refused update applies, not even the good values beside the bad one.
    assert settings("http", c) == {"log_file": str(log_file), **DEFAULTS}
    c.close()


def test_http_nulls_and_empty_bodies_change_nothing(settled: ServerProcess) -> None:
    url = f"http://{settled.http_url}/v2/logging"
    for body in (b"", b"{}", b'{"log_file": null, "log_info": null, "log_format": null}'):
        request = urllib.request.Request(url, data=body, method="POST")
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            assert b'"log_info":true' in response.read()
    for body, status in ((b"{not json", 400), (b"[]", 400)):
        request = urllib.request.Request(url, data=body, method="POST")
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(request, timeout=TIMEOUT_S)
        assert caught.value.code == status
        assert b"failed to parse the request JSON buffer" in caught.value.read()
        caught.value.close()
    request = urllib.request.Request(url, data=b"{}", method="PUT")
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=TIMEOUT_S)
    assert caught.value.code == 405
    caught.value.close()


def _raw_grpc(server: ServerProcess, **values: service_pb2.LogSettingsRequest.SettingValue):
    """A LogSettings call with setting values tritonclient would never build."""
    with grpc.insecure_channel(server.grpc_url) as channel:
        call = channel.unary_unary(
            "/inference.GRPCInferenceService/LogSettings",
            request_serializer=service_pb2.LogSettingsRequest.SerializeToString,
            response_deserializer=service_pb2.LogSettingsResponse.FromString,
        )
        return call(service_pb2.LogSettingsRequest(settings=values), timeout=TIMEOUT_S)


def test_grpc_refuses_bad_values_with_tritons_texts(settled: ServerProcess, log_file: Path):
    c = client("grpc", settled.grpc_url)
    for update, code, text in (
        ({"log_file": "x.log"}, "UNIMPLEMENTED", "log file location can not be updated"),
        ({"log_file": None}, "UNIMPLEMENTED", "log file location can not be updated"),
        ({"log_info": None}, "INVALID_ARGUMENT", "expect boolean for 'log_info'"),
        ({"log_format": "xml"}, "INVALID_ARGUMENT", "invalid argument for log_format, got: xml"),
    ):
        with pytest.raises(InferenceServerException) as caught:
            c.update_log_settings({"log_verbose_level": 2, **update})
        assert caught.value.status() == f"StatusCode.{code}", update
        assert text in caught.value.message(), update
    value = service_pb2.LogSettingsRequest.SettingValue
    for key, wrong, text in (
        ("log_verbose_level", value(string_param="1"), "expect int32 for 'log_verbose_level'"),
        ("log_warning", value(uint32_param=1), "expect boolean for 'log_warning'"),
        ("log_format", value(bool_param=True), "expect string for 'log_format'"),
    ):
        with pytest.raises(grpc.RpcError) as raised:
            _raw_grpc(settled, **{key: wrong})
        assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert raised.value.details() == text
    assert settings("grpc", c) == {"log_file": str(log_file), **DEFAULTS}
    c.close()


# ---------------------------------------------------------- changes reach every record


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_verbose_records_appear_once_the_level_is_raised(
    settled: ServerProcess, log_file: Path, protocol: str
) -> None:
    """Both the server's own verbose records and a running Python model's log_verbose."""
    quiet, loud = (31.0, 32.0) if protocol == "http" else (41.0, 42.0)
    request_record = (
        r"HTTP request: POST /v2/models/log_model/infer$"
        if protocol == "http"
        else r"gRPC request: /inference\.GRPCInferenceService/ModelInfer$"
    )
    before = len(lines(log_file, request_record))
    infer(settled, protocol, quiet)
    wait_for_line(log_file, rf"model error tag{int(quiet)}$")
    assert lines(log_file, rf"model info tag{int(quiet)}$")
    assert not lines(log_file, rf"model verbose tag{int(quiet)}$")  # logged before the error
    assert len(lines(log_file, request_record)) == before

    c = client(protocol, settled.url(protocol))
    assert settings(protocol, c, {"log_verbose_level": 1})["log_verbose_level"] == 1
    infer(settled, protocol, loud)
    where = re.escape("model.py:") + r"\d+"
    wait_for_line(
        log_file, DEFAULT_LINE.format(letter="I", where=where, text=f"model verbose tag{int(loud)}")
    )
    assert len(lines(log_file, request_record)) > before

    # Back to 0, and INFO off too: only errors from the model and the server now.
    settings(protocol, c, {"log_verbose_level": 0, "log_info": False})
    infer(settled, protocol, quiet + 100)
    tag = f"tag{int(quiet + 100)}"
    wait_for_line(log_file, rf"model error {tag}$")
    assert not lines(log_file, rf"model (verbose|info) {tag}$")
    c.close()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_iso8601_format_at_run_time(settled: ServerProcess, log_file: Path, protocol: str):
    value = 51.0 if protocol == "http" else 52.0
    c = client(protocol, settled.url(protocol))
    settings(protocol, c, {"log_format": "ISO8601"})
    infer(settled, protocol, value)
    where = re.escape("model.py:") + r"\d+"
    text = f"model error tag{int(value)}"
    wait_for_line(log_file, ISO_LINE.format(letter="E", where=where, text=text))
    settings(protocol, c, {"log_format": "default"})
    infer(settled, protocol, value + 100)
    text = f"model error tag{int(value + 100)}"
    wait_for_line(log_file, DEFAULT_LINE.format(letter="E", where=where, text=text))
    c.close()


# ------------------------------------------------------------------- file, format, table


def test_log_file_gets_the_records_and_the_console_none(
    server: ServerProcess, log_file: Path
) -> None:
    text = log_file.read_text()
    assert text.startswith("a line from before\n")  # appended
    where = r"runtime\.py:\d+"
    assert re.search(
        DEFAULT_LINE.format(letter="I", where=where, text=r"Started HTTPService at .*"),
        text,
        re.MULTILINE,
    )
    assert "Started HTTPService" not in server.log_text()
    assert "failed to load 'log_broken'" in text


def _table(text: str) -> list[list[str]]:
    """The rows of the first model table in ``text``, checked as Triton's qa checks one."""
    all_lines = text.splitlines()
    start = next(i for i, line in enumerate(all_lines) if line.startswith("| Model "))
    top, header, middle = all_lines[start - 1], all_lines[start], all_lines[start + 1]
    assert TABLE_BORDER.match(top) and TABLE_BORDER.match(middle) and top == middle
    assert [c.strip() for c in TABLE_ROW.match(header)["row"].split("|")] == [
        "Model",
        "Version",
        "Status",
    ]
    assert all_lines[start - 2].endswith("] ")  # the record's own line; the table follows
    rows = []
    for line in all_lines[start + 2 :]:
        if TABLE_BORDER.match(line):
            assert line == top
            return rows
        assert len(line) == len(top)
        rows.append([c.strip() for c in TABLE_ROW.match(line)["row"].split("|")])
    raise AssertionError("table without its bottom border")


def test_startup_table_lists_models_with_their_state(
    log_file: Path, server: ServerProcess, repo: Path
) -> None:
    rows = _table(log_file.read_text())
    where = f"{repo / BROKEN / '1' / 'model.py'}(4): initialize"  # a reason of several lines
    assert rows == [
        [BROKEN, "1", "UNAVAILABLE: RuntimeError: broken on purpose"],
        ["", "", ""],
        ["", "", "At:"],
        ["", "", where],
        [MODEL, "1", "READY"],
    ]


def test_log_format_flag_and_console_streams(repo: Path) -> None:
    """--log-format=ISO8601 from the start; without --log-file, INFO goes to stdout and
    warnings and errors to stderr, as Triton's logger writes them."""
    command = server_command([repo], "--log-format=ISO8601", "--exit-on-error=true")
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0  # log_broken fails to load: the server exits
    where = r"\S+\.py:\d+"
    table_record = ISO_LINE.format(letter="I", where=where, text="")
    assert re.search(table_record + r"\n\+-", done.stdout, re.MULTILINE), done.stdout
    assert _table(done.stdout)[0][0] == BROKEN
    error = ISO_LINE.format(letter="E", where=where, text=r"failed to load 'log_broken'.*")
    assert re.search(error, done.stderr, re.MULTILINE), done.stderr
    assert "failed to load" not in done.stdout


def test_unopenable_log_file_stops_the_server_at_start(repo: Path, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-dir" / "tritium.log"
    done = subprocess.run(
        server_command([repo], f"--log-file={missing}"), capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0
    assert f"--log-file: failed to open log file '{missing}'" in done.stderr


def test_bad_log_format_flag_is_refused(repo: Path) -> None:
    done = subprocess.run(
        server_command([repo], "--log-format=xml"), capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0
    assert "invalid argument for --log-format" in done.stderr


@pytest.fixture(scope="module")
def restricted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, Path]]:
    audit = tmp_path_factory.mktemp("audit") / "audit.jsonl"
    proc = ServerProcess(
        [tmp_path_factory.mktemp("empty")],
        "--http-restricted-api=logging:admin-key=s3cret",
        "--grpc-restricted-protocol=logging:admin-key=s3cret",
        f"--audit-log={audit}",
    )
    yield proc, audit
    proc.stop()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_logging_is_tritons_restricted_group_and_audited(
    restricted: tuple[ServerProcess, Path], protocol: str
) -> None:
    proc, audit = restricted
    c = client(protocol, proc.url(protocol))
    with pytest.raises(InferenceServerException) as caught:
        c.update_log_settings({"log_verbose_level": 1})
    assert "restricted, expecting header" in caught.value.message()
    assert caught.value.status() == ("403" if protocol == "http" else "StatusCode.UNAVAILABLE")
    key = "admin-key" if protocol == "http" else "triton-grpc-protocol-admin-key"
    answer = settings(protocol, c, headers={key: "s3cret"})
    assert answer["log_verbose_level"] == 0  # the refused update changed nothing
    settings(protocol, c, {"log_warning": True}, headers={key: "s3cret"})
    c.close()
    entries = [json.loads(line) for line in audit.read_text().splitlines()]
    mine = [e for e in entries if e["protocol"] == protocol and e["action"] == "log_settings"]
    assert [e.get("reason") or e.get("outcome") for e in mine] == ["restricted", "ok"], mine


# ---------------------------------------------------------------- third-party loggers


@pytest.fixture(scope="module")
def verbose(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Path]]:
    """A server started with --log-verbose=1, logging to its own file."""
    path = tmp_path_factory.mktemp("verbose") / "verbose.log"
    proc = ServerProcess([repo], "--exit-on-error=false", "--log-verbose=1", f"--log-file={path}")
    yield proc, path
    proc.stop()


def test_verbose_logging_keeps_the_http2_libraries_quiet(verbose: tuple[Any, Path]) -> None:
    """--log-verbose=1 shows tritium's verbose records, not hpack's line per header (nor
    h2's, hyperframe's or asyncio's debug records)."""
    proc, path = verbose
    infer(proc, "grpc", 61.0)
    wait_for_line(path, r"model verbose tag61$")
    assert lines(path, r"gRPC request: /inference\.GRPCInferenceService/ModelInfer$")
    library = r"\d+ (hpack|table|base_events|selector_events|unix_events)\.py:\d+\]"
    assert not lines(path, library), lines(path, library)[:5]


# ------------------------------------------------------------------------- json records


def _json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_json_format_at_run_time(settled: ServerProcess, log_file: Path, protocol: str) -> None:
    """log_format "json" through the logging extension: from the next record on, every line
    is one JSON object; a Python model's records name the model."""
    value = 71.0 if protocol == "http" else 72.0
    c = client(protocol, settled.url(protocol))
    start = log_file.stat().st_size
    assert settings(protocol, c, {"log_format": "json"})["log_format"] == "json"
    infer(settled, protocol, value)
    wanted = f"model error tag{int(value)}"
    assert wait_until(lambda: wanted in log_file.read_text()[start:], TIMEOUT_S)
    records = _json_lines(log_file.read_text()[start:])  # every line is an object
    mine = [r for r in records if r["message"] == wanted]
    assert len(mine) == 1, records
    (record,) = mine
    assert record["level"] == "ERROR" and record["model"] == MODEL
    assert record["file"] == "model.py" and isinstance(record["line"], int)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", record["time"])
    assert record["pid"] == settled.proc.pid
    settings(protocol, c, {"log_format": "default"})
    c.close()


@pytest.fixture(scope="module")
def json_log(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The log of a server started with --log-format=json (log_broken fails to load)."""
    path = tmp_path_factory.mktemp("json") / "json.log"
    proc = ServerProcess([repo], "--exit-on-error=false", "--log-format=json", f"--log-file={path}")
    try:
        infer(proc, "grpc", 81.0)
        assert wait_until(lambda: "model error tag81" in path.read_text(), TIMEOUT_S)
    finally:
        proc.stop()
    return path


def test_json_format_from_the_start(json_log: Path) -> None:
    """Every line is one object, records of several lines (a traceback, the start-up table)
    included; records about a model name it, the others say null."""
    records = _json_lines(json_log.read_text())
    assert {tuple(r) for r in records} == {
        ("time", "level", "pid", "file", "line", "model", "message")
    }
    traceback = [r for r in records if r["message"].startswith("Failed to initialize Python stub")]
    assert len(traceback) == 1, traceback
    assert traceback[0]["model"] == BROKEN and traceback[0]["file"] == "model.py"
    assert traceback[0]["line"] == 4 and traceback[0]["level"] == "ERROR"
    assert "Traceback (most recent call last):\n" in traceback[0]["message"]
    assert traceback[0]["message"].endswith("RuntimeError: broken on purpose")
    failed = [r for r in records if r["message"].startswith(f"failed to load '{BROKEN}'")]
    assert failed and all(r["model"] == BROKEN for r in failed)
    loaded = [r for r in records if r["message"].startswith(f"successfully loaded '{MODEL}'")]
    assert len(loaded) == 1 and loaded[0]["model"] == MODEL and loaded[0]["level"] == "INFO"
    table = [r for r in records if "| Model " in r["message"]]
    assert len(table) == 1 and table[0]["model"] is None
    assert len(table[0]["message"].splitlines()) > 4
    started = [r for r in records if r["message"].startswith("Started GRPCInferenceService")]
    assert started and started[0]["model"] is None


# ------------------------------------------------------- messages as JSON strings (default)

ECHO = "log_echo"
ECHO_PY = textwrap.dedent("""
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def execute(self, requests):
            responses = []
            for request in requests:
                text = pb_utils.get_input_tensor_by_name(request, "TEXT")
                pb_utils.Logger.log_info("echo " + text.as_numpy()[0].decode())
                responses.append(pb_utils.InferenceResponse(output_tensors=[
                    pb_utils.Tensor("ECHOED", text.as_numpy())
                ]))
            return responses
""")
FORGED = 'I0205 18:34:18.707423 1 file.cc:123] "THIS ENTRY WAS INJECTED"'
CONTROL = "\u001b[31mESC-INJECTION:\u001b[32mSUCCESSFUL\u001b[0m\u0007"
ESCAPED_LINE = re.compile(r"^[IWE]\d{4} \d\d:\d\d:\d\d\.\d{6} \d+ \S+:\d+\] (?P<message>.*)$")


@pytest.fixture(scope="module")
def escaped_log(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The log of a server with TRITON_SERVER_ESCAPE_LOG_MESSAGES unset (Triton's default:
    messages escaped), after a client's text with a forged record and terminal escapes reached
    a model's pb_utils.Logger over each protocol."""
    root = tmp_path_factory.mktemp("escaped")
    _model(root, BROKEN, BROKEN_PY)  # a traceback of several lines
    (root / ECHO / "1").mkdir(parents=True)
    (root / ECHO / "1" / "model.py").write_text(ECHO_PY)
    (root / ECHO / "config.pbtxt").write_text(
        f'name: "{ECHO}" backend: "python" max_batch_size: 0\n'
        'input [ { name: "TEXT" data_type: TYPE_STRING dims: [ 1 ] } ]\n'
        'output [ { name: "ECHOED" data_type: TYPE_STRING dims: [ 1 ] } ]\n'
    )
    path = tmp_path_factory.mktemp("escaped_log") / "escaped.log"
    with pytest.MonkeyPatch.context() as env:
        env.delenv("TRITON_SERVER_ESCAPE_LOG_MESSAGES", raising=False)
        proc = ServerProcess([root], "--exit-on-error=false", f"--log-file={path}")
    try:
        for protocol in PROTOCOLS:
            c = client(protocol, proc.url(protocol))
            text = np.array([f"{protocol}\n{FORGED}\n{CONTROL}".encode()], dtype=np.object_)
            c.infer(ECHO, [make_input(protocol, "TEXT", text, "BYTES")])
            c.close()
        assert wait_until(lambda: path.read_text().count('] "echo ') == 2, TIMEOUT_S)
    finally:
        proc.stop()
    return path.read_text()


def test_messages_are_json_strings_by_default(escaped_log: str) -> None:
    """Each record is one line whose message is a JSON string (Triton 2.51's logger): a
    client's newlines and terminal escapes cannot forge a record; a traceback stays in its
    record; the start-up table alone is written as it is."""
    records = [line for line in escaped_log.splitlines() if ESCAPED_LINE.match(line)]
    messages = [json.loads(ESCAPED_LINE.match(line)["message"] or '""') for line in records]
    assert FORGED not in escaped_log.splitlines() and "\u001b" not in escaped_log
    for protocol in PROTOCOLS:
        assert f"echo {protocol}\n{FORGED}\n{CONTROL}" in messages
    traceback = [m for m in messages if m.startswith("Failed to initialize Python stub")]
    assert len(traceback) == 1 and "Traceback (most recent call last):\n" in traceback[0]
    others = [line for line in escaped_log.splitlines() if not ESCAPED_LINE.match(line)]
    assert all(line == "" or line[0] in "+|" for line in others), others  # the table's lines
    assert [row[0] for row in _table(escaped_log) if row[0]] == [BROKEN, ECHO]
