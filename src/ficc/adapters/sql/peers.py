"""Peers in SQL, and the grants each peer last said it holds for this cluster."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import insert, select

from ficc.adapters.sql import tables as t
from ficc.adapters.sql.repository import _record, _Repository, _row_values
from ficc.base.times import format_time
from ficc.domain.peers import Peer, PeerRole, PeerState


class SqlPeers(_Repository):
    @staticmethod
    def _peer(row: Any) -> Peer:
        return _record(Peer, t.peers, row, state=PeerState(row.state), role=PeerRole(row.role))

    async def add(self, peer: Peer) -> None:
        await self._c.execute(insert(t.peers).values(id=peer.id, **_row_values(peer, t.peers)))

    async def update(self, peer: Peer) -> None:
        await self._update_where(t.peers, "id", peer.id, _row_values(peer, t.peers))

    async def get(self, peer_id: str) -> Peer | None:
        row = await self._first_where(t.peers, "id", peer_id)
        return None if row is None else self._peer(row)

    async def by_hypernet_id(self, hypernet_id: str) -> list[Peer]:
        return [
            self._peer(row) for row in await self._rows_where(t.peers, "hypernet_id", hypernet_id)
        ]

    async def in_project(self, project: str) -> list[Peer]:
        query = select(t.peers).where(t.peers.c.project == project).order_by(t.peers.c.created_at)
        return [self._peer(row) for row in await self._c.execute(query)]

    async def delete(self, peer_id: str) -> None:
        await self._delete_where(t.peers, "id", peer_id)


class SqlRemoteGrants(_Repository):
    async def replace_for_peer(
        self, peer_id: str, grants: list[dict[str, Any]], at: datetime
    ) -> None:
        await self._delete_where(t.remote_grants, "peer_id", peer_id)
        for grant in grants:
            await self._c.execute(
                insert(t.remote_grants).values(
                    id=grant["id"], peer_id=peer_id, data=grant, refreshed_at=format_time(at)
                )
            )

    async def of_peer(self, peer_id: str) -> list[dict[str, Any]]:
        return [
            dict(row.data) for row in await self._rows_where(t.remote_grants, "peer_id", peer_id)
        ]

    async def delete_for_peer(self, peer_id: str) -> None:
        await self._delete_where(t.remote_grants, "peer_id", peer_id)
