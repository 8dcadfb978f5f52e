"""The grantor's usage receipts in their usage records' rows (``receipt_seq``,
``receipt_digest``, ``receipt``): signed in the record's transaction, a receipt needs no row
of its own, so a request writes one row, not two. Receipts kept before (and every one a
requester keeps) are in ``usage_receipts``: a chain is read from both tables
(``usage_receipts``), these statements being the records' half.
"""

from __future__ import annotations

from typing import Any, Final

from sqlalchemy import (
    BigInteger,
    BindParameter,
    Select,
    bindparam,
    exists,
    insert,
    null,
    or_,
    select,
    true,
)

from ficc.adapters.sql import metering_tables as m
from ficc.adapters.sql.database import HotStatement

_U = m.usage_records.c
_R = m.usage_receipts.c

COLUMNS: Final = tuple(column.name for column in m.usage_records.c if column.name != "seq")
"""A signed record's columns: the record's (``usage_records.record_values``) and its
receipt's."""


def _bound(name: str) -> BindParameter[Any]:
    return bindparam(name, type_=m.usage_records.c[name].type)


ADD: Final = HotStatement(insert(m.usage_records).values({name: _bound(name) for name in COLUMNS}))
"""A record and its receipt, right after the head this process committed (or read in this
transaction)."""

_KU = m.usage_records.alias("kept_record")
_KR = m.usage_receipts.alias("kept_receipt")
_HEAD_SEQ = bindparam("head_seq", type_=BigInteger)
_OF_RECORDS = (_KU.c.grant_id == bindparam("grant_id"), _KU.c.side == bindparam("side"))
_OF_RECEIPTS = (_KR.c.grant_id == bindparam("grant_id"), _KR.c.side == bindparam("side"))

ADD_AFTER: Final = HotStatement(
    insert(m.usage_records)
    .from_select(
        list(COLUMNS),
        select(*(_bound(name) for name in COLUMNS)).where(
            ~exists().where(*_OF_RECORDS, _KU.c.receipt_seq > _HEAD_SEQ),
            ~exists().where(*_OF_RECEIPTS, _KR.c.seq > _HEAD_SEQ),
            or_(
                _HEAD_SEQ == 0,
                exists().where(
                    *_OF_RECORDS,
                    _KU.c.receipt_seq == _HEAD_SEQ,
                    _KU.c.receipt_digest == bindparam("head_digest"),
                ),
                exists().where(
                    *_OF_RECEIPTS,
                    _KR.c.seq == _HEAD_SEQ,
                    _KR.c.digest == bindparam("head_digest"),
                ),
            ),
        ),
    )
    .returning(m.usage_records.c.seq)
)
"""A record and its receipt only while the head it follows is still the chain's, in either
table: each check a lookup of an index, in the INSERT itself."""

_CHAIN: Final = (
    _U.grant_id == bindparam("grant"),
    _U.side == bindparam("side"),
    _U.receipt_seq.isnot(None),
)
_AS_KEPT: Final = (
    _U.grant_id,
    _U.side,
    _U.receipt_seq.label("seq"),
    _U.request_id,
    _U.receipt_digest.label("digest"),
    _U.receipt,
    true().label("verified"),
    null().label("problem"),
)
"""A signed record's receipt as ``usage_receipts`` rows read: the grantor's own, verified."""

HEAD: Final = select(*_AS_KEPT).where(*_CHAIN).order_by(_U.receipt_seq.desc()).limit(1)
PAGE: Final = (
    select(*_AS_KEPT)
    .where(*_CHAIN, _U.receipt_seq > bindparam("after"))
    .order_by(_U.receipt_seq)
    .limit(bindparam("limit"))
)
KEPT_AT: Final = select(_U.receipt_seq).where(*_CHAIN, _U.receipt_seq == bindparam("seq"))


def of_requests(requests: list[str]) -> Select[Any]:
    """The signed records' receipts of ``requests``, highest seq first."""
    return (
        select(*_AS_KEPT)
        .where(*_CHAIN, _U.request_id.in_(sorted(set(requests))))
        .order_by(_U.receipt_seq.desc())
    )
