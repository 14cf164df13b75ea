"""A reload that changes only ``instance_group`` updates the loaded model in place (issue 45,
item 1; Triton's ``TritonModel::UpdateInstanceGroup``, checked by Triton's
qa/L0_model_update/instance_update_test.py): only the added instances are created
(``initialize`` runs once per new instance), the removed ones are finalized before the load
returns, and the model answers every request throughout. Any other change still re-creates
every instance. Both rate-limiter modes; the direct scheduler and the dynamic batcher.

The model writes one line per ``initialize`` / ``finalize`` to a file outside its directory
(named by an environment variable, as Triton's test uses MODEL_LOG_DIR): a file written into
the model directory would itself be a change of the model's files, which reloads it whole.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException
from testkit.server_process import ServerProcess

MODEL = "instance_counter"
LOG_VARIABLE = "TRITIUM_TEST_INSTANCE_LOG"

MODEL_PY = f'''
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


def _note(event, args):
    with open(os.environ["{LOG_VARIABLE}"], "a") as log:
        log.write(f"{{event}} {{args['model_instance_name']}} {{os.getpid()}}\\n")


class TritonPythonModel:
    def initialize(self, args):
        self.args = args
        _note("initialize", args)

    def execute(self, requests):
        time.sleep(0.02)  # long enough that a reload finds executions in flight
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            out = pb_utils.Tensor("OUTPUT0", data.astype(np.float32))
            responses.append(pb_utils.InferenceResponse([out]))
        return responses

    def finalize(self):
        _note("finalize", self.args)
'''


SEQUENCE = """sequence_batching {
  max_sequence_idle_microseconds: 60000000
  control_input [
    { name: "START" control [{ kind: CONTROL_SEQUENCE_START fp32_false_true: [0, 1] }] },
    { name: "END" control [{ kind: CONTROL_SEQUENCE_END fp32_false_true: [0, 1] }] }
  ]
}
"""


def config_text(count: int, batching: bool = False, parameter: str = "") -> str:
    text = f'name: "{MODEL}"\nbackend: "python"\n'
    if batching:
        text += "max_batch_size: 8\ndynamic_batching {}\n"
        dims = "[ -1 ]"
    else:
        text += "max_batch_size: 0\n"
        dims = "[ -1 ]"
    text += (
        f'input [{{ name: "INPUT0" data_type: TYPE_FP32 dims: {dims} }}]\n'
        f'output [{{ name: "OUTPUT0" data_type: TYPE_FP32 dims: {dims} }}]\n'
        f"instance_group [{{ kind: KIND_CPU count: {count} }}]\n"
    )
    if parameter:
        text += f'parameters {{ key: "P" value: {{ string_value: "{parameter}" }} }}\n'
    return text


def sequence_config(count: int) -> str:
    return config_text(count) + SEQUENCE


class Setup:
    def __init__(self, tmp_path: Path, rate_limit: str, batching: bool) -> None:
        self.repo = tmp_path / "repo"
        (self.repo / MODEL / "1").mkdir(parents=True)
        (self.repo / MODEL / "1" / "model.py").write_text(MODEL_PY)
        self.batching = batching
        self.log = tmp_path / "instances.log"
        self.log.write_text("")
        self.rate_limit = rate_limit
        self.sequence = False
        self.server: ServerProcess | None = None

    def start(
        self, count: int, *extra: str, env: dict[str, str] | None = None
    ) -> httpclient.InferenceServerClient:
        self.write(count)
        self.server = ServerProcess(
            [self.repo],
            "--model-control-mode=explicit",
            f"--load-model={MODEL}",
            f"--rate-limit={self.rate_limit}",
            *extra,
            env={LOG_VARIABLE: str(self.log), **(env or {})},
        )
        return httpclient.InferenceServerClient(self.server.http_url, network_timeout=120.0)

    def write(self, count: int, parameter: str = "") -> None:
        text = config_text(count, self.batching, parameter)
        if self.sequence:
            text = sequence_config(count)
        (self.repo / MODEL / "config.pbtxt").write_text(text)

    def events(self, kind: str) -> list[str]:
        return [line for line in self.log.read_text().splitlines() if line.startswith(kind)]


@pytest.fixture(params=["off", "execution_count"])
def setup(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Setup]:
    made = Setup(tmp_path, request.param, batching=False)
    yield made
    if made.server is not None:
        made.server.stop()


@pytest.fixture(params=["off", "execution_count"])
def batched(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Setup]:
    made = Setup(tmp_path, request.param, batching=True)
    yield made
    if made.server is not None:
        made.server.stop()


def infer(client: httpclient.InferenceServerClient, batching: bool) -> None:
    shape = [1, 4] if batching else [4]
    data = np.arange(4, dtype=np.float32).reshape(shape)
    given = httpclient.InferInput("INPUT0", shape, "FP32")
    given.set_data_from_numpy(data)
    result = client.infer(MODEL, [given])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)


def reload(setup: Setup, client: httpclient.InferenceServerClient, count: int) -> None:
    setup.write(count)
    client.load_model(MODEL)


def test_adding_one_instance_to_four_initializes_only_it(setup: Setup) -> None:
    client = setup.start(4)
    assert len(setup.events("initialize")) == 4
    reload(setup, client, 5)
    # Triton: 5 initializations in all; tritium used to re-create all five (9).
    assert len(setup.events("initialize")) == 5
    assert setup.events("finalize") == []
    infer(client, setup.batching)
    assert client.get_model_config(MODEL)["instance_group"][0]["count"] == 5


def test_one_to_two_instances_initializes_once_more(setup: Setup) -> None:
    client = setup.start(1)
    reload(setup, client, 2)
    assert len(setup.events("initialize")) == 2  # tritium used to run 3
    assert setup.events("finalize") == []
    infer(client, setup.batching)


def test_removed_instance_is_finalized_before_the_load_returns(setup: Setup) -> None:
    client = setup.start(2)
    reload(setup, client, 1)
    finalized = setup.events("finalize")  # read as soon as the load returned
    assert len(finalized) == 1, finalized
    assert len(setup.events("initialize")) == 2
    infer(client, setup.batching)
    names = {line.split()[1] for line in setup.events("initialize")}
    assert finalized[0].split()[1] in names


def test_requests_are_answered_throughout_the_update(setup: Setup) -> None:
    client = setup.start(1)
    failures: list[str] = []
    answered = [0]
    stop = threading.Event()

    def traffic() -> None:
        own = httpclient.InferenceServerClient(setup.server.http_url)  # type: ignore[union-attr]
        while not stop.is_set():
            try:
                infer(own, setup.batching)
                answered[0] += 1
            except Exception as exc:  # noqa: BLE001 - every failure is counted
                failures.append(repr(exc))

    threads = [threading.Thread(target=traffic) for _ in range(3)]
    for thread in threads:
        thread.start()
    try:
        for count in (3, 1, 2, 1):
            reload(setup, client, count)
            time.sleep(0.2)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    print(f"answered {answered[0]} requests during 4 reloads; failures {len(failures)}")
    assert failures == []
    assert answered[0] > 0
    # 1 + 2 (1 -> 3) + 1 (1 -> 2): only the added instances were initialized.
    assert len(setup.events("initialize")) == 4
    assert len(setup.events("finalize")) == 3


def test_dynamic_batcher_learns_the_new_instance_set(batched: Setup) -> None:
    client = batched.start(4)
    reload(batched, client, 5)
    assert len(batched.events("initialize")) == 5
    assert batched.events("finalize") == []
    reload(batched, client, 2)
    assert len(batched.events("finalize")) == 3
    for _ in range(6):
        infer(client, batched.batching)


def test_another_change_still_recreates_every_instance(setup: Setup) -> None:
    client = setup.start(2)
    setup.write(3, parameter="changed")
    client.load_model(MODEL)
    assert len(setup.events("initialize")) == 2 + 3
    deadline = time.monotonic() + 60
    while len(setup.events("finalize")) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)  # the old version drains and closes in the background
    assert len(setup.events("finalize")) == 2
    infer(client, setup.batching)


def test_poll_mode_updates_the_instances_in_place(tmp_path: Path) -> None:
    made = Setup(tmp_path, "off", batching=False)
    made.write(1)
    server = ServerProcess(
        [made.repo],
        "--model-control-mode=poll",
        "--repository-poll-secs=1",
        env={LOG_VARIABLE: str(made.log)},
    )
    try:
        client = httpclient.InferenceServerClient(server.http_url)
        made.write(2)
        deadline = time.monotonic() + 60
        while client.get_model_config(MODEL)["instance_group"][0]["count"] != 2:
            assert time.monotonic() < deadline, "the poller never applied the new config"
            time.sleep(0.2)
        assert len(made.events("initialize")) == 2  # a whole reload made it 3
        assert made.events("finalize") == []
        infer(client, batching=False)
    finally:
        server.stop()


@pytest.fixture(params=["off", "execution_count"])
def sequenced(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Setup]:
    made = Setup(tmp_path, request.param, batching=False)
    made.sequence = True
    yield made
    if made.server is not None:
        made.server.stop()


def step(client: httpclient.InferenceServerClient, cid: int, **flags: bool) -> None:
    data = np.full([4], cid, dtype=np.float32)
    given = httpclient.InferInput("INPUT0", [4], "FP32")
    given.set_data_from_numpy(data)
    result = client.infer(MODEL, [given], sequence_id=cid, **flags)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)


def test_sequence_batcher_keeps_its_sequences_through_an_update(sequenced: Setup) -> None:
    """1 -> 2 adds one instance; 2 -> 1 waits for the sequence the removed instance holds
    to end (Triton: "wait until in-flight sequences are completed"), then finalizes it
    before the load returns; both sequences are answered throughout."""
    client = sequenced.start(1)
    reload(sequenced, client, 2)
    assert len(sequenced.events("initialize")) == 2  # a whole reload made it 3
    assert sequenced.events("finalize") == []
    step(client, 1, sequence_start=True)  # slot 0 of instance 0
    step(client, 2, sequence_start=True)  # slot 0 of instance 1: sequences spread out
    sequenced.write(1)
    url = sequenced.server.http_url  # type: ignore[union-attr]
    failures: list[str] = []

    def load() -> None:  # a client of its own: one client is not shared between threads
        try:
            httpclient.InferenceServerClient(url, network_timeout=120.0).load_model(MODEL)
        except Exception as exc:  # noqa: BLE001 - reported below
            failures.append(repr(exc))

    loading = threading.Thread(target=load)
    loading.start()
    try:
        for _ in range(3):
            step(client, 1)
            step(client, 2)
        assert sequenced.events("finalize") == []  # a sequence still holds the instance
    finally:
        step(client, 1, sequence_end=True)
        step(client, 2, sequence_end=True)
        loading.join(timeout=120)
    assert not loading.is_alive()
    assert failures == []
    assert len(sequenced.events("finalize")) == 1
    assert len(sequenced.events("initialize")) == 2
    step(client, 3, sequence_start=True)
    step(client, 3, sequence_end=True)


def test_an_update_the_rate_limiter_refuses_leaves_the_model_as_it_was(tmp_path: Path) -> None:
    """Added instances that need more of a resource than ``--rate-limit-resource`` gives fail
    the load with the limiter's text; the created ones are finalized and the version serves
    on with its instances (Triton: UpdateInstanceGroup's error leaves the model as it was)."""
    made = Setup(tmp_path, "execution_count", batching=False)
    try:
        client = made.start(1, "--rate-limit-resource=R:1")
        greedy = config_text(2).replace(
            "count: 2 }", 'count: 2 rate_limiter { resources [{ name: "R" count: 2 }] } }'
        )
        (made.repo / MODEL / "config.pbtxt").write_text(greedy)
        with pytest.raises(InferenceServerException, match='Resource count for "R" is limited'):
            client.load_model(MODEL)
        assert len(made.events("initialize")) == 1 + 2  # the new group's two were made...
        assert len(made.events("finalize")) == 2  # ...and closed before the load answered
        assert client.get_model_config(MODEL)["instance_group"][0]["count"] == 1
        infer(client, batching=False)
    finally:
        if made.server is not None:
            made.server.stop()


def test_load_api_config_with_one_more_instance_initializes_once_more(setup: Setup) -> None:
    """Triton's test_load_api_with_config: the served config (get_model_config, as JSON) with
    one more instance, passed as the load API's ``config``, updates in place: two
    initializations in all (tritium re-created the model: three)."""
    client = setup.start(1)
    config = client.get_model_config(MODEL)
    config["instance_group"][0]["count"] += 1
    client.load_model(MODEL, config=json.dumps(config))
    assert len(setup.events("initialize")) == 2
    assert setup.events("finalize") == []
    infer(client, setup.batching)
    assert client.get_model_config(MODEL)["instance_group"][0]["count"] == 2


def resource_config(count: int) -> str:
    limited = f'count: 1 rate_limiter {{ resources [{{ name: "R1" count: {count} }}] }} }}'
    return config_text(1).replace("count: 1 }", limited)


@pytest.mark.parametrize("explicit", [False, True])
def test_decreased_resource_shows_in_the_verbose_resource_map(
    tmp_path: Path, explicit: bool
) -> None:
    """Triton's test_instance_resource_decrease: an update that replaces the instance needing
    R1:4 by one needing R1:3 lowers the limiter's count to 3, which Triton's verbose log shows
    as ``Resource: R1\\t Count: 3`` (its resource map after each instance joins or leaves,
    tabs escaped); with ``--rate-limit-resource=R1:10`` the count stays 10."""
    made = Setup(tmp_path, "execution_count", batching=False)
    extra = ["--log-verbose=2"] + (["--rate-limit-resource=R1:10"] if explicit else [])
    try:
        (made.repo / MODEL).mkdir(exist_ok=True)
        # Triton's default, which its test reads: each message one line, tabs as \t
        client = made.start(1, *extra, env={"TRITON_SERVER_ESCAPE_LOG_MESSAGES": "1"})
        (made.repo / MODEL / "config.pbtxt").write_text(resource_config(4))
        client.load_model(MODEL)
        (made.repo / MODEL / "config.pbtxt").write_text(resource_config(3))
        client.load_model(MODEL)
        assert len(made.events("initialize")) == 3
        assert len(made.events("finalize")) == 2
        client.unload_model(MODEL)
        assert made.server is not None
        text = made.server.log_text()
        assert (r"Resource: R1\t Count: 3" in text) is not explicit
        if explicit:
            assert r"\tDevice: 0\n\t\tResource: R1\t Count: 10\n" in text
        else:
            assert r"\tDevice: 0\n\t\tResource: R1\t Count: 4\n" in text
    finally:
        if made.server is not None:
            made.server.stop()
