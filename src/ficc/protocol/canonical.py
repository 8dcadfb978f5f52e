"""Canonical JSON: RFC 8785 (JCS), one byte string per value, on the wire, in receipts and in
manifests, so signatures and golden vectors are stable and any JCS library can check them.

Encoding: keys sorted by their UTF-16 code units, no insignificant whitespace, UTF-8, numbers
spelled as ECMAScript does (``1.0`` is ``1``, ``1e-07`` is ``1e-7``), integers within
±(2**53 - 1), no NaN or infinity. Decoding is strict: duplicate keys, constants like ``NaN``,
invalid UTF-8 and non-canonical spellings are refused with
:class:`~ficc.base.errors.ProtocolError`, never another exception.
"""

from __future__ import annotations

import json
import json.scanner
from typing import Any, Final, NoReturn

import rfc8785

from ficc.base.canonical import (
    MAX_SAFE_INTEGER,
    canonical_json,
    encode_sorted,
    same_in_both,
)
from ficc.base.errors import ProtocolError

_DECODER: Final = json.JSONDecoder()


def canonical_json_and_compact_size(value: Any, *, gradual: bool = False) -> tuple[bytes, int]:
    """``value`` as RFC 8785 JSON, and the size of its compact JSON with ASCII escapes (what
    ``json.dumps(value, separators=(",", ":"))`` writes, as a compatible URL sends it).

    Without floats but ordinary ones (see :func:`canonical_json`) the two spell everything
    alike but strings: the compact form escapes each
    character from U+007F on, so its size is told from the RFC 8785 bytes by counting UTF-8
    lead bytes, not by encoding again. A value with floats (spelled apart) is encoded twice.
    """
    if same_in_both(value):
        content = encode_sorted(value, gradual=gradual)
        return content, len(content) + _ascii_escape_growth(content)
    content = bytes(rfc8785.dumps(value))
    if gradual:
        return content, sum(len(piece) for piece in _COMPACT_ASCII.iterencode(value))
    return content, len(_COMPACT_ASCII.encode(value))


_COMPACT_ASCII: Final = json.JSONEncoder(separators=(",", ":"))
_GROWTH_CLASSES: Final = bytes.maketrans(
    bytes(range(256)),
    bytes(
        ord("d")
        if b == 0x7F
        else ord("b")
        if 0xC2 <= b <= 0xDF
        else ord("c")
        if 0xE0 <= b <= 0xEF
        else ord("e")
        if 0xF0 <= b <= 0xF4
        else ord(".")
        for b in range(256)
    ),
)
"""Each byte of UTF-8 JSON by what the character it starts grows by in ASCII-escaped JSON:
DEL (1 byte, ``\u007f``: +5), a two-byte character (+4), a three-byte one (+3), a four-byte
one (a surrogate pair, 12 characters: +8); continuation bytes and ASCII start nothing."""


def _ascii_escape_growth(content: bytes) -> int:
    classes = content.translate(_GROWTH_CLASSES)
    return (
        5 * classes.count(b"d")
        + 4 * classes.count(b"b")
        + 3 * classes.count(b"c")
        + 8 * classes.count(b"e")
    )


def first_member_bytes(doc_bytes: int, doc: dict[str, Any], key: str) -> int:
    """The size of ``doc[key]``'s canonical JSON, from ``doc_bytes``, the size of ``doc``'s,
    when ``key`` sorts before every other key: only the rest of ``doc`` is encoded (RFC 8785
    spells a value alike wherever it stands), so a large member is measured without encoding
    it again. ValueError if ``key`` is not the first key.
    """
    if key not in doc or any(other < key for other in doc):
        raise ValueError(f"{key} is not the first key of the object")
    rest = {name: value for name, value in doc.items() if name != key}
    # '{' "key" ':' VALUE then ',' REST '}' (as long as REST's own encoding), or '}' alone.
    tail = _encoded_size(rest) if rest else 1
    return doc_bytes - 1 - _encoded_size(key) - 1 - tail


