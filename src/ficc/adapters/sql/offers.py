"""Offers in SQL, with a tombstone per ID so that an offer ID is never taken twice."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import delete, func, insert, select

from ficc.adapters.sql import tables as t
from ficc.adapters.sql.repository import _EditableRecords, _record, _row_values
from ficc.base.times import format_time
from ficc.domain.offers import PURGEABLE_STATES, Offer, OfferDirection, OfferState


class SqlOffers(_EditableRecords[Offer]):
    _table = t.offers

    def _read(self, row: Any) -> Offer:
        direction, state = OfferDirection(row.direction), OfferState(row.state)
        return _record(
            Offer,
            t.offers,
            row,
            direction=direction,
            state=state,
            scopes=frozenset(row.scopes),
            other_hypernet_id=row.service,
        )

    def _values(self, record: Offer) -> dict[str, Any]:
        return _row_values(
            record, t.offers, scopes=sorted(record.scopes), service=record.other_hypernet_id
        )

    async def add(self, record: Offer) -> None:
        """Store the offer and tombstone its ID, so it is never taken again (also after
        ``delete``)."""
        await super().add(record)
        await self._c.execute(
            insert(t.offer_tombstones).values(
                id=record.id,
                hypernet_id=record.other_hypernet_id,
                created_at=format_time(record.created_at),
            )
        )

    async def ever_used(self, offer_id: str) -> bool:
        """True when an offer with this ID was ever sent or received."""
        return await self._first_where(t.offer_tombstones, "id", offer_id) is not None

    @staticmethod
    def _waiting(now: datetime, service: str | None, source: str | None) -> Any:
        """Incoming offers not yet approved nor expired, of ``service``/``source`` if given."""
        offers = t.offers.c
        clause = (
            (offers.direction == OfferDirection.INCOMING)
            & (offers.state == OfferState.RECEIVED)
            & (offers.expires_at > format_time(now))
        )
        if service is not None:
            clause &= offers.service == service
        if source is not None:
            clause &= func.coalesce(offers.source, offers.service) == source
        return clause

    async def count_received(
        self, *, now: datetime, service: str | None = None, source: str | None = None
    ) -> int:
        """Incoming offers waiting, from ``service``, from ``source`` or from everyone."""
        query = select(func.count()).select_from(t.offers)
        query = query.where(self._waiting(now, service, source))
        return int((await self._c.execute(query)).scalar_one())

    async def oldest_received(
        self, *, now: datetime, service: str | None = None, source: str | None = None
    ) -> Offer | None:
        """The oldest incoming offer waiting, from ``service``, ``source`` or anyone."""
        offers = t.offers.c
        query = (
            select(t.offers)
            .where(self._waiting(now, service, source))
            .order_by(offers.created_at, offers.id)
            .limit(1)
        )
        row = (await self._c.execute(query)).first()
        return None if row is None else self._read(row)

    async def busiest_source(self, *, now: datetime) -> str | None:
        """The source with the most incoming offers waiting (ties: the one waiting longest)."""
        offers = t.offers.c
        source = func.coalesce(offers.source, offers.service)
        query = (
            select(source)
            .where(self._waiting(now, None, None))
            .group_by(source)
            .order_by(func.count().desc(), func.min(offers.created_at))
            .limit(1)
        )
        return (await self._c.execute(query)).scalar_one_or_none()

    async def purge(self, *, expired_before: datetime) -> int:
        """Delete offers no pairing refers to that expired before the moment given."""
        offers = t.offers.c
        result = await self._c.execute(
            delete(t.offers).where(
                offers.state.in_(sorted(PURGEABLE_STATES))
                & (offers.expires_at < format_time(expired_before))
            )
        )
        return int(result.rowcount or 0)

    async def lock(self, offer_id: str) -> None:
        await self._lock_where(t.offers, "id", offer_id)

    async def visible_to(
        self, project: str, *, after: str | None = None, limit: int | None = None
    ) -> list[Offer]:
        """This project's offers, and incoming offers no project has taken yet, oldest first;
        only those after the offer ``after`` and at most ``limit`` of them when given."""
        offers = t.offers.c
        query = select(t.offers).where((offers.project == project) | offers.project.is_(None))
        if after is not None:
            start = await self._first_where(t.offers, "id", after)
            if start is not None:
                query = query.where(
                    (offers.created_at > start.created_at)
                    | ((offers.created_at == start.created_at) & (offers.id > after))
                )
        query = query.order_by(offers.created_at, offers.id)
        if limit is not None:
            query = query.limit(limit)
        return await self._all(query)

    async def of_peer(self, peer_id: str) -> list[Offer]:
        return [self._read(row) for row in await self._rows_where(t.offers, "peer_id", peer_id)]
