"""Acceptance receipts: a receipt answers exactly one offer and only the service's key signs it.

Signing is a keyed hash here: the rule under test is which bytes are signed and checked, not
Ed25519 (tested with the real keys in tests/integration/test_hypernet_keys.py).
"""

from __future__ import annotations

import copy
import hashlib
import hmac
from typing import Any

import pytest

from ficc.base.errors import Conflict
from ficc.domain.receipts import RECEIPT_KIND, b64, check_receipt, digest_of, make_receipt

SERVICE_KEY = b"s" * 32
OTHER_KEY = b"o" * 32


def sign_with(key: bytes) -> Any:
    return lambda message: hmac.digest(key, message, hashlib.sha256)


def verify(public: bytes, message: bytes, signature: bytes) -> bool:
    return hmac.compare_digest(hmac.digest(public, message, hashlib.sha256), signature)


def body(**changes: Any) -> dict[str, Any]:
    return {
        "kind": RECEIPT_KIND,
        "offer": "off_" + "a" * 26,
        "requester": "r" * 64,
        "requester_cluster_key": "requester-key",
        "service": "s" * 64,
        "service_cluster_key": b64(SERVICE_KEY),
        "grant": "grt_" + "c" * 26,
        "grant_terms": {"scopes": ["discover"]},
        "generation": 1,
        **changes,
    }


def check(receipt: object, digest: str, **changes: Any) -> dict[str, Any]:
    arguments: dict[str, Any] = {
        "digest": digest,
        "offer_id": "off_" + "a" * 26,
        "requester_hypernet_id": "r" * 64,
        "requester_cluster_key": "requester-key",
        "service_hypernet_id": "s" * 64,
        "service_cluster_key": SERVICE_KEY,
        "requested_scopes": frozenset({"discover", "inference:invoke"}),
        "verify": verify,
        **changes,
    }
    return check_receipt(receipt, **arguments)


def test_a_receipt_signed_by_the_service_for_this_offer_is_accepted() -> None:
    receipt = make_receipt(body(), sign_with(SERVICE_KEY))
    assert receipt["digest"] == digest_of(body())
    assert check(receipt, receipt["digest"]) == body()


def test_the_digest_does_not_depend_on_key_order() -> None:
    assert digest_of(dict(reversed(list(body().items())))) == digest_of(body())


@pytest.mark.parametrize(
    "tamper",
    [
        lambda r: r["body"].update(generation=0),
        lambda r: r["body"].update(offer="off_" + "z" * 26),
        lambda r: r["body"]["grant_terms"].update(scopes=["models:manage"]),
        lambda r: r.update(signature="!!"),
        lambda r: r.update(digest="0" * 64),
        lambda r: r.update(body="not an object"),
    ],
    ids=["generation", "other-offer", "unrequested-scope", "bad-signature", "digest", "body"],
)
def test_any_change_to_a_signed_receipt_is_refused(tamper: Any) -> None:
    receipt = make_receipt(body(), sign_with(SERVICE_KEY))
    digest = receipt["digest"]
    tampered = copy.deepcopy(receipt)
    tamper(tampered)
    with pytest.raises(Conflict) as refused:
        check(tampered, digest)
    assert refused.value.details == {"receipt": digest}


def test_a_receipt_signed_by_another_key_is_refused() -> None:
    receipt = make_receipt(body(), sign_with(OTHER_KEY))
    with pytest.raises(Conflict):
        check(receipt, receipt["digest"])


def test_a_receipt_for_another_requester_is_refused() -> None:
    receipt = make_receipt(body(), sign_with(SERVICE_KEY))
    with pytest.raises(Conflict):
        check(receipt, receipt["digest"], requester_hypernet_id="q" * 64)
