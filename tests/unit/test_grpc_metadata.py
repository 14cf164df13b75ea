"""frontends/grpc/metadata.py (forwarded headers) and transport/grpc/metadata.py (grpc-timeout,
grpc-message, compression)."""

from __future__ import annotations

import gzip
import re
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tritium.frontends.grpc.metadata import (
    RESERVED_PARAMETERS,
    compile_forward_pattern,
    forwarded_parameters,
)
from tritium.transport.grpc.metadata import (
    ACCEPT_ENCODING,
    InflateError,
    Inflater,
    MessageTooLarge,
    accepted_encodings,
    compress,
    compress_message,
    decode_grpc_message,
    encode_grpc_message,
    parse_timeout,
    response_compression,
)
from tritium.extensions.parameters import RESERVED

# ---------------------------------------------------------------- header forwarding

HEADERS = [
    (":path", "/inference.GRPCInferenceService/ModelInfer"),
    (":authority", "127.0.0.1:8001"),
    ("content-type", "application/grpc"),
    ("te", "trailers"),
    ("grpc-timeout", "10S"),
    ("grpc-accept-encoding", "identity,deflate,gzip"),
    ("user-agent", "grpc-python/1.81"),
    ("header_1", "value_1"),
    ("my_header_1", "my_value_1"),
    ("my_header_2", "my_value_2"),
    ("my_header_3", 'This is a "quoted" string with a backslash\\ '),
]


def _forward(pattern: str, headers: list[tuple[str, str]] = HEADERS) -> dict[str, str]:
    return forwarded_parameters(compile_forward_pattern(pattern), headers)


def test_no_pattern_forwards_nothing() -> None:
    assert compile_forward_pattern("") is None
    assert forwarded_parameters(None, HEADERS) == {}


def test_triton_parameters_test_headers() -> None:
    """Triton's qa/L0_parameters: ``my_header.*`` forwards the three my_header_* only."""
    assert _forward("my_header.*") == {
        "my_header_1": "my_value_1",
        "my_header_2": "my_value_2",
        "my_header_3": 'This is a "quoted" string with a backslash\\ ',
    }


def test_case_insensitive_by_default_and_case_sensitive_with_the_prefix() -> None:
    """Triton: MY_HEADER.* matches my_header_1; (?-i)MY_HEADER.* matches nothing."""
    assert set(_forward("MY_HEADER.*")) == {"my_header_1", "my_header_2", "my_header_3"}
    assert _forward("(?-i)MY_HEADER.*") == {}
    assert set(_forward("(?-i)my_header_[12]")) == {"my_header_1", "my_header_2"}


def test_partial_match_like_re2() -> None:
    """RE2::PartialMatch: the pattern may match anywhere in the name."""
    assert set(_forward("header_")) == {"header_1", "my_header_1", "my_header_2", "my_header_3"}
    assert set(_forward("^header_")) == {"header_1"}


def test_transport_metadata_and_pseudo_headers_are_never_forwarded() -> None:
    forwarded = _forward(".*")
    assert "user-agent" in forwarded  # grpc core hands user-agent to the application
    for name in (":path", ":authority", "content-type", "te", "grpc-timeout"):
        assert name not in forwarded
    assert "grpc-accept-encoding" not in forwarded


def test_reserved_parameter_names_are_not_forwarded() -> None:
    assert RESERVED_PARAMETERS == RESERVED
    headers = [("priority", "5"), ("sequence_id", "7"), ("triton_x", "1"), ("headers", "h")]
    assert _forward(".*", headers) == {}


def test_repeated_header_values_are_joined() -> None:
    assert _forward("x-", [("x-a", "1"), ("x-a", "2")]) == {"x-a": "1, 2"}


def test_binary_headers_are_decoded_when_text() -> None:
    headers = [("x-t-bin", "aGVsbG8"), ("x-b-bin", "/w=="), ("x-c-bin", "!!")]
    assert _forward("x-", headers) == {"x-t-bin": "hello"}


def test_bad_pattern_raises_re_error() -> None:
    with pytest.raises(re.error):
        compile_forward_pattern("(unclosed")


