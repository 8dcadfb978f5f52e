"""Usage receipts: the grantor signs each usage record of a grant, chained per grant, so
neither side can later inflate, drop or rewrite what happened.

A receipt is ``{"body", "digest", "signature"}`` as the acceptance receipt: ``digest`` is the
SHA-256 of the RFC 8785 encoding of ``body``; ``signature`` is Ed25519 by the grantor's cluster
key over :data:`USAGE_CONTEXT` followed by the digest's 32 bytes. ``body.seq`` counts the
grant's receipts from 1 with no gap, ``body.prev`` is the previous receipt's digest
(:data:`GENESIS` for the first) and ``body.totals`` the grant's running sums, this record's
counts included. Pure: the key and the verifying function are parameters.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from ficc.base.canonical import canonical_json
from ficc.base.times import format_time
from ficc.domain.metering import COMPLETED, TOTAL_FIELDS, UsageRecord, empty_totals
from ficc.domain.receipts import b64, unb64

USAGE_KIND: Final = "ficc.usage/1"
USAGE_CONTEXT: Final = b"ficc.usage/1 receipt\x00"
GENESIS: Final = "0" * 64
"""The ``prev`` of a grant's first receipt."""
MAX_RECEIPTS_PAGE: Final = 100
"""The most receipts one ``usage.receipts`` answer holds (about 1 KiB each)."""
RECEIPTS_ANSWER_BYTES: Final = 256 * 1024
"""The most a ``usage.receipts`` answer may be on the wire."""

RECORD_FIELDS: Final = (
    "request",
    "grant",
    "operation",
    "service",
    "started_at",
    "ended_at",
    "prompt_tokens",
    "completion_tokens",
    "request_bytes",
    "response_bytes",
    "outcome",
)
"""The usage record's fields a receipt's body carries, as the record's JSON names them."""

Sign = Callable[[bytes], bytes]
Verify = Callable[[bytes, bytes, bytes], bool]

# Why a receipt fails, as reconcile and the usage records name it.
SIGNATURE: Final = "signature"
DIGEST: Final = "digest_mismatch"
MALFORMED: Final = "malformed"
SEQ: Final = "seq_mismatch"
PREV: Final = "prev_mismatch"
TOTALS: Final = "totals_mismatch"
COUNTS: Final = "counts_mismatch"
MISSING: Final = "missing"
DIFFERS: Final = "differs"
"""The grantor's receipt at this seq is not the one this side was given (one was rewritten)."""


@dataclass(frozen=True)
class Head:
    """The last receipt of a grant's chain (seq 0 and :data:`GENESIS` before the first)."""

    seq: int
    digest: str
    totals: Mapping[str, int]

    def to_json(self) -> dict[str, Any]:
        return {"seq": self.seq, "digest": self.digest}


EMPTY_HEAD: Final = Head(0, GENESIS, empty_totals())


@dataclass(frozen=True)
class StoredReceipt:
    """A receipt as one side keeps it; ``problem`` is why it failed verification (None: it
    verified, or was not checked yet when ``verified`` is False)."""

    grant: str
    side: str
    seq: int
    request: str
    receipt: Mapping[str, Any]
    verified: bool
    problem: str | None = None
    text: str | None = field(default=None, compare=False, repr=False)
    """The receipt's RFC 8785 text, when its signature or check already encoded its body
    (None: the store encodes it)."""

    @property
    def digest(self) -> str:
        return str(self.receipt.get("digest", ""))

    @property
    def body(self) -> Mapping[str, Any]:
        body = self.receipt.get("body")
        return body if isinstance(body, Mapping) else {}


def digest_of(body: Mapping[str, Any]) -> str:
    return _hashed(body).hexdigest()


def _hashed(body: Mapping[str, Any]) -> hashlib._Hash:
    return _hashed_bytes(canonical_body(body))


def _hashed_bytes(encoded: bytes) -> hashlib._Hash:
    digest = _SHA256.copy()
    digest.update(encoded)
    return digest


def receipt_text(receipt: Mapping[str, Any], encoded_body: bytes) -> str | None:
    """The RFC 8785 text of a receipt of exactly ``body``, ``digest`` and ``signature``, put
    together from its body's own RFC 8785 bytes (a digest is hex and a signature base64url:
    RFC 8785 writes both as they are, and sorts the three names so); None for any other."""
    digest, signature = receipt.get("digest"), receipt.get("signature")
    if len(receipt) != 3 or not isinstance(digest, str) or not isinstance(signature, str):
        return None
    if not (_PLAIN.fullmatch(digest) and _PLAIN.fullmatch(signature)):
        return None
    return f'{{"body":{encoded_body.decode()},"digest":"{digest}","signature":"{signature}"}}'


_PLAIN: Final = re.compile(r"[A-Za-z0-9_-]*")


_SHA256: Final = hashlib.sha256()
"""Copied for each digest: ``hashlib.sha256()`` looks OpenSSL's algorithm up by name each
time, which costs as much as hashing a receipt."""


