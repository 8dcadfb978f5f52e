"""The table of peer operations and its dispatcher, against an in-memory unit of work.

The gate is a stand-in that admits every request (its rules have their own tests over SQLite
in tests/security/test_isolation.py); what is tested here is the table's shape and what the
dispatcher does with a row: fields, the mutation rule, and exactly-once effects.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest
from tests.support.fakes.unit_of_work import FakeUnitOfWorkFactory

from ficc.base.canonical import canonical_json
from ficc.base.errors import InvalidInput, NotFound
from ficc.base.ids import new_id
from ficc.domain import grants as g
from ficc.domain import peers as p
from ficc.domain.grants import GrantState
from ficc.domain.operations import Streaming
from ficc.domain.peers import PeerRole, PeerState
from ficc.services import mutations
from ficc.services.grant_slots import Slot
from ficc.services.mutations import MutationKey
from ficc.services.ports.peers import PeerIdentity
from ficc.services.remote.call import Call, Effect
from ficc.services.remote.table import (
    GRANT_OPERATIONS,
    OPERATIONS,
    Handlers,
    PeerOperations,
    grant_operation,
    is_streaming,
)

NOW = datetime(2026, 1, 1, tzinfo=UTC)
IDENTITY = PeerIdentity("a" * 64, b"k" * 32, 7)
GRANT = g.Grant(
    id=new_id("grant", b"g" * 16),
    project="default",
    peer_id=new_id("peer", b"p" * 16),
    terms=g.parse_grant({"scopes": sorted(g.REMOTE_SCOPES)}),
    state=GrantState.ACTIVE,
    created_at=NOW,
    expires_at=NOW,
    revoked_at=None,
    requests_used=0,
    transfer_bytes_used=0,
)
PEER = p.Peer(
    id=GRANT.peer_id,
    project="default",
    label=None,
    hypernet_id=IDENTITY.hypernet_id,
    cluster_key="",
    state=PeerState.PAIRED,
    generation=7,
    role=PeerRole.SERVICE,
    offer_id=None,
    selected_grant=None,
    ticket=None,
    created_at=NOW,
    updated_at=NOW,
)
MUTATION_ID = "0123456789abcdef0123456789abcdef"
MUTATIONS = {
    "inference.create",
    "inference.replace",
    "inference.control",
    "models.create",
    "models.remove",
}


def sized(wire: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """A request's body and its canonical size, as the transport hands them over."""
    return wire, len(canonical_json(wire))


