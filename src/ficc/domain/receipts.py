"""Acceptance receipts: what the approver signs, and how the requester checks it.

A receipt's body is canonical JSON (RFC 8785); its ``digest`` is the SHA-256 of that encoding;
its signature is the approver's FICC cluster key over ``RECEIPT_CONTEXT || digest``.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable
from typing import Any, Final

import rfc8785

from ficc.base.errors import Conflict

RECEIPT_KIND: Final = "ficc.acceptance/1"
RECEIPT_CONTEXT: Final = b"ficc.federation/1 acceptance receipt\x00"

Verify = Callable[[bytes, bytes, bytes], bool]


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def digest_of(body: dict[str, Any]) -> str:
    return hashlib.sha256(rfc8785.dumps(body)).hexdigest()


def signed_message(digest: str) -> bytes:
    return RECEIPT_CONTEXT + bytes.fromhex(digest)


def make_receipt(body: dict[str, Any], sign: Callable[[bytes], bytes]) -> dict[str, Any]:
    digest = digest_of(body)
    return {
        "digest": digest,
        "grant": body["grant"],
        "body": body,
        "signature": b64(sign(signed_message(digest))),
    }


def check_receipt(
    receipt: object,
    *,
    digest: str,
    offer_id: str,
    requester_hypernet_id: str,
    requester_cluster_key: str,
    service_hypernet_id: str,
    service_cluster_key: bytes,
    requested_scopes: frozenset[str],
    verify: Verify,
) -> dict[str, Any]:
    """The receipt's body if it answers exactly this offer and the service signed it."""
    refused = Conflict(
        "the receipt does not answer this offer or its signature is not the service's",
        details={"receipt": digest},
    )
    if not isinstance(receipt, dict) or not isinstance(receipt.get("body"), dict):
        raise refused
    body = receipt["body"]
    if receipt.get("digest") != digest or digest_of(body) != digest:
        raise refused
    try:
        signature = unb64(str(receipt.get("signature", "")))
    except ValueError as exc:
        raise refused from exc
    if not verify(service_cluster_key, signed_message(digest), signature):
        raise refused
    expected = {
        "kind": RECEIPT_KIND,
        "offer": offer_id,
        "requester": requester_hypernet_id,
        "requester_cluster_key": requester_cluster_key,
        "service": service_hypernet_id,
        "service_cluster_key": b64(service_cluster_key),
    }
    if any(body.get(name) != value for name, value in expected.items()):
        raise refused
    granted = body.get("grant_terms", {}).get("scopes")
    if not isinstance(granted, list) or not set(granted) <= requested_scopes:
        raise refused
    if not isinstance(body.get("generation"), int) or body["generation"] < 1:
        raise refused
    checked: dict[str, Any] = body
    return checked
