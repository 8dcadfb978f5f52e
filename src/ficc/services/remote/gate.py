"""The grantor's gate: every request under a grant is checked, in this order, before any
effect.

The session's proven identity is paired; the grant is the calling peer's (another peer's grant
is answered like one that does not exist, before its scopes, sizes or slots are looked at); the
operation's scope is in the grant; the mutation_id rule; the ``requests_per_minute`` window;
``request_bytes``; a ``concurrent`` slot (held until the answer or stream ends, on every exit
path); the grant is active; the ``requests`` allowance (charged at admission, where an
invocation also holds what it can need of the grant's tokens: ``metering.TokenHold``). The
handler then checks every resource ID named in the body (and, for an invocation, reserves its
tokens within that hold). An ``inference.invoke`` a limit refuses here still leaves its usage
record.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime

from ficc.base.errors import (
    FiccError,
    GrantExpired,
    GrantRevoked,
    LimitExceeded,
    PermissionDenied,
    TooLarge,
)
from ficc.base.ids import parse_id
from ficc.base.json_types import JSONObject
from ficc.domain.grants import Grant, GrantState
from ficc.domain.operations import INVOKE, check_mutation_id, check_scope
from ficc.domain.peers import Peer
from ficc.domain.routes import ADMISSION_STAGE
from ficc.services.federation.known_peers import KnownPeers, paired_peer
from ficc.services.grant_slots import GrantSlots, Slot
from ficc.services.metering import REFUSALS, Meter, TokenHold, settle_surely
from ficc.services.ports import Clock, UnitOfWorkFactory
from ficc.services.ports.peers import PeerIdentity
from ficc.services.remote.call import Call, no_grant

"""The operation metering records a usage row for (refusals included)."""


class _Refused(Exception):
    """A limit refused the request before it was admitted (what it raised, inside)."""

    def __init__(self, error: FiccError) -> None:
        super().__init__(error.message)
        self.error = error


@dataclass(frozen=True, eq=False)
class Gate:
    """Admits a request under a grant, or refuses it with nothing charged or held."""

    uow_factory: UnitOfWorkFactory
    clock: Clock
    peers: KnownPeers
    slots: GrantSlots
    meter: Meter
    _fixed: dict[str, tuple[Grant, str, int]] = field(default_factory=dict, init=False, repr=False)

    @contextlib.asynccontextmanager
    async def admitted(
        self,
        identity: PeerIdentity,
        operation: str,
        scopes: frozenset[str],
        mutation: bool,
        wire: JSONObject,
        body: JSONObject,
        body_bytes: int,
    ) -> AsyncIterator[Call]:
        """Admit one request; ``body_bytes`` is ``body``'s canonical size as it travelled,
        what ``request_bytes`` counts.

        A refusal before the request is admitted says so (``details["stage"]``): the requester
        then knows nothing ran, and a route may try its next target.
        """
        admitted = False
        try:
            grant_id = parse_id("grant", wire.get("grant"), field="grant")
            now = self.clock()
            if not self.peers.knows(identity):
                # Not paired at this generation: refuse before saying anything about the grant.
                raise PermissionDenied(
                    "this cluster has no pairing with the requesting peer at this generation",
                    details={"reason": "not_paired"},
                )
            fixed = await self._fixed_terms(grant_id, identity)
            check_scope(operation, scopes, fixed.terms.scopes)
            mutation_id = check_mutation_id(operation, mutation, wire.get("mutation_id"))
            try:
                admission = self._admission(
                    identity, fixed, grant_id, (operation, body, body_bytes), now
                )
                async with admission as (peer, current, slot, hold):
                    admitted = True
                    try:
                        yield Call(
                            identity,
                            peer,
                            current,
                            operation,
                            body,
                            mutation_id,
                            slot,
                            body_bytes,
                            hold,
                        )
                    finally:
                        if hold is not None and not hold.taken:
                            await settle_surely(self.meter.release(hold))
            except _Refused as refused:
                if operation == INVOKE:
                    tab = self.meter.request_tab(fixed, operation, body, body_bytes)
                    await self.meter.record_refused(tab, refused.error)
                raise refused.error from None
        except FiccError as exc:
            if not admitted:
                exc.details.setdefault("stage", ADMISSION_STAGE)
            raise

    @contextlib.asynccontextmanager
    async def _admission(
        self,
        identity: PeerIdentity,
        fixed: Grant,
        grant_id: str,
        request: tuple[str, JSONObject, int],
        now: datetime,
    ) -> AsyncIterator[tuple[Peer, Grant, Slot, TokenHold | None]]:
        """The limits, each refusal raised as :class:`_Refused` (recorded for an invoke);
        ``request``: the operation, its body and the body's size."""
        body_bytes = request[2]
        try:
            held = self.meter.hold_request(fixed.terms, grant_id)
        except LimitExceeded as exc:
            raise _Refused(exc) from exc
        admitted = False
        try:
            if body_bytes > fixed.terms.request_bytes:
                raise TooLarge(
                    f"the request body is {body_bytes} bytes; the grant allows "
                    f"{fixed.terms.request_bytes}",
                    details={"limit": "request_bytes", "allowed": fixed.terms.request_bytes},
                )
            async with self.slots.slot(
                grant_id, fixed.terms.concurrent, fixed.expires_at, now
            ) as slot:
                peer, current, hold = await self._charge(
                    identity, grant_id, fixed.terms.requests, request, now
                )
                admitted = True
                yield peer, current, slot, hold
        except REFUSALS as exc:
            if admitted:
                raise
            raise _Refused(exc) from exc
        finally:
            if not admitted:
                # Not admitted: the request takes nothing of the window either.
                self.meter.release_request(grant_id, held)

    async def _charge(
        self,
        identity: PeerIdentity,
        grant_id: str,
        requests: int,
        request: tuple[str, JSONObject, int],
        now: datetime,
    ) -> tuple[Peer, Grant, TokenHold | None]:
        """One transaction proves the peer, charges the request and reads the grant's state,
        and for an invoke holds what it can need of the grant's tokens.

        The charge is one conditional UPDATE (the check and the charge at once); made first, it
        holds the grant's row until commit, so concurrent admissions (at once on PostgreSQL)
        each see the others' charges; a refusal rolls it back.
        """
        operation, body, body_bytes = request
        async with self.uow_factory() as uow:
            peer = await paired_peer(uow, identity)
            charged = await uow.grants.charge_request(grant_id, requests=requests)
            current = await uow.grants.get(grant_id)
            if current is None or current.peer_id != peer.id:
                raise no_grant(grant_id)
            state = current.state_at(now)
            if state in (GrantState.REVOKED, GrantState.RETIRED):
                raise GrantRevoked("the grant was revoked", details={"grant": grant_id})
            if state == GrantState.EXPIRED:
                raise GrantExpired("the grant expired", details={"grant": grant_id})
            if not charged:
                raise LimitExceeded(
                    f"the grant's {current.terms.requests} requests are used up",
                    details={"limit": "requests", "allowed": current.terms.requests},
                )
            hold = None
            if operation == INVOKE:
                hold = await self.meter.hold_tokens(uow, current, body, body_bytes)
            await uow.commit()
        return peer, current, hold

    async def _fixed_terms(self, grant_id: str, identity: PeerIdentity) -> Grant:
        """The grant's terms, if the grant is the calling peer's; else not found.

        A grant's terms, peer and expiry never change: they are read once and kept, with the
        HyperNet ID and pairing generation of the peer it was given to (another pairing of the
        same cluster is another peer).
        """
        known = self._fixed.get(grant_id)
        if known is None:
            async with self.uow_factory() as uow:
                grant = await uow.grants.get(grant_id)
                holder = None if grant is None else await uow.peers.get(grant.peer_id)
            if grant is None or holder is None:
                raise no_grant(grant_id)
            known = (grant, holder.hypernet_id, holder.generation)
            self._fixed[grant_id] = known
        grant, holder_hypernet_id, holder_generation = known
        if (holder_hypernet_id, holder_generation) != (identity.hypernet_id, identity.generation):
            raise no_grant(grant_id)
        return grant
