"""Usage receipts' storage: one row per receipt by grant, side and seq, its RFC 8785 text as
it was signed or received (the grantor's in its usage record's row since 0019: see
``signed_records``; a chain is read from both tables); and the last reconciliation report of
each grant."""

from __future__ import annotations

import contextlib
import json
from datetime import datetime
from typing import Any, Final

import orjson
from sqlalchemy import BigInteger, bindparam, delete, exists, insert, or_, select, update
from sqlalchemy.exc import IntegrityError

from ficc.adapters.sql import metering_tables as m
from ficc.adapters.sql import signed_records as signed
from ficc.adapters.sql.database import HotStatement, SqlConnection, execute_hot, known, note
from ficc.adapters.sql.usage_records import of_grant_requests, record_values
from ficc.domain.metering import UsageRecord
from ficc.domain.usage_receipts import EMPTY_HEAD, Head, StoredReceipt, head_kept

_R = m.usage_receipts.c

_HEAD: Final = (
    select(_R.seq, _R.digest, _R.receipt)
    .where(_R.grant_id == bindparam("grant"))
    .where(_R.side == bindparam("side"))
    .order_by(_R.seq.desc())
    .limit(1)
)


_INSERT: Final = insert(m.usage_receipts)
_COLUMNS: Final = (
    "grant_id",
    "side",
    "seq",
    "request_id",
    "digest",
    "receipt",
    "verified",
    "problem",
)
_K = m.usage_receipts.alias("kept")
_OF_CHAIN: Final = (_K.c.grant_id == bindparam("grant_id"), _K.c.side == bindparam("side"))
_HEAD_SEQ: Final = bindparam("head_seq", type_=BigInteger)
_APPEND_AFTER: Final = HotStatement(
    insert(m.usage_receipts)
    .from_select(
        list(_COLUMNS),
        select(*(bindparam(name, type_=m.usage_receipts.c[name].type) for name in _COLUMNS)).where(
            ~exists().where(*_OF_CHAIN, _K.c.seq > _HEAD_SEQ),
            or_(
                _HEAD_SEQ == 0,
                exists().where(
                    *_OF_CHAIN, _K.c.seq == _HEAD_SEQ, _K.c.digest == bindparam("head_digest")
                ),
            ),
        ),
    )
    .returning(m.usage_receipts.c.seq)
)
"""A receipt kept only while the head it follows is still the chain's: both checks are
lookups of the primary key, in the INSERT itself."""
_APPEND: Final = HotStatement(insert(m.usage_receipts))
"""A receipt right after the head this process committed last: on SQLite, where no other
process writes the chain (``database.Committed``), no check is read back. SQLite makes the
conditional INSERT above copy its rows through a temporary table (the SELECT reads the table
it inserts into), which cost about as much as the row itself."""


def _chain(receipt: StoredReceipt) -> tuple[str, ...]:
    return ("usage_receipts", receipt.grant, receipt.side)


