"""Grant terms: defaults, maxima, exact IDs and requested scopes, as pure rules.

The approval table moved here from the two-cluster tier: each refusal names its field; the
HTTP path's mapping of one of them to 400 stays in tests/e2e/test_pairing_refusals.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from ficc.base.errors import InvalidInput
from ficc.base.units import DAY_SECONDS, KiB, MiB, TiB
from ficc.domain.grants import parse_grant

REQUESTED = ["discover", "inference:invoke"]

OUT_OF_RANGE: list[tuple[str, dict[str, Any]]] = [
    ("grant.lifetime", {"lifetime": 30 * DAY_SECONDS + 1}),
    ("grant.concurrent", {"concurrent": 17}),
    ("grant.requests", {"requests": 1_000_001}),
    ("grant.transfer_bytes", {"transfer_bytes": 16 * TiB + 1}),
    ("grant.response_bytes", {"response_bytes": 256 * MiB + 1}),
    ("grant.request_bytes", {"request_bytes": 64 * MiB + 1}),
    ("grant.lifetime", {"lifetime": 0}),
    ("grant.concurrent", {"concurrent": 0}),
    ("grant.requests", {"requests": 0}),
    ("grant.request_bytes", {"request_bytes": 0}),
    ("grant.response_bytes", {"response_bytes": 0}),
    ("grant.transfer_bytes", {"transfer_bytes": -1}),
    ("grant.concurrent", {"concurrent": -3}),
    ("grant.requests", {"requests": 1.5}),
    ("grant.concurrent", {"concurrent": "2"}),
    ("grant.lifetime", {"lifetime": True}),
    ("grant.services[0]", {"services": ["svc_*"]}),
    ("grant.services[0]", {"services": ["*"]}),
    ("grant.models[0]", {"models": ["*"]}),
    ("grant.nodes[0]", {"nodes": ["nod_*"]}),
    ("grant.scopes", {"scopes": ["discover", "models:read"]}),
    ("grant.scopes[0]", {"scopes": ["*"]}),
    ("grant.scopes", {"scopes": []}),
    ("grant.wildcard", {"wildcard": True}),
    ("grant.stop_on_revoke", {"stop_on_revoke": "yes"}),
    ("grant.services[1]", {"services": ["svc_" + "a" * 26, "svc_" + "a" * 26]}),
]


@pytest.mark.parametrize(
    ("field", "change"), OUT_OF_RANGE, ids=[f"{f}={v}" for f, v in OUT_OF_RANGE]
)
def test_terms_outside_the_allowed_range_are_refused_naming_the_field(
    field: str, change: dict[str, Any]
) -> None:
    with pytest.raises(InvalidInput) as refused:
        parse_grant({"scopes": ["discover"], **change}, requested_scopes=REQUESTED)
    assert refused.value.details["field"] == field
    assert field in refused.value.message


def test_each_maximum_itself_is_accepted() -> None:
    maxima = {
        "lifetime": 30 * DAY_SECONDS,
        "concurrent": 16,
        "requests": 1_000_000,
        "transfer_bytes": 16 * TiB,
        "response_bytes": 256 * MiB,
        "request_bytes": 64 * MiB,
    }
    terms = parse_grant({"scopes": ["discover"], **maxima}).to_json()
    assert {name: terms[name] for name in maxima} == maxima


def test_the_defaults_are_those_of_the_federation_api() -> None:
    terms = parse_grant({"scopes": ["discover"]})
    assert (
        terms.lifetime,
        terms.concurrent,
        terms.requests,
        terms.transfer_bytes,
        terms.request_bytes,
        terms.response_bytes,
        terms.stop_on_revoke,
    ) == (DAY_SECONDS, 2, 1_000, 0, 512 * KiB, 64 * MiB, False)


def test_exact_ids_are_kept_as_given() -> None:
    service = "svc_" + "b" * 26
    terms = parse_grant({"scopes": ["inference:invoke"], "services": [service]})
    assert terms.services == frozenset({service})


@pytest.mark.parametrize("data", [None, [], "grant", 3])
def test_a_grant_that_is_not_an_object_is_refused(data: object) -> None:
    with pytest.raises(InvalidInput) as refused:
        parse_grant(data)
    assert refused.value.details["field"] == "grant"


def test_scopes_are_required() -> None:
    with pytest.raises(InvalidInput) as refused:
        parse_grant({"lifetime": 60})
    assert refused.value.details["field"] == "grant.scopes"