_BODY_KEYS: Final = frozenset(("kind", "seq", "prev", "totals", *RECORD_FIELDS))
_TOTAL_KEYS: Final = frozenset(TOTAL_FIELDS)


def canonical_body(body: Mapping[str, Any]) -> bytes:
    """The RFC 8785 encoding of a receipt's body. One of a receipt's own fields alone, its
    values text, integers in range, booleans or null and its ``totals`` the same, is
    orjson's sorted encoding (every key ASCII, no float; orjson refuses an integer out of
    range itself): every receipt FICC signs, checked here by type alone, without the general
    encoder's walk of every value. Any other body goes the general way."""
    if _plain(body):
        try:
            return orjson.dumps(body, option=_SORTED_SAFE)
        except TypeError:
            pass  # an integer out of range, a lone surrogate: the general way says what
    return canonical_json(body)


_SORTED_SAFE: Final = orjson.OPT_SORT_KEYS | orjson.OPT_STRICT_INTEGER
_FLAT: Final = frozenset((str, int, bool, type(None)))
_FLAT_OR_OBJECT: Final = _FLAT | {dict}


def _plain(body: Mapping[str, Any]) -> bool:
    """Whether ``body`` is a receipt's fields alone, with no float, list or object but its
    ``totals`` (of the totals' fields alone, flat)."""
    if type(body) is not dict or not body.keys() <= _BODY_KEYS:
        return False
    totals = body.get("totals")
    kinds = list(map(type, body.values()))
    return (
        type(totals) is dict
        and totals.keys() <= _TOTAL_KEYS
        and _FLAT.issuperset(map(type, totals.values()))
        and kinds.count(dict) == 1
        and _FLAT_OR_OBJECT.issuperset(kinds)
    )


def signed_message(digest: str) -> bytes:
    return USAGE_CONTEXT + bytes.fromhex(digest)


def running_totals(before: Mapping[str, int], record: UsageRecord) -> dict[str, int]:
    """The grant's sums once ``record`` is counted."""
    return {
        "requests": before.get("requests", 0) + 1,
        "prompt_tokens": before.get("prompt_tokens", 0) + record.prompt_tokens,
        "completion_tokens": before.get("completion_tokens", 0) + record.completion_tokens,
        "request_bytes": before.get("request_bytes", 0) + record.request_bytes,
        "response_bytes": before.get("response_bytes", 0) + record.response_bytes,
    }


def receipt_body(record: UsageRecord, head: Head) -> dict[str, Any]:
    """The body the grantor signs for ``record``, the next after ``head``."""
    return {
        "kind": USAGE_KIND,
        "seq": head.seq + 1,
        "prev": head.digest,
        "request": record.request,
        "grant": record.grant,
        "operation": record.operation,
        "service": record.service,
        "started_at": format_time(record.started_at),
        "ended_at": format_time(record.ended_at),
        "prompt_tokens": record.prompt_tokens,
        "completion_tokens": record.completion_tokens,
        "request_bytes": record.request_bytes,
        "response_bytes": record.response_bytes,
        "outcome": record.outcome,
        "totals": running_totals(head.totals, record),
    }


def sign_receipt(body: dict[str, Any], sign: Sign) -> dict[str, Any]:
    return signed_receipt(body, sign)[0]


def signed_receipt(body: dict[str, Any], sign: Sign) -> tuple[dict[str, Any], str]:
    """The receipt of ``body`` signed, and its RFC 8785 text (its body encoded once)."""
    encoded = canonical_body(body)
    hashed = _hashed_bytes(encoded)
    signature = sign(USAGE_CONTEXT + hashed.digest())
    receipt = {"body": body, "digest": hashed.hexdigest(), "signature": b64(signature)}
    text = receipt_text(receipt, encoded)
    assert text is not None  # hex and base64url
    return receipt, text


def head_after(receipt: Mapping[str, Any]) -> Head:
    """The chain's head once ``receipt`` (a well-formed one) is its last."""
    body = receipt["body"]
    totals = body.get("totals")
    sums = {name: int(totals.get(name, 0)) for name in TOTAL_FIELDS} if totals else {}
    return Head(int(body["seq"]), str(receipt["digest"]), sums)


def head_kept(receipt: object, seq: int, digest: str) -> Head:
    """The chain's head once ``receipt``, kept at ``seq`` with ``digest``, is its last: one
    that no longer reads as a receipt still chains by its place and digest."""
    if isinstance(receipt, Mapping):
        with contextlib.suppress(ValueError, KeyError, TypeError, AttributeError):
            return head_after(receipt)
    return Head(seq, digest, {})


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def check_alone(
    receipt: object, *, grant: str, public_key: bytes, verify: Verify
) -> tuple[dict[str, Any] | None, str | None]:
    """The receipt's body if it is well formed, of ``grant``, its digest its body's and its
    signature the grantor's; else why not (nothing about its neighbours)."""
    body, problem, _ = checked_alone(receipt, grant=grant, public_key=public_key, verify=verify)
    return body, problem