def _plain_size(value: object) -> int | None:
    """The RFC 8785 size of a string RFC 8785 writes as it is (printable ASCII, no quote or
    backslash: an ID, a name) or of an integer in range; None for any other value."""
    if isinstance(value, str):
        if value.isascii() and value.isprintable() and '"' not in value and "\\" not in value:
            return len(value) + 2
    elif type(value) is int and -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
        return len(str(value))
    return None


def _encoded_size(value: str | dict[str, Any]) -> int:
    """The size of ``value``'s RFC 8785 encoding: counted for a string or an object of
    plain members (what a request's envelope holds beside its body), else encoded."""
    if isinstance(value, str):
        size = _plain_size(value)
        return len(canonical_json(value)) if size is None else size
    total = 1 + 2 * len(value) if value else 2  # braces; a colon and a comma a member, less one
    for name, member in value.items():
        name_size, member_size = _plain_size(name), _plain_size(member)
        if name_size is None or member_size is None:
            return len(canonical_json(value))
        total += name_size + member_size
    return total


def _refuse_constant(name: str) -> NoReturn:
    raise ProtocolError(f"JSON constant {name} is not allowed")


def _integer_or_double(text: str) -> int | float:
    """An integer past ±(2**53 - 1) is read as the double RFC 8785 numbers are: it is then
    canonical only if that double spells it back exactly."""
    number = int(text)
    return number if -MAX_SAFE_INTEGER <= number <= MAX_SAFE_INTEGER else float(number)


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ProtocolError(f"duplicate JSON key {key!r}")
        result[key] = value
    return result


def parse_canonical_json(data: bytes, *, what: str, gradual: bool = False) -> Any:
    """Decode canonical JSON bytes, refusing anything another encoder could have spelled.

    Canonical input is decoded without hooks, then encoded again and compared. That check
    alone refuses all the strict decoder refuses: a duplicate key, ``NaN`` or a number JSON
    cannot carry never encodes back to the same bytes. Input failing it is decoded again
    strictly, only to say precisely what is wrong with it.

    ``gradual``: for a worker thread given a large body. Decoded by the standard library's
    Python scanner (strings still by its C scanner) and checked by the gradual encoding, so
    the interpreter passes to other threads (the event loop) every few milliseconds; the C
    decoder would hold it for the whole body. Several times slower; the same answer.
    """
    if gradual:
        return _parse_gradually(data, what=what)
    try:
        value = _DECODER.decode(data.decode("utf-8"))
        if canonical_json(value) == data:
            return value
    except (ValueError, RecursionError):
        pass
    return _parse_strictly(data, what=what)


class _GradualDecoder(json.JSONDecoder):
    """The strict decoder with the standard library's Python scanner (see ``gradual``)."""

    def __init__(self) -> None:
        super().__init__(
            object_pairs_hook=_no_duplicates,
            parse_constant=_refuse_constant,
            parse_int=_integer_or_double,
        )
        self.scan_once = json.scanner.py_make_scanner(self)  # type: ignore[attr-defined]


def _parse_gradually(data: bytes, *, what: str) -> Any:
    try:
        value = _GradualDecoder().decode(data.decode("utf-8"))
    except ProtocolError:
        raise
    except (ValueError, RecursionError) as exc:
        raise ProtocolError(f"{what} is not valid JSON") from exc
    try:
        again = canonical_json(value, gradual=True)
    except (ValueError, RecursionError) as exc:
        raise ProtocolError(f"{what} is not canonical JSON") from exc
    if again != data:
        raise ProtocolError(f"{what} is not canonical JSON")
    return value


def _parse_strictly(data: bytes, *, what: str) -> Any:
    try:
        text = data.decode("utf-8")
        value = json.loads(
            text,
            object_pairs_hook=_no_duplicates,
            parse_constant=_refuse_constant,
            parse_int=_integer_or_double,
        )
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


def parse_json_object(data: bytes, *, what: str, gradual: bool = False) -> dict[str, Any]:
    """Decode canonical JSON that must be an object (``gradual``: see
    :func:`parse_canonical_json`)."""
    value = parse_canonical_json(data, what=what, gradual=gradual)
    if not isinstance(value, dict):
        raise ProtocolError(f"{what} must be a JSON object")
    return value
