"""How the ONNX backend cuts a batch's output back into each request's rows
(backends/onnxruntime.py ``_pieces``): real requests, real arrays."""

from __future__ import annotations

import numpy as np

from tritium.backends.onnxruntime import _pieces
from tritium.request import InferenceRequest
from tritium.types import ClientRequest


def _requests(*batch_sizes: int) -> list[InferenceRequest]:
    requests = []
    for size in batch_sizes:
        request = InferenceRequest(ClientRequest("m"))
        request.batch_size = size
        requests.append(request)
    return requests


def test_rows_of_batch_one_requests_are_views_of_one_row_each() -> None:
    out = np.arange(3 * 4, dtype=np.int32).reshape(3, 4)
    pieces = _pieces(out, _requests(1, 1, 1))
    assert [p.shape for p in pieces] == [(1, 4)] * 3
    assert all(np.shares_memory(p, out) for p in pieces)
    assert [p.tolist() for p in pieces] == [[row] for row in out.tolist()]


def test_requests_of_several_rows_get_their_slices_in_order() -> None:
    out = np.arange(4 * 2, dtype=np.float32).reshape(4, 2)
    pieces = _pieces(out, _requests(2, 1, 1))
    assert [p.tolist() for p in pieces] == [out[:2].tolist(), out[2:3].tolist(), out[3:].tolist()]


def test_one_request_gets_the_whole_output() -> None:
    out = np.zeros((2, 3), dtype=np.int64)
    (piece,) = _pieces(out, _requests(2))
    assert piece is out


def test_an_output_not_batch_major_is_sliced_as_before() -> None:
    # a model whose output's first dimension is not the batch: each request's slice of it,
    # as the backend always cut it (a short slice where the output is shorter)
    out = np.arange(2, dtype=np.int32)
    pieces = _pieces(out, _requests(1, 1, 1))
    assert [p.tolist() for p in pieces] == [[0], [1], []]