def checked_alone(
    receipt: object, *, grant: str, public_key: bytes, verify: Verify
) -> tuple[dict[str, Any] | None, str | None, str | None]:
    """:func:`check_alone`, and the receipt's RFC 8785 text when it verified (its body
    encoded once, for the digest)."""
    if not isinstance(receipt, Mapping) or not isinstance(receipt.get("body"), Mapping):
        return None, MALFORMED, None
    body = dict(receipt["body"])
    digest = receipt.get("digest")
    if body.get("kind") != USAGE_KIND or body.get("grant") != grant:
        return None, MALFORMED, None
    if not _count(body.get("seq")) or not isinstance(body.get("prev"), str):
        return None, MALFORMED, None
    if not all(_count(body.get(name)) for name in RECORD_FIELDS[6:10]):
        return None, MALFORMED, None
    totals = body.get("totals")
    if not isinstance(totals, Mapping) or not all(_count(totals.get(n)) for n in TOTAL_FIELDS):
        return None, MALFORMED, None
    try:
        encoded = canonical_body(body)
        hashed = _hashed_bytes(encoded)
        if not isinstance(digest, str) or hashed.hexdigest() != digest:
            return None, DIGEST, None
        signature = unb64(str(receipt.get("signature", "")))
    except ValueError:
        return None, MALFORMED, None
    if not verify(public_key, USAGE_CONTEXT + hashed.digest(), signature):
        return None, SIGNATURE, None
    return body, None, receipt_text(receipt, encoded)


def follows(body: Mapping[str, Any], head: Head) -> str | None:
    """Why ``body`` is not the receipt right after ``head`` (None: it is)."""
    if body.get("seq") != head.seq + 1:
        return SEQ
    if body.get("prev") != head.digest:
        return PREV
    expected = dict(head.totals) or empty_totals()
    for name in TOTAL_FIELDS:
        added = 1 if name == "requests" else body.get(name, 0)
        if body["totals"].get(name) != expected.get(name, 0) + added:
            return TOTALS
    return None


def matches_record(body: Mapping[str, Any], record: UsageRecord) -> bool:
    """Whether the receipt says what the requester saw of the request: the same request and
    grant, the request bytes it sent, the counts it was told (when it was told some), and, for
    an answer it received whole, at least the response bytes it received (the grantor counts
    what it sent, which a cut may keep from arriving)."""
    if body.get("request") != record.request or body.get("grant") != record.grant:
        return False
    if body.get("operation") != record.operation or body.get("service") != record.service:
        return False
    if body.get("request_bytes") != record.request_bytes:
        return False
    if record.told and (
        body.get("prompt_tokens") != record.prompt_tokens
        or body.get("completion_tokens") != record.completion_tokens
    ):
        return False
    response_bytes = body.get("response_bytes")
    if not isinstance(response_bytes, int) or response_bytes < record.response_bytes:
        return False
    return not (record.outcome == COMPLETED and record.told and body.get("outcome") != COMPLETED)


@dataclass(frozen=True)
class Finding:
    """A receipt that fails verification: its seq and why."""

    seq: int
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"seq": self.seq, "reason": self.reason}


def verify_chain(
    receipts: Iterable[tuple[int, Mapping[str, Any]]],
    *,
    grant: str,
    public_key: bytes,
    verify: Verify,
    head_seq: int | None = None,
    start: Head = EMPTY_HEAD,
) -> tuple[Head, list[Finding]]:
    """Check ``(seq, receipt)`` pairs fed in ``seq`` order as one chain (``seq``: where the
    side that kept it says it sits): each receipt alone, its ``body.seq`` its place, then
    linked to the one before it. A seq not there is ``missing`` (up to ``head_seq`` when
    given). A break is named where it is: the chain goes on from the next receipt that
    verifies alone. The head is the last receipt that verified. ``start``: the receipt the
    first one fed follows (a chain checked from the middle)."""
    head = start
    findings: list[Finding] = []
    linkable = True
    expected = start.seq + 1
    for seq, receipt in receipts:
        if seq < expected:
            findings.append(Finding(seq, SEQ))
            continue
        if seq > expected:
            findings.extend(Finding(gap, MISSING) for gap in range(expected, seq))
            linkable = False
        expected = seq + 1
        body, problem = check_alone(receipt, grant=grant, public_key=public_key, verify=verify)
        if body is None:
            findings.append(Finding(seq, problem or MALFORMED))
            linkable = False
            continue
        if body["seq"] != seq:
            findings.append(Finding(seq, SEQ))
            linkable = False
            continue
        if linkable:
            link = follows(body, head)
            if link is not None:
                findings.append(Finding(seq, link))
        head = head_after({"body": body, "digest": receipt["digest"]})
        linkable = True
    if head_seq is not None:
        findings.extend(Finding(gap, MISSING) for gap in range(expected, head_seq + 1))
    return head, findings
