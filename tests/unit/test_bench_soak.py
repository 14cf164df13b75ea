"""bench/soak.py's bookkeeping of hostile runs and resource growth, and the frame cutting of
its stream-burst client (bench/soak_attacks.py), without a server."""

from __future__ import annotations

import argparse
import struct
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))  # the package ``bench``

from bench.soak_attacks import _frames  # noqa: E402
from bench.soak_cli import growth, soak_kinds  # noqa: E402
from bench.soak_load import Tally  # noqa: E402


def test_a_counted_outcome_is_tallied_by_its_keys_and_summed() -> None:
    tally = Tally()
    tally.record_hostile("zero_window", {"reset 8": 30, "open": 2}, 11.04)
    tally.record_hostile("zero_window", {"reset 8": 32}, 9.0)
    tally.record_hostile("gzip_bomb", "400", 0.5)
    assert tally.hostile == {
        "zero_window: open + reset 8": 1,
        "zero_window: reset 8": 1,
        "gzip_bomb: 400": 1,
    }
    assert tally.hostile_items == {"zero_window: reset 8": 62, "zero_window: open": 2}
    assert tally.hostile_runs == {"zero_window": 2, "gzip_bomb": 1}
    assert tally.hostile_max_s == {"zero_window": 11.0, "gzip_bomb": 0.5}


def _sample(label: str, rss: float, fds: int) -> dict[str, object]:
    return {"label": label, "rss_mib": rss, "fds": fds, "threads": 11, "stubs": 8,
            "stub_rss_mib": 350.0}  # fmt: skip


def test_growth_is_measured_from_the_start_and_the_warm_sample() -> None:
    samples = [
        _sample("start", 100.0, 30),
        _sample("warm", 200.0, 40),
        _sample("run", 300.0, 90),
        _sample("end", 210.5, 41),
        _sample("settled", 199.0, 30),
    ]
    grown = growth(samples)
    assert grown["end"]["from_warm"]["rss_mib"] == 10.5 and grown["end"]["from_warm"]["fds"] == 1
    assert grown["settled"]["from_start"]["rss_mib"] == 99.0
    assert grown["settled"]["from_start"]["fds"] == 0
    assert grown["settled"]["from_warm"]["fds"] == -10
    assert growth([_sample("start", 1.0, 1)]) == {}


def test_frames_are_cut_whole_and_the_rest_kept() -> None:
    def frame(kind: int, sid: int, payload: bytes) -> bytes:
        return (
            struct.pack(">I", len(payload))[1:]
            + bytes([kind, 0])
            + struct.pack(">I", sid)
            + payload
        )

    rst = frame(3, 5, struct.pack(">I", 7))
    settings = frame(4, 0, struct.pack(">HI", 3, 1024))
    buffer = bytearray(rst + settings[:-2])
    assert _frames(buffer) == [(3, 5, struct.pack(">I", 7))]
    assert bytes(buffer) == settings[:-2]  # the unfinished frame is kept
    buffer += settings[-2:]
    assert _frames(buffer) == [(4, 0, struct.pack(">HI", 3, 1024))]
    assert not buffer


def test_hostile_selects_kinds_and_refuses_unknown_ones() -> None:
    args = argparse.Namespace(bomb_mib=1, hostile="zero_window,gzip_bomb")
    assert [k.name for k in soak_kinds(args)] == ["gzip_bomb", "zero_window"]
    with pytest.raises(SystemExit, match="unknown kind"):
        soak_kinds(argparse.Namespace(bomb_mib=1, hostile="zero_window,nope"))