@given(st.lists(st.tuples(st.text(max_size=20), st.text(max_size=40)), max_size=20))
def test_forwarding_any_headers_gives_strings(headers: list[tuple[str, str]]) -> None:
    result = _forward(".*", headers)
    for name, value in result.items():
        assert isinstance(value, str)
        assert not name.startswith(":")


# ---------------------------------------------------------------- grpc-timeout


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("1H", 3600.0),
        ("2M", 120.0),
        ("10S", 10.0),
        ("250m", 0.25),
        ("1500u", 0.0015),
        ("999n", 999e-9),
        ("0S", 0.0),
        ("99999999H", 99999999 * 3600.0),
        ("00000001S", 1.0),
    ],
)
def test_timeout_units(value: str, seconds: float) -> None:
    assert parse_timeout(value) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "value",
    [
        "",
        "S",
        "10",
        "123456789S",  # 9 digits: the spec allows at most 8
        "10s",
        "10 S",
        " 10S",
        "10S ",
        "10S\n",
        "-1S",
        "1.5S",
        "1e3m",
        "١٠S",  # Arabic-Indic digits are digits to str.isdigit, not to the spec
        "10SS",
    ],
)
def test_malformed_timeouts(value: str) -> None:
    assert parse_timeout(value) is None


@given(st.text(max_size=12))
def test_timeout_never_raises(value: str) -> None:
    result = parse_timeout(value)
    assert result is None or result >= 0


# ---------------------------------------------------------------- grpc-message


@pytest.mark.parametrize(
    ("text", "encoded"),
    [
        ("plain text", "plain text"),
        ("100%", "100%25"),
        ("line\nbreak", "line%0Abreak"),
        ("tab\there", "tab%09here"),
        ("caf\u00e9", "caf%C3%A9"),
        ("\u2603", "%E2%98%83"),
        ("~ and \x7f", "~ and %7F"),
    ],
)
def test_encode_grpc_message(text: str, encoded: str) -> None:
    assert encode_grpc_message(text) == encoded
    assert decode_grpc_message(encoded) == text


def test_decode_keeps_malformed_escapes() -> None:
    assert decode_grpc_message("50%") == "50%"
    assert decode_grpc_message("%zz%4") == "%zz%4"
    assert decode_grpc_message("%FF") == "\ufffd"  # not UTF-8: replaced, never an error


def test_encode_truncates_without_splitting_an_escape() -> None:
    assert encode_grpc_message("ab\u00e9cd", max_bytes=3) == "ab"
    assert encode_grpc_message("ab\u00e9cd", max_bytes=4) == "ab"
    assert encode_grpc_message("ab\u00e9cd", max_bytes=5) == "ab%C3"
    assert encode_grpc_message("abcdef", max_bytes=4) == "abcd"
    assert encode_grpc_message("abc", max_bytes=10) == "abc"


@given(st.text())
def test_message_round_trip_and_header_safe(text: str) -> None:
    encoded = encode_grpc_message(text)
    assert all(0x20 <= ord(c) <= 0x7E for c in encoded)
    assert decode_grpc_message(encoded) == text  # st.text() holds no lone surrogates


@given(st.text(), st.integers(min_value=0, max_value=64))
def test_truncated_message_is_a_prefix_of_valid_escapes(text: str, limit: int) -> None:
    encoded = encode_grpc_message(text, max_bytes=limit)
    assert len(encoded) <= limit
    assert encode_grpc_message(text).startswith(encoded)
    assert re.fullmatch(r"(?:[^%]|%[0-9A-F]{2})*", encoded)


@given(st.text(alphabet=st.characters(max_codepoint=0x7F)))
def test_decoding_any_header_value_never_raises(value: str) -> None:
    assert isinstance(decode_grpc_message(value), str)


# ---------------------------------------------------------------- response compression


@pytest.mark.parametrize(
    ("level", "accept", "expected"),
    [
        ("none", "identity,deflate,gzip", None),
        ("low", "identity,deflate,gzip", "gzip"),
        ("medium", "identity,deflate,gzip", "deflate"),
        ("high", "identity,deflate,gzip", "deflate"),
        ("high", "identity, gzip", "gzip"),
        ("low", "deflate", "deflate"),
        ("high", "identity", None),
        ("high", None, None),  # no grpc-accept-encoding: identity only (grpc core)
        ("high", "", None),
        ("high", "br, zstd", None),
        ("high", " GZIP ", "gzip"),
    ],
)
def test_response_compression_follows_grpc_core(
    level: str, accept: str | None, expected: str | None
) -> None:
    choice = response_compression(level, accept)
    if expected is None:
        assert choice is None
    else:
        assert choice == (expected, zlib.Z_DEFAULT_COMPRESSION)


