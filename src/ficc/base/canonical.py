"""Canonical JSON's encoding, RFC 8785 (JCS): one byte string per value, so digests and
signatures are stable and any JCS library can check them. The protocol core's frames and the
domain's receipts encode with it; the strict decoding is the protocol core's
(``ficc.protocol.canonical``).
"""

from __future__ import annotations

import json
import math
from enum import StrEnum
from typing import Any, Final

import orjson
import rfc8785

MAX_SAFE_INTEGER: Final = 2**53 - 1
"""RFC 8785 numbers are IEEE doubles: integers past this have no exact spelling."""

_ENCODER: Final = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


def canonical_json(value: Any, *, gradual: bool = False) -> bytes:
    """Encode ``value`` as RFC 8785 JSON; ValueError for a value it cannot carry (a float
    that is not finite, an integer past ±(2**53 - 1), a key that is not a string).

    Values whose every float is an ordinary sampling parameter (not integral, at least
    :data:`MIN_PLAIN_FLOAT` in magnitude) and whose keys stay in the Basic Multilingual Plane
    encode the same under RFC 8785, orjson's sorted encoding and the standard library's sorted
    compact encoding (a property test holds the three to the ``rfc8785`` package byte for
    byte); orjson, the fastest, encodes them. Only the others go through the RFC 8785 encoder.

    ``gradual``: encode value by value in Python (the same bytes, several times slower), so a
    worker thread encoding a large body never holds the interpreter for long: a C encoder
    does the whole value in one call, stalling every other thread.
    """
    if same_in_both(value):
        return encode_sorted(value, gradual=gradual)
    return bytes(rfc8785.dumps(value))


MIN_PLAIN_FLOAT: Final = 1e-4
"""Below this magnitude the standard library spells a float with an exponent (``1e-05``) and
orjson from ``1e-5`` down, where ECMAScript spells it ``0.00001`` (down to ``1e-6``). Every
float that is not integral is below 2**52, where all three spell it alike, its shortest
round-trip digits without an exponent."""


def encode_sorted(value: Any, *, gradual: bool) -> bytes:
    if gradual:
        return "".join(_ENCODER.iterencode(value)).encode("utf-8")
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        # orjson refuses what nests past 254 levels: the standard library spells it alike.
        return _ENCODER.encode(value).encode("utf-8")


def same_in_both(value: Any) -> bool:
    """Whether orjson's and the standard library's sorted encodings of ``value`` are its
    RFC 8785 encoding: every float ordinary (not integral, not below :data:`MIN_PLAIN_FLOAT`;
    no NaN or infinity), every integer in range, every key a string of code points below
    U+10000. A ``StrEnum`` member is its text to all three."""
    pending = [value]
    while pending:
        item = pending.pop()
        kind = type(item)
        if kind is str or kind is bool or item is None:
            continue
        if kind is int:
            if not -MAX_SAFE_INTEGER <= item <= MAX_SAFE_INTEGER:
                return False
        elif kind is float:
            if not (math.isfinite(item) and abs(item) >= MIN_PLAIN_FLOAT) or item.is_integer():
                return False
        elif kind is dict:
            for key in item:
                if type(key) is not str or (not key.isascii() and max(key) > "\uffff"):
                    return False
            pending.extend(item.values())
        elif kind is list or kind is tuple:
            pending.extend(item)
        elif not isinstance(item, StrEnum):
            return False
    return True