class SqlUsageReceipts:
    """Implements ``ficc.services.ports.UsageReceiptsRepository``."""

    def __init__(self, connection: SqlConnection) -> None:
        self._c = connection

    async def head(self, grant_id: str, side: str) -> Head:
        chain = {"grant": grant_id, "side": side}
        rows = [
            row
            for query in (_HEAD, signed.HEAD)
            if (row := (await self._c.execute(query, chain)).first()) is not None
        ]
        if not rows:
            return EMPTY_HEAD
        row = max(rows, key=lambda found: int(found.seq))
        try:
            receipt: object = json.loads(row.receipt)
        except (ValueError, TypeError):
            receipt = None
        return head_kept(receipt, int(row.seq), str(row.digest))

    async def add(self, receipt: StoredReceipt) -> bool:
        kept = select(_R.seq).where(
            _R.grant_id == receipt.grant, _R.side == receipt.side, _R.seq == receipt.seq
        )
        if (await self._c.execute(kept)).first() is not None:
            return False
        at = {"grant": receipt.grant, "side": receipt.side, "seq": receipt.seq}
        if (await self._c.execute(signed.KEPT_AT, at)).first() is not None:
            return False
        await self._c.execute(_INSERT, _values(receipt))
        # Anywhere in the chain, a gap's too: its head is read again.
        note(self._c, _chain(receipt), None)
        return True

    async def append(self, receipt: StoredReceipt) -> None:
        # The grantor appends under the grant's row lock (its settlement's UPDATE), the
        # requester past the head it read: no two transactions insert one seq at once.
        await self._c.execute(_INSERT, _values(receipt))
        note(self._c, _chain(receipt), (receipt.seq, receipt.digest[:64]))

    async def append_after(self, receipt: StoredReceipt, head: Head) -> bool:
        values = _values(receipt)
        chain, after = _chain(receipt), (receipt.seq, receipt.digest[:64])
        if known(self._c, chain) == (head.seq, head.digest):
            try:
                await execute_hot(self._c, _APPEND, values)
            except IntegrityError:
                # Not the chain's head after all: the conditional INSERT says.
                note(self._c, chain, None)
            else:
                note(self._c, chain, after)
                return True
        values["head_seq"], values["head_digest"] = head.seq, head.digest
        # Whether a row went in, as the RETURNING tells (a driver may not count an INSERT's
        # rows from a SELECT).
        kept = bool(await execute_hot(self._c, _APPEND_AFTER, values))
        if kept:
            note(self._c, chain, after)
        return kept

    async def add_signed(
        self, record: UsageRecord, receipt: StoredReceipt, head: Head | None
    ) -> bool:
        values = record_values(record)
        values["receipt_seq"], values["receipt_digest"] = receipt.seq, receipt.digest[:64]
        values["receipt"] = _text(receipt)
        chain, after = _chain(receipt), (receipt.seq, receipt.digest[:64])
        if head is None or known(self._c, chain) == (head.seq, head.digest):
            try:
                await execute_hot(self._c, signed.ADD, values)
            except IntegrityError:
                if head is None:
                    raise
                note(self._c, chain, None)
            else:
                note(self._c, chain, after)
                return True
        assert head is not None
        values["head_seq"], values["head_digest"] = head.seq, head.digest
        kept = bool(await execute_hot(self._c, signed.ADD_AFTER, values))
        if kept:
            note(self._c, chain, after)
        return kept

    async def page(
        self, grant_id: str, side: str, *, after: int, limit: int
    ) -> list[StoredReceipt]:
        query = (
            select(m.usage_receipts)
            .where(_R.grant_id == grant_id)
            .where(_R.side == side)
            .where(_R.seq > after)
            .order_by(_R.seq)
            .limit(limit)
        )
        rows = [*await self._c.execute(query)]
        chain = {"grant": grant_id, "side": side, "after": after, "limit": limit}
        rows.extend(await self._c.execute(signed.PAGE, chain))
        return [_stored(row) for row in sorted(rows, key=lambda row: int(row.seq))[:limit]]

    async def of_requests(
        self, grant_id: str, side: str, requests: list[str]
    ) -> dict[str, StoredReceipt]:
        if not requests:
            return {}
        query = select(m.usage_receipts).where(
            *of_grant_requests(m.usage_receipts, grant_id, side, requests)
        )
        rows = [*await self._c.execute(query)]
        rows.extend(
            await self._c.execute(signed.of_requests(requests), {"grant": grant_id, "side": side})
        )
        # The lowest seq of each, as the highest written first leaves it.
        ordered = sorted(rows, key=lambda row: int(row.seq), reverse=True)
        return {row.request_id: _stored(row) for row in ordered}

    async def mark(self, grant_id: str, side: str, seq: int, problem: str | None) -> None:
        await self._c.execute(
            update(m.usage_receipts)
            .where(_R.grant_id == grant_id)
            .where(_R.side == side)
            .where(_R.seq == seq)
            .values(verified=problem is None, problem=problem)
        )

    async def save_report(
        self, grant_id: str, peer_id: str, at: datetime, report: dict[str, Any]
    ) -> None:
        await self._c.execute(delete(m.usage_reports).where(m.usage_reports.c.grant_id == grant_id))
        await self._c.execute(
            insert(m.usage_reports).values(grant_id=grant_id, peer_id=peer_id, at=at, report=report)
        )

    async def last_report(self, grant_id: str) -> dict[str, Any] | None:
        row = (
            await self._c.execute(
                select(m.usage_reports.c.report).where(m.usage_reports.c.grant_id == grant_id)
            )
        ).first()
        return None if row is None else dict(row.report)


def _values(receipt: StoredReceipt) -> dict[str, Any]:
    return {
        "grant_id": receipt.grant,
        "side": receipt.side,
        "seq": receipt.seq,
        "request_id": receipt.request[:128],
        "digest": receipt.digest[:64],
        # As it was given, compact: the digest is checked on the body, not this text.
        "receipt": _text(receipt),
        "verified": receipt.verified,
        "problem": receipt.problem,
    }


def _text(receipt: StoredReceipt) -> str:
    """The receipt as compact JSON, text as UTF-8: its RFC 8785 text when its signature or
    check made it, else its keys in their order. A receipt that verified holds only what both
    encoders spell so (its digest took its body's RFC 8785 encoding): orjson, several times
    faster, writes it; any other goes through the standard library, which also writes what
    orjson refuses (an integer past 64 bits)."""
    if receipt.text is not None:
        return receipt.text
    value = receipt.receipt
    if receipt.verified and type(value) is dict:
        with contextlib.suppress(TypeError):
            return orjson.dumps(value).decode()
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _stored(row: Any) -> StoredReceipt:
    try:
        receipt = json.loads(row.receipt)
    except ValueError:
        receipt = {}
    return StoredReceipt(
        grant=row.grant_id,
        side=row.side,
        seq=int(row.seq),
        request=row.request_id,
        receipt=receipt if isinstance(receipt, dict) else {},
        verified=bool(row.verified),
        problem=row.problem,
    )
