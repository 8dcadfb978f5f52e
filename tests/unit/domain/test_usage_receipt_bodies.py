"""A usage receipt's body encodes as the RFC 8785 encoder does, on its own fast path (a
receipt's fields, integers in range) and on the general one (anything else a grantor sends),
so a digest never depends on which path took it."""

from __future__ import annotations

from typing import Any

import pytest
import rfc8785
from hypothesis import given
from hypothesis import strategies as st

from ficc.base.canonical import MAX_SAFE_INTEGER
from ficc.domain import metering as m
from ficc.domain import usage_receipts as r

counts = st.integers(min_value=0, max_value=MAX_SAFE_INTEGER)
texts = st.text(max_size=12) | st.sampled_from(["\U0001f600", "a\uffff", "é ✓"])
hostile = (
    st.floats(allow_nan=False, allow_infinity=False)
    | st.integers(min_value=-MAX_SAFE_INTEGER, max_value=MAX_SAFE_INTEGER)
    | st.integers(min_value=MAX_SAFE_INTEGER - 1, max_value=MAX_SAFE_INTEGER + 2)
    | st.lists(st.integers(), max_size=2)
    | st.dictionaries(st.sampled_from(["\U0001f600", "b"]), st.integers(), max_size=2)
)
"""What a grantor may send in a field's place: floats, negative numbers, lists, objects."""


@st.composite
def bodies(draw: st.DrawFn) -> dict[str, Any]:
    body: dict[str, Any] = {
        "kind": r.USAGE_KIND,
        "seq": draw(counts),
        "prev": draw(texts),
        "totals": {name: draw(counts) for name in m.TOTAL_FIELDS},
    }
    for name in r.RECORD_FIELDS:
        body[name] = draw(counts | texts | st.none())
    for name in draw(st.lists(st.sampled_from([*body, "\U0001f600", "extra"]), max_size=3)):
        body[name] = draw(hostile | counts | texts)
    if isinstance(body["totals"], dict) and draw(st.booleans()):
        body["totals"][draw(st.sampled_from([*m.TOTAL_FIELDS, "\U0001f600"]))] = draw(hostile)
    return body


@given(bodies())
def test_every_body_encodes_as_the_rfc8785_encoder_does(body: dict[str, Any]) -> None:
    try:
        expected = rfc8785.dumps(body)
    except rfc8785.CanonicalizationError:
        # What RFC 8785 cannot carry (an integer past 2**53 - 1) is refused alike.
        with pytest.raises(rfc8785.CanonicalizationError):
            r.canonical_body(body)
        return
    assert r.canonical_body(body) == expected


def test_a_body_signed_here_takes_the_fast_path_and_one_past_the_safe_range_is_refused() -> None:
    body = {"kind": r.USAGE_KIND, "seq": 1, "totals": dict.fromkeys(m.TOTAL_FIELDS, 3)}
    assert r._plain(body)
    assert r.canonical_body(body) == rfc8785.dumps(body)
    body["totals"]["requests"] = MAX_SAFE_INTEGER + 1
    with pytest.raises(rfc8785.CanonicalizationError):
        r.canonical_body(body)
