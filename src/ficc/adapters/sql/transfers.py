"""Model transfers in SQL: one row per transfer, its files' progress as JSON."""

from __future__ import annotations

from typing import Any

from sqlalchemy import insert, select

from ficc.adapters.sql import tables as t
from ficc.adapters.sql.repository import _record, _Repository, _row_values
from ficc.domain.transfers import Transfer, TransferFile, TransferState


class SqlTransfers(_Repository):
    @staticmethod
    def _transfer(row: Any) -> Transfer:
        files = tuple(TransferFile.from_json(f) for f in row.files)
        return _record(Transfer, t.transfers, row, files=files, state=TransferState(row.state))

    @staticmethod
    def _values(transfer: Transfer) -> dict[str, Any]:
        return _row_values(transfer, t.transfers, files=[f.to_json() for f in transfer.files])

    async def add(self, transfer: Transfer) -> None:
        await self._c.execute(insert(t.transfers).values(id=transfer.id, **self._values(transfer)))

    async def update(self, transfer: Transfer) -> None:
        await self._update_where(t.transfers, "id", transfer.id, self._values(transfer))

    async def get(self, transfer_id: str) -> Transfer | None:
        row = await self._first_where(t.transfers, "id", transfer_id)
        return None if row is None else self._transfer(row)

    async def of_model(self, project: str, peer_id: str, remote_model: str) -> Transfer | None:
        query = select(t.transfers).where(
            t.transfers.c.project == project,
            t.transfers.c.peer_id == peer_id,
            t.transfers.c.remote_model == remote_model,
        )
        row = (await self._c.execute(query.order_by(t.transfers.c.created_at.desc()))).first()
        return None if row is None else self._transfer(row)

    async def in_project(self, project: str) -> list[Transfer]:
        query = select(t.transfers).where(t.transfers.c.project == project)
        rows = await self._c.execute(query.order_by(t.transfers.c.created_at))
        return [self._transfer(row) for row in rows]

    async def in_state(self, state: TransferState) -> list[Transfer]:
        return [self._transfer(row) for row in await self._rows_where(t.transfers, "state", state)]