class AdmitAll:
    """A gate that admits every request under ``GRANT`` (the rules are tested elsewhere)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str | None]] = []

    @contextlib.asynccontextmanager
    async def admitted(
        self,
        identity: PeerIdentity,
        operation: str,
        scopes: frozenset[str],
        mutation: bool,
        wire: dict[str, Any],
        body: dict[str, Any],
        body_bytes: int,
    ) -> AsyncIterator[Call]:
        mutation_id = wire.get("mutation_id")
        self.seen.append((operation, mutation_id))
        yield Call(identity, PEER, GRANT, operation, body, mutation_id, Slot())


class CountingModels:
    """``models.create`` whose effect counts how often it ran; each run makes a new record.

    Like every real effect it completes its receipt in its own transaction.
    """

    def __init__(self, factory: FakeUnitOfWorkFactory) -> None:
        self.factory = factory
        self.effects = 0
        self.refuse_with: Exception | None = None

    async def create(self, call: Call) -> Effect:
        async def effect(key: MutationKey) -> tuple[dict[str, Any], bool]:
            async with self.factory() as uow:
                mutation = await mutations.begin(uow, key)  # type: ignore[arg-type]
                if mutation.result is not None:
                    return mutation.result, True
                self.effects += 1
                if self.refuse_with is not None:
                    raise self.refuse_with
                result = {"id": f"mod_{self.effects}", "manifest": call.body["manifest"]}
                await mutation.complete(result, NOW)
                await uow.commit()
            return result, False

        return effect


def dispatcher() -> tuple[PeerOperations, CountingModels, FakeUnitOfWorkFactory]:
    factory = FakeUnitOfWorkFactory()
    models = CountingModels(factory)
    handlers = Handlers(
        pairing=None,  # type: ignore[arg-type]
        approval=None,  # type: ignore[arg-type]
        peers=None,  # type: ignore[arg-type]
        grants=None,  # type: ignore[arg-type]
        inference=None,  # type: ignore[arg-type]
        models=models,  # type: ignore[arg-type]
        transfers=None,  # type: ignore[arg-type]
        receipts=None,  # type: ignore[arg-type]
    )
    operations = PeerOperations(factory, lambda: NOW, AdmitAll(), handlers)  # type: ignore[arg-type]
    return operations, models, factory


def wire(body: dict[str, Any], mutation_id: str | None = MUTATION_ID) -> dict[str, Any]:
    sent: dict[str, Any] = {"grant": GRANT.id, "body": body}
    if mutation_id is not None:
        sent["mutation_id"] = mutation_id
    return sent


def test_every_row_has_the_one_handler_its_shape_needs() -> None:
    for name, row in OPERATIONS.items():
        kinds = {
            kind
            for kind, handler in (
                ("answer", row.answer),
                ("mutate", row.mutate),
                ("stream", row.stream),
                ("peer", row.peer),
            )
            if handler is not None
        }
        if row.scopes is None:
            assert kinds == {"peer"}, name
        elif row.streaming is Streaming.ALWAYS:
            assert kinds == {"stream"}, name
        elif row.streaming is Streaming.WHEN_ASKED:
            assert kinds == {"answer", "stream"}, name
        else:
            assert kinds in ({"answer"}, {"mutate"}), name
    assert {name for name, row in OPERATIONS.items() if row.mutation} == MUTATIONS
    assert "pairing.finish" not in GRANT_OPERATIONS
    assert len(GRANT_OPERATIONS) == 14


def test_only_operations_under_a_grant_may_be_sent_through_one() -> None:
    assert grant_operation("models.create")[1].mutation
    for refused in ("pairing.finish", "grant.request", "nope", None, 3):
        with pytest.raises(InvalidInput) as caught:
            grant_operation(refused)
        assert caught.value.details["field"] == "operation"


def test_streaming_follows_the_row() -> None:
    assert is_streaming("models.range", {})
    assert is_streaming("inference.invoke", {"body": {"stream": True}})
    assert not is_streaming("inference.invoke", {"body": {"stream": False}})
    assert not is_streaming("discover", {"body": {"stream": True}})
    assert not is_streaming("unknown", {})


async def test_a_mutation_retried_after_a_lost_answer_runs_once_and_answers_the_same() -> None:
    operations, models, factory = dispatcher()
    body = {"manifest": {"name": "m"}}
    first = await operations.serve(IDENTITY, "models.create", *sized(wire(body)))
    # The answer is lost on the way back; the requester retries with the same mutation_id.
    again = await operations.serve(IDENTITY, "models.create", *sized(wire(body)))
    assert isinstance(first, dict)
    assert isinstance(again, dict)
    assert models.effects == 1
    assert first == {"replayed": False, "result": {"id": "mod_1", "manifest": {"name": "m"}}}
    assert again == {"replayed": True, "result": first["result"]}
    # Each transaction read the receipt at most once.
    assert max(factory.store.receipt_reads) == 1


async def test_a_refused_effect_is_certain_and_refused_again_without_running() -> None:
    operations, models, factory = dispatcher()
    models.refuse_with = NotFound("no such model", details={"model": "x"})
    body = {"manifest": {"name": "m"}}
    for _ in range(2):
        with pytest.raises(NotFound) as caught:
            await operations.serve(IDENTITY, "models.create", *sized(wire(body)))
        assert caught.value.details == {"model": "x"}
    assert models.effects == 1
    [receipt] = factory.store.receipts.values()
    assert receipt.state == "refused"


async def test_an_unknown_field_is_refused_before_any_receipt_or_effect() -> None:
    operations, models, factory = dispatcher()
    with pytest.raises(InvalidInput) as caught:
        await operations.serve(
            IDENTITY, "models.create", *sized(wire({"manifest": {}, "extra": 1}))
        )
    assert caught.value.details["field"] == "body.extra"
    assert models.effects == 0
    assert factory.store.receipts == {}


async def test_an_unknown_operation_is_refused_naming_the_field() -> None:
    operations, _, _ = dispatcher()
    with pytest.raises(InvalidInput) as caught:
        await operations.serve(IDENTITY, "grant.request", *sized(wire({}, None)))
    assert caught.value.details["field"] == "operation"
