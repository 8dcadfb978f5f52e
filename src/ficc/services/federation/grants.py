"""Grants this cluster gives: create, revoke, retire, expire on time; and the remote grants it
holds: refresh and select. A grant that ends cancels what runs under it, then tells the
services that depend on it (``on_grant_ended``, given at construction)."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from datetime import datetime

from ficc.base.errors import Conflict, FiccError, GrantExpired, GrantRevoked, NotFound
from ficc.base.ids import new_id, parse_id
from ficc.base.json_types import JSONObject
from ficc.domain.grant_views import GrantView, RevokedGrantView
from ficc.domain.grants import (
    Grant,
    GrantState,
    GrantTerms,
    expiry_of,
    parse_grant,
)
from ficc.domain.peers import Peer, PeerState, PeerView
from ficc.domain.principals import Principal
from ficc.services import audit
from ficc.services.federation.common import (
    FederationContext,
    check_paired,
    check_resources,
    log,
    project_grant,
    project_peer,
    tell,
    view_of_peer,
)
from ficc.services.federation.known_peers import paired_peer
from ficc.services.federation.remote_grants import RemoteGrantCopies
from ficc.services.grant_slots import GrantSlots
from ficc.services.metering import Meter
from ficc.services.mutations import grant_scope
from ficc.services.ports.peers import PeerIdentity, RequestResult

GrantEnded = Callable[[Grant], Awaitable[None]]
"""Told after a grant ended (revoked, expired, its peer removed): stop what it started."""


@dataclass(frozen=True, eq=False)
class Grants:
    """The grants of this cluster, given and held, and the timers that end them on time."""

    context: FederationContext
    slots: GrantSlots
    copies: RemoteGrantCopies
    on_grant_ended: GrantEnded
    meter: Meter
    _expiry_timers: dict[str, asyncio.TimerHandle] = field(
        default_factory=dict, init=False, repr=False
    )
    _expiring: set[asyncio.Task[None]] = field(default_factory=set, init=False, repr=False)

    async def load(self, peers: list[Peer]) -> None:
        """Arm the expiry of every grant given to ``peers`` (at start)."""
        async with self.context.uow_factory() as uow:
            grants = [grant for peer in peers for grant in await uow.grants.of_peer(peer.id)]
            # Nothing is in flight at start: what requests of a stopped process held is free.
            await uow.usage.clear_reservations()
            await uow.token_limits.clear_reservations()
            await uow.commit()
        for grant in grants:
            self.arm_expiry(grant)

    def view(self, grant: Grant, now: datetime) -> GrantView:
        """The grant as its owner and its peer are shown it at ``now``."""
        return GrantView.of(
            grant,
            now,
            in_flight=self.slots.in_flight(grant.id),
            windows=self.meter.window_state(grant),
        )

    async def create_grant(
        self, principal: Principal, project: str, peer_id: str, *, grant: object
    ) -> GrantView:
        principal.require_scope("federation:manage")
        terms = parse_grant(grant)
        principal.require_scope(*sorted(terms.scopes))
        now = self.context.clock()
        async with self.context.uow_factory() as uow:
            peer = await project_peer(uow, project, peer_id)
            check_paired(peer)
            await check_resources(uow, project, terms)
            given = new_grant(project, peer_id, terms, now)
            await uow.grants.add(given)
            await self.context.audit(uow, principal, project, "grant.created", given.id, peer)
            await uow.commit()
        self.arm_expiry(given)
        return self.view(given, now)

    async def revoke_grant(
        self, principal: Principal, project: str, grant_id: str
    ) -> RevokedGrantView:
        """An active (or expired, not yet marked) grant ends now; the peer is told."""
        grant, peer, _, now = await self._end(principal, project, grant_id, GrantState.REVOKED)
        revoked = replace(grant, state=GrantState.REVOKED, revoked_at=now)
        await self.grant_ended(revoked)
        told = False
        if peer is not None and peer.state == PeerState.PAIRED:
            told = await tell(
                self.context.link,
                peer.hypernet_id,
                "grant.revoked",
                {"grant": grant_id},
                None,
                generation=peer.generation,
            )
        return RevokedGrantView(self.view(revoked, now), told)

    async def retire_grant(self, principal: Principal, project: str, grant_id: str) -> GrantView:
        """A revoked or expired grant: its operation receipts go, a tombstone stays."""
        grant, _, was, now = await self._end(principal, project, grant_id, GrantState.RETIRED)
        if was == GrantState.EXPIRED:
            await self.grant_ended(grant)
        return self.view(replace(grant, state=GrantState.RETIRED), now)

    async def _end(
        self, principal: Principal, project: str, grant_id: str, target: str
    ) -> tuple[Grant, Peer | None, str, datetime]:
        """Move a grant to ``target`` (revoked or retired) in one transaction, audited: the
        grant as it was, its peer, its state then, and when."""
        async with self.context.managing(principal) as (uow, now):
            grant = await project_grant(uow, project, grant_id)
            was = grant.state_at(now)
            if target == GrantState.REVOKED:
                if (
                    was not in (GrantState.ACTIVE, GrantState.EXPIRED)
                    or grant.state == GrantState.REVOKED
                ):
                    raise Conflict(
                        f"grant {grant_id} is {grant.state}", details={"state": grant.state}
                    )
                await uow.grants.set_state(grant_id, GrantState.REVOKED, now)
            else:
                if was not in (GrantState.REVOKED, GrantState.EXPIRED):
                    raise Conflict(
                        f"only a revoked or expired grant can be retired; {grant_id} is {was}",
                        details={"state": was},
                    )
                await uow.receipts.delete_scope(grant_scope(grant_id))
                await uow.grants.set_state(grant_id, GrantState.RETIRED, None)
            peer = await uow.peers.get(grant.peer_id)
            await self.context.audit(uow, principal, project, f"grant.{target}", grant_id, peer)
            await uow.commit()
        return grant, peer, was, now

    async def refresh(
        self, principal: Principal, project: str, peer_id: str, *, grant: object
    ) -> PeerView:
        """Ask the peer for the grants it gives us now; with ``{"grant": ID}``, then select
        that one, which must be active in the peer's answer (not in a stale copy)."""
        principal.require_scope("federation:manage")
        selected = None if grant is None else parse_id("grant", grant, field="grant")
        now = self.context.clock()
        async with self.context.uow_factory() as uow:
            peer = await project_peer(uow, project, peer_id)
        check_paired(peer)
        listed = await self.copies.fetch(peer)
        if selected is not None:
            _check_selectable(listed, selected)
            async with self.context.uow_factory() as uow:
                peer = replace(peer, selected_grant=selected, updated_at=now)
                await uow.peers.update(peer)
                await self.context.audit(uow, principal, project, "grant.selected", selected, peer)
                await uow.commit()
        return view_of_peer(peer, listed)

    # --- the end of a grant -------------------------------------------------------------------

    async def grant_ended(self, grant: Grant) -> None:
        """Revocation, expiry, removal: cancel what runs under the grant, then tell."""
        reason: FiccError = (
            GrantExpired("the grant expired", details={"grant": grant.id})
            if grant.state == GrantState.EXPIRED
            else GrantRevoked("the grant was revoked", details={"grant": grant.id})
        )
        self._disarm_expiry(grant.id)
        self.context.known.grant_ended(grant)
        self.slots.end_all(grant.id, reason)
        try:
            await self.on_grant_ended(grant)
        except FiccError as exc:
            log.warning("after grant %s ended: %s", grant.id, exc.message)

    def arm_expiry(self, grant: Grant) -> None:
        """At ``expires_at`` an active grant ends as if revoked: by a timer, not on next use.

        So a grant that nobody uses again still stops its ``stop_on_revoke`` services on time.
        Called for every grant given or loaded, it also tells the transport's body bound
        (:meth:`KnownPeers.body_bound`) the grant's ``request_bytes``.
        """
        self._disarm_expiry(grant.id)
        if grant.state != GrantState.ACTIVE:
            self.context.known.grant_ended(grant)
            return
        self.context.known.granted(grant)
        delay = max((grant.expires_at - self.context.clock()).total_seconds(), 0.0)
        loop = asyncio.get_running_loop()
        self._expiry_timers[grant.id] = loop.call_later(delay, self._expiry_due, grant.id)

    def close(self) -> None:
        """Disarm the expiry timers (the process is stopping; they are armed again at load)."""
        for timer in self._expiry_timers.values():
            timer.cancel()
        self._expiry_timers.clear()
        for task in self._expiring:
            task.cancel()

    def _disarm_expiry(self, grant_id: str) -> None:
        timer = self._expiry_timers.pop(grant_id, None)
        if timer is not None:
            timer.cancel()

    def _expiry_due(self, grant_id: str) -> None:
        self._expiry_timers.pop(grant_id, None)
        task = asyncio.get_running_loop().create_task(self._expire(grant_id))
        self._expiring.add(task)
        task.add_done_callback(self._expiring.discard)

    async def _expire(self, grant_id: str) -> None:
        """Mark the grant expired, then end it the way revocation does (slots, services)."""
        now = self.context.clock()
        try:
            async with self.context.uow_factory() as uow:
                grant = await uow.grants.get(grant_id)
                if grant is None or grant.state != GrantState.ACTIVE:
                    return  # revoked, retired or forgotten meanwhile: ended by that path
                if grant.state_at(now) != GrantState.EXPIRED:
                    self.arm_expiry(grant)  # the timer ran early by the clock: wait again
                    return
                await uow.grants.set_state(grant_id, GrantState.EXPIRED, None)
                await audit.record(
                    uow,
                    self.context.clock,
                    action="grant.expired",
                    actor="lifetime",
                    project=grant.project,
                    target=grant_id,
                    details={"expires_at": grant.expires_at.isoformat()},
                )
                await uow.commit()
        except FiccError as exc:
            log.warning("grant %s could not be expired: %s", grant_id, exc.message)
            return
        await self.grant_ended(replace(grant, state=GrantState.EXPIRED))

    # --- what the other side tells us ---------------------------------------------------------

    async def on_grant_revoked(self, identity: PeerIdentity, body: JSONObject) -> RequestResult:
        grant_id = parse_id("grant", body.get("grant"), field="grant")
        now = self.context.clock()
        async with self.context.uow_factory() as uow:
            peer = await paired_peer(uow, identity)
            remote = await uow.remote_grants.of_peer(peer.id)
            await uow.remote_grants.replace_for_peer(
                peer.id,
                [
                    {**item, "state": GrantState.REVOKED} if item["id"] == grant_id else item
                    for item in remote
                ],
                now,
            )
            await self.context.audit(
                uow, None, peer.project, "remote_grant.revoked", grant_id, identity
            )
            await uow.commit()
        return {}

    async def on_grants_list(self, identity: PeerIdentity, body: JSONObject) -> RequestResult:
        now = self.context.clock()
        async with self.context.uow_factory() as uow:
            peer = await paired_peer(uow, identity)
            grants = await uow.grants.of_peer(peer.id)
        return {
            "grants": [
                self.view(grant, now).to_json()
                for grant in grants
                if grant.state != GrantState.RETIRED
            ]
        }


def _check_selectable(listed: list[JSONObject], grant_id: str) -> None:
    """Only a grant the peer gives us now, and active, can carry our requests."""
    found = next((item for item in listed if item.get("id") == grant_id), None)
    if found is None:
        raise NotFound(
            f"the peer gives this project no grant {grant_id}", details={"grant": grant_id}
        )
    state = found.get("state")
    if state != GrantState.ACTIVE:
        raise Conflict(
            f"grant {grant_id} is {state}; only an active grant can be selected",
            details={"grant": grant_id, "state": state},
        )


def new_grant(project: str, peer_id: str, terms: GrantTerms, now: datetime) -> Grant:
    """A fresh active grant of ``terms`` to a peer, nothing used yet."""
    return Grant(
        id=new_id("grant", secrets.token_bytes(16)),
        project=project,
        peer_id=peer_id,
        terms=terms,
        state=GrantState.ACTIVE,
        created_at=now,
        expires_at=expiry_of(now, terms),
        revoked_at=None,
        requests_used=0,
        transfer_bytes_used=0,
    )
