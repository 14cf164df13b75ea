"""``stub_fork``: a forked child's BLS call goes over its link to the parent, which sends it on
under a call id of its own and brings the answer back under the child's; the server's
socket is never read by the child. The fork hooks are run by hand around ``os.fork`` (not
registered: the test process forks for other tests too)."""

from __future__ import annotations

import os
import socket
import threading
from typing import Any

import numpy as np
import pytest

from tritium.backends.python import ipc, pb_utils, stub_fork
from tritium.backends.python.bls_client import BlsClient, FrameMux

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


def _stub_side(stub: ipc.BlockingChannel) -> tuple[BlsClient, Any]:
    """A stub's BLS client over ``stub``, and what the child runs (``Stub.forked``)."""
    channel = [stub]
    lock = [threading.Lock()]

    def send(kind: int, body: Any, buffers: ipc.Buffers | None = None) -> None:
        with lock[0]:
            channel[0].send(kind, body, buffers)

    mux = FrameMux(stub, lambda key: None)
    client = BlsClient(mux, send, None, "parent_0_0")
    client.enabled = True

    def forked(link: ipc.BlockingChannel) -> None:
        channel[0], lock[0] = link, threading.Lock()
        mux.reattach(link)
        client.reattach()

    return client, forked


def _child(client: BlsClient) -> int:
    """In the child: one BLS call; 0 when its answer is right."""
    a = np.arange(5, dtype=np.int32)
    request = pb_utils.InferenceRequest(
        model_name="double", inputs=[pb_utils.Tensor("IN", a)], requested_output_names=["OUT"]
    )
    response = client.exec(request, False)
    if response.has_error():
        return 2
    out = pb_utils.get_output_tensor_by_name(response, "OUT").as_numpy()
    return 0 if np.array_equal(out, a * 2) else 3


def _call(client: BlsClient, model: str) -> None:
    client.start(
        pb_utils.InferenceRequest(model_name=model, inputs=[], requested_output_names=[]), False
    )


def test_a_forked_childs_call_is_relayed_by_its_parent() -> None:
    server_sock, stub_sock = socket.socketpair()
    server = ipc.BlockingChannel(server_sock)
    client, forked = _stub_side(ipc.BlockingChannel(stub_sock))
    hooks = stub_fork._ForkHooks(client, forked)
    hooks.before()
    pid = os.fork()
    if pid == 0:  # the child: its call is its id 1
        code = 1
        try:
            hooks.child()
            server_sock.close()
            code = _child(client)
        finally:
            os._exit(code)
    for _ in range(3):  # the parent's own calls take ids 1..3 before its relay starts
        _call(client, "parent")
    hooks.parent()
    frames = [server.recv() for _ in range(4)]
    assert [f[1][0] for f in frames] == [1, 2, 3, 4]
    kind, body, buffers = frames[3]  # the child's request, sent on by the parent as id 4
    assert kind == ipc.BLS_REQUEST and body[3] == "double"
    name, packed = body[9][0]
    doubled = ipc.unpack_array(packed, buffers) * 2
    out: ipc.Buffers = []
    wire = ([(name.replace("IN", "OUT"), ipc.pack_array(doubled, out))], None, None)
    server.send(ipc.BLS_RESPONSE, (4, wire, True), out)
    _, status = os.waitpid(pid, 0)
    server_sock.close()
    stub_sock.close()
    assert os.waitstatus_to_exitcode(status) == 0  # the child got its answer, as its id 1


def test_a_child_without_a_parent_link_fails_its_call_without_hanging() -> None:
    """The link's parent end is gone (the relay never started): the call is an error."""
    server_sock, stub_sock = socket.socketpair()
    client, forked = _stub_side(ipc.BlockingChannel(stub_sock))
    hooks = stub_fork._ForkHooks(client, forked)
    hooks.before()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            hooks.child()
            server_sock.close()
            code = _child(client)
        finally:
            os._exit(code)
    assert hooks._pair is not None
    hooks._pair[0].close()  # no relay: the child's link is closed at the other end
    hooks._pair[1].close()
    hooks._pair = None
    _, status = os.waitpid(pid, 0)
    server_sock.close()
    stub_sock.close()
    assert os.waitstatus_to_exitcode(status) == 2  # an error response, not a hang
