"""Model transfers in SQL: one row per transfer, its files' progress as JSON."""

from __future__ import annotations

from typing import Any

from sqlalchemy import insert, select, update

from ficc.adapters.sql import tables as t
from ficc.adapters.sql.repository import _Repository, _req_time
from ficc.base.times import format_time
from ficc.domain.transfers import Transfer, TransferFile


class SqlTransfers(_Repository):
    @staticmethod
    def _transfer(row: Any) -> Transfer:
        return Transfer(
            id=row.id,
            project=row.project,
            peer_id=row.peer_id,
            remote_model=row.remote_model,
            grant_id=row.grant_id,
            manifest=dict(row.manifest),
            sha256=row.sha256,
            state=row.state,
            files=tuple(TransferFile.from_json(f) for f in row.files),
            local_model=row.local_model,
            error=row.error,
            created_at=_req_time(row.created_at),
            updated_at=_req_time(row.updated_at),
        )

    @staticmethod
    def _values(transfer: Transfer) -> dict[str, Any]:
        return {
            "project": transfer.project,
            "peer_id": transfer.peer_id,
            "remote_model": transfer.remote_model,
            "grant_id": transfer.grant_id,
            "manifest": transfer.manifest,
            "sha256": transfer.sha256,
            "state": transfer.state,
            "files": [f.to_json() for f in transfer.files],
            "local_model": transfer.local_model,
            "error": transfer.error,
            "created_at": format_time(transfer.created_at),
            "updated_at": format_time(transfer.updated_at),
        }

    async def add(self, transfer: Transfer) -> None:
        await self._c.execute(insert(t.transfers).values(id=transfer.id, **self._values(transfer)))

    async def update(self, transfer: Transfer) -> None:
        await self._c.execute(
            update(t.transfers)
            .where(t.transfers.c.id == transfer.id)
            .values(**self._values(transfer))
        )

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

    async def in_state(self, state: str) -> list[Transfer]:
        return [self._transfer(row) for row in await self._rows_where(t.transfers, "state", state)]