def test_unknown_level_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown compression level"):
        response_compression("max", "gzip")


def test_accept_encoding() -> None:
    assert accepted_encodings(None) == {"identity"}
    assert accepted_encodings(ACCEPT_ENCODING) == {"identity", "deflate", "gzip"}
    assert accepted_encodings(",,, ,") == {"identity"}


# ---------------------------------------------------------------- compress / inflate

PAYLOAD = b"tritium " * 1000


def test_gzip_and_deflate_are_the_standard_formats() -> None:
    assert gzip.decompress(compress(PAYLOAD, "gzip", 6)) == PAYLOAD
    assert zlib.decompress(compress(PAYLOAD, "deflate", 6)) == PAYLOAD  # zlib-wrapped


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_round_trip(algorithm: str) -> None:
    packed = compress(memoryview(PAYLOAD), algorithm, zlib.Z_DEFAULT_COMPRESSION)
    assert Inflater(algorithm, len(PAYLOAD)).inflate(packed) == PAYLOAD


def test_compress_message_keeps_incompressible_data_as_is() -> None:
    assert compress_message(b"x", "gzip", 6) is None
    packed = compress_message(PAYLOAD, "gzip", 6)
    assert packed is not None and len(packed) < len(PAYLOAD)


def test_unknown_algorithms_are_refused() -> None:
    with pytest.raises(ValueError, match="unsupported compression algorithm"):
        compress(b"x", "br", 6)
    with pytest.raises(ValueError, match="unsupported compression algorithm"):
        Inflater("identity", 10)


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_a_bomb_stops_at_the_bound(algorithm: str) -> None:
    """64 MiB of zeros packs into ~64 KiB; inflating it bounded by 1 MiB stops at 1 MiB + 1."""
    bomb = compress(bytes(64 << 20), algorithm, 9)
    assert len(bomb) < 128 << 10
    with pytest.raises(MessageTooLarge) as caught:
        Inflater(algorithm, 1 << 20).inflate(bomb)
    assert caught.value.size == (1 << 20) + 1
    assert caught.value.limit == 1 << 20


def test_exactly_the_bound_is_allowed() -> None:
    packed = compress(bytes(1000), "gzip", 6)
    assert Inflater("gzip", 1000).inflate(packed) == bytes(1000)
    with pytest.raises(MessageTooLarge):
        Inflater("gzip", 999).inflate(packed)
    assert Inflater("gzip", 0).inflate(compress(b"", "gzip", 6)) == b""


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"not compressed at all", "invalid gzip data"),
        (compress(PAYLOAD, "gzip", 6)[:-10], "truncated gzip data"),
        (compress(PAYLOAD, "gzip", 6) + b"trailing", "data after the end"),
        (compress(b"a", "gzip", 6) * 2, "data after the end"),  # a second gzip member
        (compress(PAYLOAD, "deflate", 6), "invalid gzip data"),  # the other wrapper
        (b"", "truncated gzip data"),
    ],
)
def test_corrupt_streams_are_refused(data: bytes, message: str) -> None:
    with pytest.raises(InflateError, match=message) as caught:
        Inflater("gzip", 1 << 20).inflate(data)
    assert not isinstance(caught.value, MessageTooLarge)


@given(st.binary(max_size=512), st.sampled_from(["gzip", "deflate"]))
def test_inflating_garbage_fails_cleanly(data: bytes, algorithm: str) -> None:
    try:
        out = Inflater(algorithm, 4096).inflate(data)
    except InflateError:
        return
    assert len(out) <= 4096


@given(st.binary(max_size=4096), st.sampled_from(["gzip", "deflate"]))
def test_any_payload_round_trips(data: bytes, algorithm: str) -> None:
    assert Inflater(algorithm, len(data)).inflate(compress(data, algorithm, 1)) == data
