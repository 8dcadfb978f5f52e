"""Usage of a grant, as either side sees it: the grantor's records of a grant it gave, the
requester's of a grant it holds (the same request IDs on both), a page at a time, with totals
per hour and day."""

from __future__ import annotations

from datetime import datetime
from typing import Final

from ficc.base.errors import InvalidInput, NotFound
from ficc.base.ids import parse_id
from ficc.base.json_types import JSONObject
from ficc.base.times import parse_time, with_times_formatted
from ficc.domain import metering as m
from ficc.domain.principals import Principal
from ficc.domain.usage_receipts import StoredReceipt
from ficc.services.ports import UnitOfWork, UnitOfWorkFactory

DEFAULT_USAGE_PAGE: Final = 100
MAX_USAGE_PAGE: Final = 1000


def parse_moment(value: str | None, field: str) -> datetime | None:
    """An RFC 3339 time given as a filter, or the contract's 400 naming it."""
    if value is None:
        return None
    try:
        return parse_time(value)
    except ValueError as exc:
        raise InvalidInput(f"{field} must be an RFC 3339 time", field=field) from exc


def parse_cursor(value: str | None) -> int | None:
    """``after``: the ``next`` of the page before (the last record's place)."""
    if value is None or value == "":
        return None
    if not value.isdigit() or len(value) > 18:
        raise InvalidInput("after must be the next of an earlier page", field="after")
    return int(value)


async def _side(uow: UnitOfWork, project: str, grant_id: str) -> str:
    """Which side this project is on for ``grant_id``; not found for any other grant."""
    given = await uow.grants.get(grant_id)
    if given is not None and given.project == project:
        return m.GRANTOR
    for peer in await uow.peers.in_project(project):
        if any(item.get("id") == grant_id for item in await uow.remote_grants.of_peer(peer.id)):
            return m.REQUESTER
    raise NotFound(f"no grant {grant_id} in project {project}", details={"grant": grant_id})


class GrantUsage:
    """``GET /grants/{id}/usage`` and ``ficc federation-usage``."""

    def __init__(self, uow_factory: UnitOfWorkFactory) -> None:
        self._uow_factory = uow_factory

    async def usage(
        self,
        principal: Principal,
        project: str,
        grant_id: str,
        *,
        after: str | None = None,
        limit: int = DEFAULT_USAGE_PAGE,
        since: str | None = None,
        until: str | None = None,
        receipts: bool = False,
    ) -> JSONObject:
        """A page of records; on the requester each carries its receipt and whether it
        verified, on the grantor with ``receipts`` (an export a third party can check)."""
        principal.require_scope("federation:read")
        grant_id = parse_id("grant", grant_id, field="grant")
        cursor = parse_cursor(after)
        if not 1 <= limit <= MAX_USAGE_PAGE:
            raise InvalidInput(f"limit must be between 1 and {MAX_USAGE_PAGE}", field="limit")
        start, end = parse_moment(since, "since"), parse_moment(until, "until")
        async with self._uow_factory() as uow:
            side = await _side(uow, project, grant_id)
            query = m.UsageQuery(grant_id, side, start, end)
            records = await uow.usage.page(query, after=cursor, limit=limit + 1)
            totals = await uow.usage.totals(query)
            more = len(records) > limit
            records = records[:limit]
            kept = {}
            if side == m.REQUESTER or receipts:
                kept = await uow.usage_receipts.of_requests(
                    grant_id, side, [r.request for r in records]
                )
        shown = [r.to_json() for r in records]
        if side == m.REQUESTER or receipts:
            for record in shown:
                _with_receipt(record, kept.get(record["request"]), side)
        page: JSONObject = with_times_formatted(
            {
                "grant": grant_id,
                "side": side,
                "records": shown,
                "totals": totals,
                "next": str(records[-1].seq) if more and records else None,
            }
        )
        return page


def _with_receipt(record: JSONObject, kept: StoredReceipt | None, side: str) -> None:
    """A record as shown with its receipt; on the requester, whether it verified and, when
    not, why (``receipt_problem``: ``null`` while a receipt is still to be fetched)."""
    record["receipt"] = None if kept is None else dict(kept.receipt)
    if side == m.REQUESTER:
        record["verified"] = kept is not None and kept.verified
        record["receipt_problem"] = None if kept is None else kept.problem
