"""Canonical JSON is RFC 8785 (JCS): the fast path agrees with the RFC 8785 encoder on every
value, and the parse refuses every other spelling."""

from __future__ import annotations

import json

import pytest
import rfc8785
from hypothesis import given
from hypothesis import strategies as st

from ficc.base.canonical import canonical_json, same_in_both
from ficc.base.errors import ProtocolError
from ficc.domain.grants import GrantState
from ficc.protocol import canonical
from ficc.protocol.canonical import canonical_json_and_compact_size, parse_canonical_json

keys = st.text(max_size=6) | st.sampled_from(["\ue000", "\U0001f600", "a\uffff", "a\U00010000"])
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
    max_leaves=16,
)


@given(values)
def test_every_value_encodes_as_the_rfc8785_encoder_does(value: object) -> None:
    assert canonical_json(value) == rfc8785.dumps(value)


@given(values)
def test_every_encoding_parses_back_to_an_equal_value(value: object) -> None:
    data = canonical_json(value)
    assert parse_canonical_json(data, what="x") == value


def test_keys_sort_by_utf16_code_units_as_rfc8785_section_3_2_3_shows() -> None:
    value = {
        "\u20ac": "Euro",
        "\r": "CR",
        "\ufb33": "Hebrew",
        "1": "One",
        "\U0001f600": "Emoji",
        "\u0080": "Control",
        "\u00f6": "Latin",
    }
    order = list(parse_canonical_json(canonical_json(value), what="x"))
    assert order == ["\r", "1", "\u0080", "\u00f6", "\u20ac", "\U0001f600", "\ufb33"]


@pytest.mark.parametrize(
    ("number", "spelling"),
    [
        (1.0, b"1"),
        (-0.0, b"0"),
        (1e-7, b"1e-7"),
        (1e21, b"1e+21"),
        (1e20, b"100000000000000000000"),
        (0.000001, b"0.000001"),
        (333333333.3333333, b"333333333.3333333"),
        (2**53 - 1, b"9007199254740991"),
    ],
)
def test_numbers_are_spelled_as_ecmascript_does(number: float, spelling: bytes) -> None:
    assert canonical_json(number) == spelling
    assert canonical_json([number]) == b"[" + spelling + b"]"


@pytest.mark.parametrize(
    "data",
    [
        b'{"a":1.0}',  # Python's spelling of the float 1
        b'{"a":1e-07}',
        b'{"a":-0}',
        b'{"a":9007199254740993}',  # no double spells it
        b'{"\xee\x80\x80":2,"\xf0\x9f\x98\x80":1}',  # sorted by code point, not UTF-16
        b'{"a":"\\u00e9"}',  # escaped where UTF-8 is canonical
    ],
)
def test_other_spellings_are_refused_as_not_canonical(data: bytes) -> None:
    with pytest.raises(ProtocolError, match="not canonical"):
        parse_canonical_json(data, what="request")


@pytest.mark.parametrize("value", [2**53, -(2**53), float("inf"), {1: "a"}, "\ud800"])
def test_a_value_rfc8785_cannot_carry_is_a_value_error(value: object) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 (each kind says why in its own words)
        canonical_json(value)


# Sampling parameters (temperature, top_p) take the fast path: orjson, or the standard
# library when gradual; both must spell every value as the RFC 8785 encoder does.
ordinary_floats = st.floats(min_value=1e-7, max_value=2.0**53, allow_nan=False) | st.sampled_from(
    [0.7, 0.9, 0.95, 1e-4, 1.5e-4, 9.99e-5, 1e-5, 1e-6, 0.1 + 0.2, 4503599627370495.5]
)
signed_floats = ordinary_floats | ordinary_floats.map(lambda number: -number)
texts = st.text(max_size=12) | st.sampled_from(["\u007f", "\u00e9t\u00e9", "\u2028", "\U0001f600"])
body_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | signed_floats | texts,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
    max_leaves=24,
)


@given(body_values)
def test_bodies_with_sampling_floats_encode_as_rfc8785_does_on_every_path(value: object) -> None:
    expected = rfc8785.dumps(value)
    assert canonical_json(value) == expected
    assert canonical_json(value, gradual=True) == expected
    content, size = canonical_json_and_compact_size(value)
    assert content == expected
    assert size == len(json.dumps(value, separators=(",", ":")).encode())


def test_a_chat_with_temperature_and_top_p_is_encoded_without_the_rfc8785_encoder(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(value: object) -> bytes:
        raise AssertionError("the slow path ran")

    monkeypatch.setattr(canonical.rfc8785, "dumps", refuse)
    body = {"messages": [{"role": "user", "content": "Hi"}], "temperature": 0.7, "top_p": 0.9}
    assert canonical_json(body) == (
        b'{"messages":[{"content":"Hi","role":"user"}],"temperature":0.7,"top_p":0.9}'
    )


def test_a_state_enum_is_encoded_as_its_text_without_the_rfc8785_encoder() -> None:
    answer = {"grants": [{"id": "grt_1", "state": GrantState.ACTIVE}]}
    expected = b'{"grants":[{"id":"grt_1","state":"active"}]}'
    assert same_in_both(answer)
    assert canonical_json(answer) == expected == rfc8785.dumps(answer)
    assert canonical_json(answer, gradual=True) == expected
    assert canonical_json_and_compact_size(answer) == (expected, len(expected))


def test_text_is_counted_in_utf8_on_the_wire_and_with_ascii_escapes_for_response_bytes() -> None:
    content, size = canonical_json_and_compact_size({"text": "\u00e9t\u00e9 \U0001f600"})
    assert content == '{"text":"\u00e9t\u00e9 \U0001f600"}'.encode()
    assert size == len(b'{"text":"\\u00e9t\\u00e9 \\ud83d\\ude00"}')
