"""Request bodies on the wire are refused as the HTTP API refuses them: an unknown field or a
missing one never reaches a handler (the table's rows say the fields, for pairing and notices
as for operations under a grant)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from ficc.base.canonical import canonical_json
from ficc.base.errors import InvalidInput
from ficc.services.ports.peers import PeerIdentity, RequestResult
from ficc.services.remote.table import OPERATIONS, Handlers, PeerOperations

IDENTITY = PeerIdentity("a" * 64, b"k" * 32, 0)
OFFER = "ofr_" + "a" * 26
GRANT = "grt_" + "a" * 26
VALID_OWN_BODIES: dict[str, dict[str, Any]] = {
    "pairing.offer": {"offer": OFFER, "scopes": ["discover"], "label": "x", "expires_at": "t"},
    "pairing.receipt": {"offer": OFFER, "receipt": {}},
    "pairing.fetch": {"offer": OFFER},
    "pairing.finish": {"offer": OFFER, "receipt": "0" * 64},
    "pairing.discard": {"offer": OFFER},
    "peer.removed": {},
    "grant.revoked": {"grant": GRANT},
    "grants.list": {},
    "usage.receipts": {"grant": GRANT},
}


def sized(wire: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """A request's body and its canonical size, as the transport hands them over."""
    return wire, len(canonical_json(wire))


class Recorder:
    """Stands in for every handler: records what reached it (the rule under test is the
    dispatcher's, before any handler)."""

    def __init__(self) -> None:
        self.reached: list[dict[str, Any]] = []

    async def __call__(self, identity: PeerIdentity, body: dict[str, Any]) -> RequestResult:
        self.reached.append(body)
        return {}

    def __getattr__(self, name: str) -> Recorder:
        return self


class RefuseAll:
    """A gate nothing passes: a body refused before it is never shown to the gate."""

    def __init__(self) -> None:
        self.asked = 0

    @contextlib.asynccontextmanager
    async def admitted(self, *args: object) -> AsyncIterator[None]:
        self.asked += 1
        raise AssertionError("the gate was asked")
        yield


def dispatcher() -> tuple[PeerOperations, Recorder, RefuseAll]:
    recorder = Recorder()
    gate = RefuseAll()
    handlers = Handlers(*([recorder] * 8))  # type: ignore[arg-type]
    return PeerOperations(None, None, gate, handlers), recorder, gate  # type: ignore[arg-type]


def test_every_operation_outside_a_grant_has_a_valid_body_here() -> None:
    outside = {name for name, row in OPERATIONS.items() if not row.under_grant}
    assert outside == set(VALID_OWN_BODIES)


@pytest.mark.parametrize("operation", sorted(VALID_OWN_BODIES))
async def test_an_own_body_reaches_its_handler_only_with_known_fields(operation: str) -> None:
    operations, recorder, _ = dispatcher()
    body = VALID_OWN_BODIES[operation]
    await operations.serve(IDENTITY, operation, *sized(body))
    assert recorder.reached == [body]
    with pytest.raises(InvalidInput) as caught:
        await operations.serve(IDENTITY, operation, *sized({**body, "bogus": 1}))
    assert caught.value.details["field"] == "bogus"
    assert "bogus is not a field of " + operation in caught.value.message
    for missing in sorted(set(body) - {"label", "expires_at"}):
        with pytest.raises(InvalidInput) as caught:
            await operations.serve(
                IDENTITY, operation, *sized({k: v for k, v in body.items() if k != missing})
            )
        assert caught.value.details["field"] == missing
    assert recorder.reached == [body]


@pytest.mark.parametrize(
    ("wire", "field"),
    [
        ({"grant": GRANT, "body": {}, "zzz": 1}, "zzz"),
        ({"grant": GRANT, "body": {}, "operation": "discover"}, "operation"),
        ({"body": {}}, "grant"),
        ({"grant": GRANT}, "body"),
    ],
)
async def test_a_request_under_a_grant_has_exactly_its_envelope(
    wire: dict[str, Any], field: str
) -> None:
    operations, _, gate = dispatcher()
    with pytest.raises(InvalidInput) as caught:
        await operations.serve(IDENTITY, "discover", *sized(wire))
    assert caught.value.details["field"] == field
    assert gate.asked == 0
