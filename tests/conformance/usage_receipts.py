"""An offline verifier of FICC usage receipts, written from docs/protocol.md ("Usage receipts")
and docs/metering.md alone: it imports nothing from ``ficc`` (only ``cryptography``,
``rfc8785`` and the standard library), so a third party can check an export with the
grantor's public cluster key and nothing else.

Usage: python -m tests.conformance.usage_receipts GRANTOR_CLUSTER_KEY EXPORT
(the key as FICC shows it, base64url without padding; EXPORT the output of
``ficc federation-usage GRANT --receipts`` in json or csv). Exit 0 when every receipt verifies
and the chain is whole, 1 naming each failing seq otherwise.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import sys
from pathlib import Path
from typing import Any, Final

from tests.conformance.fedwire import Key, b64, jcs, unb64, verifies

KIND: Final = "ficc.usage/1"
CONTEXT: Final = b"ficc.usage/1 receipt\x00"
GENESIS: Final = "0" * 64
TOTALS: Final = (
    "requests",
    "prompt_tokens",
    "completion_tokens",
    "request_bytes",
    "response_bytes",
)
RECORD: Final = (
    "request",
    "grant",
    "operation",
    "service",
    "prompt_tokens",
    "completion_tokens",
    "request_bytes",
    "response_bytes",
    "outcome",
)
"""The fields a grantor's record and its receipt's body both carry, to the same values."""


def digest_of(body: dict[str, Any]) -> str:
    return hashlib.sha256(jcs(body)).hexdigest()


def signed_message(digest: str) -> bytes:
    return CONTEXT + bytes.fromhex(digest)


def sign(body: dict[str, Any], key: Key) -> dict[str, Any]:
    """A receipt as the document makes one: the kit reproduces the vector with it."""
    digest = digest_of(body)
    return {"body": body, "digest": digest, "signature": b64(key.sign(signed_message(digest)))}


def problems_of(receipts: list[dict[str, Any]], public_key: bytes) -> list[tuple[int, str]]:
    """Each receipt checked alone, then against the one before it: ``(seq, reason)`` for each
    that fails (a seq the chain skips is ``missing``)."""
    found: list[tuple[int, str]] = []
    prev, totals, expected, linked = GENESIS, dict.fromkeys(TOTALS, 0), 1, True
    for receipt in receipts:
        body = receipt.get("body")
        seq = body.get("seq") if isinstance(body, dict) else None
        if not isinstance(body, dict) or not isinstance(seq, int) or body.get("kind") != KIND:
            found.append((expected, "malformed"))
            expected, linked = expected + 1, False
            continue
        if seq < expected:
            found.append((seq, "seq_mismatch"))
            continue
        found.extend((gap, "missing") for gap in range(expected, seq))
        linked = linked and seq == expected
        expected = seq + 1
        digest = digest_of(body)
        if receipt.get("digest") != digest:
            found.append((seq, "digest_mismatch"))
            linked = False
            continue
        try:
            signature = unb64(str(receipt.get("signature", "")))
        except ValueError:
            signature = b""
        if not verifies(public_key, signed_message(digest), signature):
            found.append((seq, "signature"))
            linked = False
            continue
        if linked:
            if body.get("prev") != prev:
                found.append((seq, "prev_mismatch"))
            else:
                added = {name: 1 if name == "requests" else body[name] for name in TOTALS}
                if any(body["totals"][name] != totals[name] + added[name] for name in TOTALS):
                    found.append((seq, "totals_mismatch"))
        prev, totals, linked = digest, dict(body["totals"]), True
    return found


def read_export(text: str) -> tuple[str | None, list[dict[str, Any]]]:
    """An export's side and records, each with its ``receipt`` as an object (or None)."""
    stripped = text.lstrip()
    if stripped.startswith("{"):
        export = json.loads(text)
        return export.get("side"), list(export["records"])
    records: list[dict[str, Any]] = []
    for row in csv.DictReader(io.StringIO(text)):
        record: dict[str, Any] = dict(row)
        for name in TOTALS[1:]:
            record[name] = int(record[name])
        record["service"] = record.get("service") or None
        record["receipt"] = json.loads(row["receipt"]) if row.get("receipt") else None
        records.append(record)
    return None, records


def verify_export(text: str, public_key: bytes) -> dict[str, Any]:
    """The report of an export: its receipts' problems, records whose receipt is absent or
    says other counts (a grantor's export: every field), and the chain's head."""
    side, records = read_export(text)
    receipts = sorted(
        (r["receipt"] for r in records if isinstance(r.get("receipt"), dict)),
        key=lambda receipt: receipt.get("body", {}).get("seq", 0),
    )
    problems = problems_of(receipts, public_key)
    unmatched: list[str] = []
    for record in records:
        receipt = record.get("receipt")
        if not isinstance(receipt, dict):
            unmatched.append(str(record.get("request")))
            continue
        body = receipt["body"]
        names = RECORD if side != "requester" else ("request", "request_bytes")
        if any(body.get(name) != record.get(name) for name in names if name in record):
            unmatched.append(str(record.get("request")))
    last = receipts[-1] if receipts else None
    return {
        "receipts": len(receipts),
        "head": {"seq": last["body"]["seq"], "digest": last["digest"]} if last else None,
        "invalid": [{"seq": seq, "reason": reason} for seq, reason in problems],
        "unmatched": unmatched,
        "verified": not problems and not unmatched,
    }


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        sys.stderr.write(__doc__ or "")
        return 2
    report = verify_export(Path(argv[1]).read_text(encoding="utf-8"), unb64(argv[0]))
    sys.stdout.write(json.dumps(report, indent=2) + "\n")
    return 0 if report["verified"] else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
