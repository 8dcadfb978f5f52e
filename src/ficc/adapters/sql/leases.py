"""The active lease in SQL: one row per lease, changed only by compare-and-set on its epoch."""

from __future__ import annotations

from typing import Any

from sqlalchemy import insert, select, update
from sqlalchemy.exc import IntegrityError

from ficc.adapters.sql import tables as t
from ficc.adapters.sql.repository import _record, _Repository, _row_values
from ficc.domain.lease import Lease


class SqlLeases(_Repository):
    """Implements ``ficc.services.ports.LeasesRepository``.

    Reads hold the row on PostgreSQL, so that a takeover and a guarded commit are ordered:
    ``FOR KEY SHARE`` (the lightest lock, which any number of commits hold at once) or, for
    a change, ``FOR UPDATE`` (which waits for them). SQLite has no row locks and one writer.
    """

    @staticmethod
    def _lease(row: Any) -> Lease:
        return _record(Lease, t.leases, row, epoch=int(row.epoch))

    async def get(self, name: str, *, for_update: bool = False) -> Lease | None:
        query = select(t.leases).where(t.leases.c.name == name).with_for_update(read=not for_update)
        row = (await self._c.execute(query)).first()
        return None if row is None else self._lease(row)

    async def put(self, lease: Lease, *, expected_epoch: int | None) -> bool:
        values = _row_values(lease, t.leases)
        if expected_epoch is None:
            try:
                await self._c.execute(insert(t.leases).values(name=lease.name, **values))
            except IntegrityError:
                return False  # another process inserted it first; this transaction is spent
            return True
        changed = await self._c.execute(
            update(t.leases)
            .where(t.leases.c.name == lease.name, t.leases.c.epoch == expected_epoch)
            .values(**values)
        )
        return bool(changed.rowcount == 1)
