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


@given(bodies(), st.binary(min_size=64, max_size=64))
def test_a_receipts_text_is_its_rfc8785_encoding_put_together_from_its_bodys(
    body: dict[str, Any], signature: bytes
) -> None:
    """The text a receipt is kept as, made from its body's encoding (no second encode), is
    the RFC 8785 encoding of the whole receipt; a receipt with anything more has none."""
    try:
        receipt, text = r.signed_receipt(body, lambda message: signature)
    except rfc8785.CanonicalizationError:
        return
    assert text.encode() == rfc8785.dumps(receipt)
    assert r.receipt_text({**receipt, "extra": 1}, r.canonical_body(body)) is None
    assert r.receipt_text({**receipt, "digest": 'a"b'}, r.canonical_body(body)) is None


def test_a_receipt_that_verifies_comes_with_its_text_and_one_that_fails_without() -> None:
    body = {
        "kind": r.USAGE_KIND,
        "seq": 1,
        "prev": r.GENESIS,
        "grant": "grt_x",
        "totals": dict.fromkeys(m.TOTAL_FIELDS, 3),
        **dict.fromkeys(r.RECORD_FIELDS[6:10], 3),
    }
    receipt = r.sign_receipt(body, lambda message: b"s" * 64)

    def verify(key: bytes, message: bytes, signature: bytes) -> bool:
        return signature == b"s" * 64

    checked = r.checked_alone(receipt, grant="grt_x", public_key=b"k", verify=verify)
    assert checked == (body, None, rfc8785.dumps(receipt).decode())
    forged = {**receipt, "signature": r.b64(b"f" * 64)}
    assert r.checked_alone(forged, grant="grt_x", public_key=b"k", verify=verify) == (
        None,
        r.SIGNATURE,
        None,
    )
