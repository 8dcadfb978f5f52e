"""The audit log in SQL as a hash chain (``ficc.domain.audit_chain``): appended one row at a
time, heads signed with the cluster key, deletions as signed tombstones.

The chain stays linear because appends are serialised: on PostgreSQL each append first takes a
transaction-scoped advisory lock (``pg_advisory_xact_lock``), held until commit or rollback, so
concurrent writers, in one process or several, read the last row only after the previous
append committed; on SQLite FICC's writer lock runs one transaction at a time and SQLite has one
writer. Beneath both, ``seq`` is the primary key and ``prev`` is unique: two rows can never
claim the same place or the same predecessor, so a writer that slipped past the lock fails
instead of forking the chain.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, Final

from sqlalchemy import String, insert, select, text, type_coerce, update

from ficc.adapters.sql import tables as t
from ficc.adapters.sql.database import SqlConnection
from ficc.adapters.sql.repository import _record, _Repository, _row_values
from ficc.base.times import format_stored_time, parse_time
from ficc.domain.audit import AuditEntry
from ficc.domain.audit_chain import (
    GENESIS,
    TOMBSTONE_ACTION,
    ChainRow,
    SignedHead,
    head_due,
    row_digest,
    sign_head,
    sign_tombstone,
)
from ficc.protocol.signing import Signer

AUDIT_LOCK_KEY: Final = 0x46494343_41554449
"""The advisory lock appends take on PostgreSQL ("FICC" "AUDI" as a 64-bit integer)."""
_LOCK: Final = text("SELECT pg_advisory_xact_lock(:key)")
_LAST: Final = (
    select(t.audit_log.c.seq, t.audit_log.c.digest).order_by(t.audit_log.c.seq.desc()).limit(1)
)
_INSERT: Final = insert(t.audit_log)
_CHAIN: Final = select(
    *(column for column in t.audit_log.c if column.name != "details"),
    type_coerce(t.audit_log.c.details, String).label("details"),
)
"""Rows as stored, ``details`` as its text where the driver gives text (SQLite): a row whose
JSON was damaged on disk reads all the same, and its digest tells."""
"""Built once: an append runs on every audited change, and building a statement costs more
than SQLite takes to run it."""


class SqlAudit(_Repository):
    async def append(self, entry: AuditEntry) -> int:
        values = _row_values(entry, t.audit_log, prev=None, digest=None, tombstone=None)
        result = await self._c.execute(insert(t.audit_log).values(values))
        key = result.inserted_primary_key
        return int(key[0]) if key is not None else 0

    async def list(
        self,
        *,
        project: str | None,
        after_seq: int,
        limit: int,
        cluster_wide: bool = True,
    ) -> list[AuditEntry]:
        query = select(t.audit_log).where(t.audit_log.c.seq > after_seq)
        if project is not None and cluster_wide:
            query = query.where(
                (t.audit_log.c.project == project) | t.audit_log.c.project.is_(None)
            )
        elif project is not None:
            query = query.where(t.audit_log.c.project == project)
        rows = await self._c.execute(query.order_by(t.audit_log.c.seq).limit(limit))
        return [_record(AuditEntry, t.audit_log, row) for row in rows]


class SqlChainedAudit(SqlAudit):
    """:class:`SqlAudit` whose rows form the chain; ``signer`` signs heads and tombstones."""

    def __init__(self, connection: SqlConnection, *, postgres: bool, signer: Signer | None) -> None:
        super().__init__(connection)
        self._postgres = postgres
        self._signer = signer

    async def _serialise(self) -> None:
        if self._postgres:
            await self._c.execute(_LOCK, {"key": AUDIT_LOCK_KEY})

    async def _last(self) -> tuple[int, str]:
        row = (await self._c.execute(_LAST)).first()
        return (0, GENESIS) if row is None else (int(row.seq), str(row.digest))

    async def append(self, entry: AuditEntry) -> int:
        await self._serialise()
        last_seq, prev = await self._last()
        seq = last_seq + 1
        at = format_stored_time(entry.at)
        details = json.loads(json.dumps(entry.details))
        digest = row_digest(replace(entry, details=details), seq=seq, prev=prev, at=at)
        values = _row_values(
            entry, t.audit_log, at=at, details=details, prev=prev, digest=digest, tombstone=None
        )
        await self._c.execute(_INSERT, {"seq": seq, **values})
        if self._signer is not None and head_due(seq):
            await self._add_head(seq, digest, self._signer)
        return seq

    async def _add_head(self, seq: int, digest: str, signer: Signer) -> None:
        await self._c.execute(
            insert(t.audit_heads).values(
                seq=seq, digest=digest, signature=sign_head(seq, digest, signer.sign)
            )
        )

    async def chain(self, *, after_seq: int, limit: int) -> Sequence[ChainRow]:
        query = _CHAIN.where(t.audit_log.c.seq > after_seq).order_by(t.audit_log.c.seq)
        return [_chain_row(row) for row in await self._c.execute(query.limit(limit))]

    async def end(self) -> int:
        return (await self._last())[0]

    async def heads(self) -> Sequence[SignedHead]:
        rows = await self._c.execute(select(t.audit_heads).order_by(t.audit_heads.c.seq))
        return [SignedHead(row.seq, row.digest, row.signature) for row in rows]

    async def naming(self, project: str, targets: Collection[str]) -> Sequence[int]:
        log = t.audit_log.c
        query = (
            select(log.seq)
            .where(
                (log.project == project) | log.project.is_(None),
                log.target.in_(list(targets)),
                log.tombstone.is_(None),
            )
            .order_by(log.seq)
        )
        return [int(seq) for seq in (await self._c.execute(query)).scalars()]

    async def tombstone(self, seqs: Collection[int], at: datetime) -> Sequence[int]:
        signer = _required(self._signer)
        log = t.audit_log.c
        stamp = format_stored_time(at)
        query = (
            select(log.seq, log.prev, log.digest)
            .where(log.seq.in_(list(seqs)), log.tombstone.is_(None))
            .order_by(log.seq)
        )
        done = []
        for row in (await self._c.execute(query)).all():
            signature = sign_tombstone(
                seq=row.seq, prev=row.prev, digest=row.digest, at=stamp, sign=signer.sign
            )
            await self._c.execute(
                update(t.audit_log)
                .where(log.seq == row.seq)
                .values(
                    at=stamp,
                    project=None,
                    actor="",
                    action=TOMBSTONE_ACTION,
                    target=None,
                    peer_hypernet_id=None,
                    peer_cluster_key=None,
                    details={},
                    tombstone=signature,
                )
            )
            done.append(int(row.seq))
        return done

    async def seal(self) -> int | None:
        signer = _required(self._signer)
        await self._serialise()
        if (await self._c.execute(select(t.audit_heads.c.seq).limit(1))).first() is not None:
            return None
        seq, digest = await self._last()
        if seq == 0:
            return None
        await self._add_head(seq, digest, signer)
        return seq


def _required(signer: Signer | None) -> Signer:
    if signer is None:
        raise RuntimeError("this unit of work has no cluster key to sign the audit log with")
    return signer


def _details(stored: Any) -> Any:
    if isinstance(stored, str):
        try:
            return json.loads(stored)
        except ValueError:
            return stored
    return stored


def _time(stored: str) -> datetime:
    """A stored time; text that is none (a row altered on disk) still reads, to be found out
    by its digest."""
    try:
        return parse_time(stored)
    except ValueError:
        return datetime.min.replace(tzinfo=UTC)


def _chain_row(row: Any) -> ChainRow:
    entry = None
    if row.tombstone is None:
        details = _details(row.details)
        entry = _record(
            AuditEntry,
            t.audit_log,
            row,
            at=_time(str(row.at)),
            details=dict(details) if isinstance(details, dict) else {"": details},
        )
    return ChainRow(
        seq=row.seq,
        at=str(row.at),
        prev=row.prev,
        digest=row.digest,
        entry=entry,
        tombstone=row.tombstone,
    )
