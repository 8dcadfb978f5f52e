"""Canonical JSON: one byte string per value, so signatures and golden vectors are stable.

Encoding: keys sorted, no insignificant whitespace, UTF-8, no NaN or infinity. Decoding is
strict: duplicate keys, constants like ``NaN``, invalid UTF-8 and non-canonical spellings are
refused with :class:`~ficc.base.errors.ProtocolError`, never another exception.
"""

from __future__ import annotations

import json
from typing import Any, Final, NoReturn

from ficc.base.errors import ProtocolError

_ENCODER: Final = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)
_DECODER: Final = json.JSONDecoder()


def canonical_json(value: Any) -> bytes:
    """Encode ``value`` canonically; a value JSON cannot carry is a programming error."""
    return _ENCODER.encode(value).encode("utf-8")


def _refuse_constant(name: str) -> NoReturn:
    raise ProtocolError(f"JSON constant {name} is not allowed")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ProtocolError(f"duplicate JSON key {key!r}")
        result[key] = value
    return result


def parse_canonical_json(data: bytes, *, what: str) -> Any:
    """Decode canonical JSON bytes, refusing anything another encoder could have spelled.

    Canonical input is decoded without hooks, then encoded again and compared. That check
    alone refuses all the strict decoder refuses: a duplicate key, ``NaN`` or a number JSON
    cannot carry never encodes back to the same bytes. Input failing it is decoded again
    strictly, only to say precisely what is wrong with it.
    """
    try:
        value = _DECODER.decode(data.decode("utf-8"))
        if canonical_json(value) == data:
            return value
    except (ValueError, RecursionError):
        pass
    return _parse_strictly(data, what=what)


def _parse_strictly(data: bytes, *, what: str) -> Any:
    try:
        text = data.decode("utf-8")
        value = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_refuse_constant)
    except ProtocolError:
        raise
    except (ValueError, RecursionError) as exc:
        raise ProtocolError(f"{what} is not valid JSON") from exc
    try:
        again = canonical_json(value)
    except (ValueError, RecursionError) as exc:
        raise ProtocolError(f"{what} is not canonical JSON") from exc
    if again != data:
        raise ProtocolError(f"{what} is not canonical JSON")
    return value


def parse_json_object(data: bytes, *, what: str) -> dict[str, Any]:
    """Decode canonical JSON that must be an object."""
    value = parse_canonical_json(data, what=what)
    if not isinstance(value, dict):
        raise ProtocolError(f"{what} must be a JSON object")
    return value
