"""The one table of operations a peer may ask of this cluster, and the dispatcher that serves it.

A row says everything about an operation: the scopes a grant needs for it (none: it travels
outside any grant, like pairing), whether it mutates (then it needs a mutation_id and runs
exactly once), whether it answers with a stream, its handler, and what its body and answer
mean (its :class:`About`, whose body shape is also the fields the operation takes). Adding an
operation is one row. The requester checks its requests against the same rows.

The operation's real name travels on the wire; an operation under a grant carries
``{"grant": ID, "body": {...}, "mutation_id": ...}`` as its request body.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Final, Protocol

from ficc.base.errors import Conflict, InvalidInput, LimitExceeded, NotFound, PermissionDenied
from ficc.base.json_types import JSONObject
from ficc.domain.operations import ANY_SCOPE, Streaming, only_fields, parse_body
from ficc.protocol.canonical import first_member_bytes
from ficc.services import mutations
from ficc.services.ports import Clock, UnitOfWorkFactory
from ficc.services.ports.peers import EncodedAnswer, PeerIdentity, RequestResult
from ficc.services.remote.call import Answer, Call, Effect, Mutate, PeerHandler, Stream
from ficc.services.remote.gate import Gate
from ficc.services.remote.meanings import (
    DISCOVER,
    GRANT_REVOKED,
    GRANTS_LIST,
    INFERENCE_CONTROL,
    INFERENCE_CREATE,
    INFERENCE_GET,
    INFERENCE_INVOKE,
    INFERENCE_PREPARE,
    INFERENCE_PREVIEW,
    INFERENCE_REPLACE,
    MODELS_CREATE,
    MODELS_MANIFEST,
    MODELS_RANGE,
    MODELS_REMOVE,
    OPERATION_STATUS,
    PAIRING_DISCARD,
    PAIRING_FETCH,
    PAIRING_FINISH,
    PAIRING_OFFER,
    PAIRING_RECEIPT,
    PEER_REMOVED,
    RESOURCES,
    USAGE_RECEIPTS,
)
from ficc.services.remote.shapes import About
from ficc.services.remote.views import peer_answer

if TYPE_CHECKING:
    from ficc.services.federation.approval import Approval
    from ficc.services.federation.grants import Grants
    from ficc.services.federation.pairing import Pairing
    from ficc.services.federation.peers import Peers
    from ficc.services.federation.usage_receipts import UsageReceipts
    from ficc.services.remote.inference_ops import InferenceOperations
    from ficc.services.remote.model_ops import ModelOperations

DEFINITE_REFUSALS: Final = (InvalidInput, PermissionDenied, NotFound, Conflict, LimitExceeded)
"""Errors an effect raises before it commits anything (never a lost peer or an unknown)."""


class RangeServing(Protocol):
    """The grantor's side of a transfer, as the table needs it.

    A port rather than ``transfers.serving.RangeServer`` itself: the transfers package imports
    this one (the requester's client, the call), so naming its class here would make the two
    import each other.
    """

    def serve_range(self, call: Call) -> AsyncIterator[bytes]: ...


@dataclass(frozen=True)
class Handlers:
    """The services whose methods answer the table's operations (wired in ``bootstrap``)."""

    pairing: Pairing
    approval: Approval
    peers: Peers
    grants: Grants
    inference: InferenceOperations
    models: ModelOperations
    transfers: RangeServing
    receipts: UsageReceipts


@dataclass(frozen=True)
class OperationRow:
    """One row: what a peer may ask, under which terms, and who answers (the operation is
    the name :data:`OPERATIONS` keys it by)."""

    scopes: frozenset[str] | None
    """At least one of these must be in the grant; None: no grant (pairing, notices)."""
    streaming: Streaming = Streaming.NEVER
    octets: bool = False
    """Its stream is raw bytes (``application/octet-stream``), not server-sent events."""
    answer: Callable[[Handlers], Answer] | None = None
    mutate: Callable[[Handlers], Mutate] | None = None
    stream: Callable[[Handlers], Stream] | None = None
    peer: Callable[[Handlers], PeerHandler] | None = None
    about: About = field(kw_only=True)
    """What its body fields and answer mean (rendered into docs/protocol.md §5): the body's
    members are the fields the operation takes, ``x?`` the optional ones."""

    @cached_property
    def fields(self) -> frozenset[str]:
        return self.about.body.names

    @cached_property
    def required(self) -> frozenset[str]:
        return self.about.body.required

    @property
    def mutation(self) -> bool:
        return self.mutate is not None

    @property
    def under_grant(self) -> bool:
        return self.scopes is not None

    def check_fields(self, body: JSONObject) -> None:
        only_fields(body, set(self.fields), set(self.required))

    def check_own_fields(self, operation: str, body: JSONObject) -> None:
        """A body outside any grant is the operation's own: its fields are named bare, as
        its handler names them."""
        _exact_fields(body, self.fields, self.required, f"of {operation}")


def _f(*names: str) -> frozenset[str]:
    return frozenset(names)


MANAGE: Final = _f("inference:manage")

OPERATIONS: Final[Mapping[str, OperationRow]] = {
    # Pairing and notices: outside any grant, the proven peer checked by each handler.
    "pairing.offer": OperationRow(None, peer=lambda h: h.approval.on_offer, about=PAIRING_OFFER),
    "pairing.receipt": OperationRow(
        None, peer=lambda h: h.pairing.on_receipt, about=PAIRING_RECEIPT
    ),
    "pairing.fetch": OperationRow(None, peer=lambda h: h.approval.on_fetch, about=PAIRING_FETCH),
    "pairing.finish": OperationRow(None, peer=lambda h: h.approval.on_finish, about=PAIRING_FINISH),
    "pairing.discard": OperationRow(
        None, peer=lambda h: h.approval.on_discard, about=PAIRING_DISCARD
    ),
    "peer.removed": OperationRow(None, peer=lambda h: h.peers.on_peer_removed, about=PEER_REMOVED),
    "grant.revoked": OperationRow(
        None, peer=lambda h: h.grants.on_grant_revoked, about=GRANT_REVOKED
    ),
    "grants.list": OperationRow(None, peer=lambda h: h.grants.on_grants_list, about=GRANTS_LIST),
    "usage.receipts": OperationRow(
        None, peer=lambda h: h.receipts.on_usage_receipts, about=USAGE_RECEIPTS
    ),
    # Under a grant.
    "discover": OperationRow(_f("discover"), answer=lambda h: h.inference.discover, about=DISCOVER),
    "inference.prepare": OperationRow(
        MANAGE, answer=lambda h: h.inference.prepare, about=INFERENCE_PREPARE
    ),
    "inference.preview": OperationRow(
        MANAGE, answer=lambda h: h.inference.preview, about=INFERENCE_PREVIEW
    ),
    "inference.get": OperationRow(
        _f("inference:invoke", "inference:manage"),
        answer=lambda h: h.inference.get,
        about=INFERENCE_GET,
    ),
    "inference.create": OperationRow(
        MANAGE, mutate=lambda h: h.inference.create, about=INFERENCE_CREATE
    ),
    "inference.replace": OperationRow(
        MANAGE, mutate=lambda h: h.inference.replace, about=INFERENCE_REPLACE
    ),
    "inference.control": OperationRow(
        MANAGE, mutate=lambda h: h.inference.control, about=INFERENCE_CONTROL
    ),
    "inference.invoke": OperationRow(
        _f("inference:invoke"),
        streaming=Streaming.WHEN_ASKED,
        answer=lambda h: h.inference.invoke,
        stream=lambda h: h.inference.invoke_stream,
        about=INFERENCE_INVOKE,
    ),
    "models.manifest": OperationRow(
        _f("models:read", "models:transfer"),
        answer=lambda h: h.models.manifest,
        about=MODELS_MANIFEST,
    ),
    "models.range": OperationRow(
        _f("models:transfer"),
        streaming=Streaming.ALWAYS,
        octets=True,
        stream=lambda h: h.transfers.serve_range,
        about=MODELS_RANGE,
    ),
    "models.create": OperationRow(
        _f("models:manage"), mutate=lambda h: h.models.create, about=MODELS_CREATE
    ),
    "models.remove": OperationRow(
        _f("models:manage"), mutate=lambda h: h.models.remove, about=MODELS_REMOVE
    ),
    "resources": OperationRow(
        _f("resources:read"), answer=lambda h: h.models.resources, about=RESOURCES
    ),
    "operation.status": OperationRow(
        ANY_SCOPE, answer=lambda h: h.models.status, about=OPERATION_STATUS
    ),
}

ENVELOPE_FIELDS: Final = _f("grant", "body", "mutation_id")
"""The body of a request under a grant: the grant, the operation's own body, a mutation_id."""
ENVELOPE_REQUIRED: Final = _f("grant", "body")


def _exact_fields(
    body: Mapping[str, object], allowed: frozenset[str], required: frozenset[str], where: str
) -> None:
    """Unknown fields are refused, not ignored, as the HTTP API refuses them."""
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise InvalidInput(f"{unknown[0]} is not a field {where}", field=unknown[0])
    missing = sorted(required - set(body))
    if missing:
        raise InvalidInput(f"{missing[0]} is required {where}", field=missing[0])


GRANT_OPERATIONS: Final = sorted(name for name, row in OPERATIONS.items() if row.under_grant)
"""What a requester may send under a grant."""


def grant_operation(value: object) -> tuple[str, OperationRow]:
    """The row of an operation a requester may send under a grant."""
    row = OPERATIONS.get(value) if isinstance(value, str) else None
    if row is None or not row.under_grant:
        raise InvalidInput(
            f"operation must be one of: {', '.join(GRANT_OPERATIONS)}", field="operation"
        )
    assert isinstance(value, str)
    return value, row


def is_streaming(operation: object, body: object) -> bool:
    """Whether the request ``operation`` with ``body`` is answered with a stream."""
    row = OPERATIONS.get(operation) if isinstance(operation, str) else None
    return row is not None and isinstance(body, dict) and row.streaming.streams(body)


def streams_octets(operation: object) -> bool:
    """Whether ``operation`` streams raw bytes rather than server-sent events."""
    row = OPERATIONS.get(operation) if isinstance(operation, str) else None
    return row is not None and row.octets


@dataclass(frozen=True, eq=False)
class PeerOperations:
    """Serves every operation a peer asks: the transport's one handler."""

    uow_factory: UnitOfWorkFactory
    clock: Clock
    gate: Gate
    handlers: Handlers
    _tries: mutations.InFlight = field(default_factory=mutations.InFlight, init=False, repr=False)

    async def serve(
        self, identity: PeerIdentity, operation: str, wire: JSONObject, wire_bytes: int
    ) -> RequestResult:
        """Serve one request; ``wire_bytes`` is ``wire``'s canonical size as it travelled."""
        row = OPERATIONS.get(operation)
        if row is None:
            raise InvalidInput(f"unknown operation {operation}", field="operation")
        if row.peer is not None:
            row.check_own_fields(operation, wire)
            return await row.peer(self.handlers)(identity, wire)
        assert row.scopes is not None
        _exact_fields(wire, ENVELOPE_FIELDS, ENVELOPE_REQUIRED, "of a request under a grant")
        body = parse_body(wire.get("body", {}))
        # The operation's own body as it travelled, measured from the envelope alone.
        body_bytes = first_member_bytes(wire_bytes, wire, "body")
        if row.stream is not None and row.streaming.streams(body):
            return self._serve_stream(identity, operation, row, row.stream, wire, body, body_bytes)
        async with self.gate.admitted(
            identity, operation, row.scopes, row.mutation, wire, body, body_bytes
        ) as call:
            if row.mutate is not None:
                async with self._tries.one_at_a_time(call.key()):
                    # A retry is answered from its receipt before the body's IDs are checked:
                    # a service or model the first try removed is no longer in the grant.
                    async with self.uow_factory() as uow:
                        earlier = await mutations.begin(uow, call.key())
                    _raise_refusal(earlier)
                    if earlier.result is not None:
                        return {"replayed": True, "result": peer_answer(earlier.result)}
                    row.check_fields(body)
                    effect = await row.mutate(self.handlers)(call)
                    call.slot.check()
                    return await self._once(call, effect)
            assert row.answer is not None
            row.check_fields(body)
            call.slot.check()
            result = await row.answer(self.handlers)(call)
            if isinstance(result, EncodedAnswer):
                # RFC 8785 sorts "replayed" before "result" and spells each value alone.
                told = b"" if result.usage is None else b',"usage":' + result.usage
                return EncodedAnswer(b'{"replayed":false,"result":' + result.content + told + b"}")
            return {"replayed": False, "result": result}

    async def _serve_stream(
        self,
        identity: PeerIdentity,
        operation: str,
        row: OperationRow,
        stream: Callable[[Handlers], Stream],
        wire: JSONObject,
        body: JSONObject,
        body_bytes: int,
    ) -> AsyncIterator[bytes]:
        assert row.scopes is not None
        async with self.gate.admitted(
            identity, operation, row.scopes, False, wire, body, body_bytes
        ) as call:
            row.check_fields(body)
            chunks = call.slot.guard(stream(self.handlers)(call))
            # Closed on every exit (``async for`` alone leaves an abandoned iterator open).
            async with contextlib.aclosing(chunks):
                async for chunk in chunks:
                    yield chunk

    async def _once(self, call: Call, effect: Effect) -> JSONObject:
        """Record uncertainty, then run the effect (which completes the receipt with itself)."""
        key = call.key()
        async with self.uow_factory() as uow:
            mutation = await mutations.begin(uow, key)
            _raise_refusal(mutation)
            if mutation.result is not None:
                return {"replayed": True, "result": peer_answer(mutation.result)}
            await mutation.mark_uncertain(self.clock())
            await uow.commit()
        try:
            result, replayed = await effect(key)
        except DEFINITE_REFUSALS as exc:
            # The effect's transaction rolled back: nothing happened, and that is certain.
            async with self.uow_factory() as uow:
                mutation = await mutations.begin(uow, key)
                if mutation.state == mutations.UNCERTAIN:
                    await mutation.refuse(exc, self.clock())
                    await uow.commit()
            raise
        return {"replayed": replayed, "result": result}


def _raise_refusal(mutation: mutations.MutationScope) -> None:
    refusal = mutation.refusal
    if refusal is not None:
        raise refusal
