"""Usage receipts between the two sides of a grant.

The grantor signs one receipt per usage record (``services.metering``) and answers
``usage.receipts`` with a page of a grant's chain to that grant's peer alone. The requester
checks each receipt that comes with an answer (signature, seq, previous digest, the counts it
saw), keeps it with what the check found, fetches those that did not arrive (an answer ended
early, a cut connection) on its next request through the grant and on demand, and reconciles
both chains into a report. A mismatch or a gap is kept and shown, never accepted silently.
Concurrent answers through one grant may arrive out of order: see ``receipt_gaps``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Final, TypeVar

from ficc.base.errors import Conflict, FiccError, InvalidInput, NotFound
from ficc.base.ids import parse_id
from ficc.base.json_types import JSONObject
from ficc.domain import metering as m
from ficc.domain import usage_receipts as r
from ficc.domain.peers import Peer
from ficc.domain.principals import Principal
from ficc.domain.receipts import unb64
from ficc.services.federation.common import (
    PAIRING_TIMEOUT_SECONDS,
    FederationContext,
    Verify,
    check_paired,
    log,
    project_peer,
)
from ficc.services.federation.known_peers import paired_peer
from ficc.services.federation.receipt_gaps import ReceiptGaps, late_problem
from ficc.services.federation.receipt_heads import KeptHeads
from ficc.services.ports import UnitOfWork
from ficc.services.ports.peers import PeerIdentity, RequestResult

OPERATION: Final = "usage.receipts"
CATCH_UP_TIMEOUT_SECONDS: Final = 3.0
"""How long a request waits for the receipts its grant lacks before it is sent anyway."""
READ_PAGE: Final = 1000
"""Receipts and records read per query while reconciling."""

_Seq = TypeVar("_Seq", r.StoredReceipt, m.UsageRecord)


def _count(value: object, field: str, default: int, maximum: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= maximum:
        raise InvalidInput(f"{field} must be an integer between 0 and {maximum}", field=field)
    return value


class UsageReceipts:
    """Both sides' part in usage receipts (see the module)."""

    def __init__(self, context: FederationContext, verify: Verify) -> None:
        self._ctx = context
        self._verify = verify
        self._heads = KeptHeads(verify)
        self.gaps = ReceiptGaps()
        """Grants whose chain this side knows to lack receipts: fetched before the next
        request through them, after a restart too."""

    async def load(self) -> None:
        """At start: the gaps noted before and not yet fetched."""
        async with self._ctx.uow_factory() as uow:
            await self.gaps.load(uow)

    # The grantor's side.

    async def on_usage_receipts(self, identity: PeerIdentity, body: JSONObject) -> RequestResult:
        """``usage.receipts``: receipts of one of the calling peer's grants after ``after``,
        at most ``limit`` (≤ :data:`~ficc.domain.usage_receipts.MAX_RECEIPTS_PAGE`)."""
        grant_id = parse_id("grant", body.get("grant"), field="grant")
        after = _count(body.get("after"), "after", 0, 2**53 - 1)
        limit = _count(body.get("limit"), "limit", r.MAX_RECEIPTS_PAGE, r.MAX_RECEIPTS_PAGE)
        if limit < 1:
            raise InvalidInput(
                f"limit must be an integer between 1 and {r.MAX_RECEIPTS_PAGE}", field="limit"
            )
        async with self._ctx.uow_factory() as uow:
            peer = await paired_peer(uow, identity)
            grant = await uow.grants.get(grant_id)
            if grant is None or grant.peer_id != peer.id:
                raise NotFound("this peer holds no such grant", details={"grant": grant_id})
            kept = await uow.usage_receipts.page(grant_id, m.GRANTOR, after=after, limit=limit + 1)
            head = await uow.usage_receipts.head(grant_id, m.GRANTOR)
        more = len(kept) > limit
        kept = kept[:limit]
        return {
            "receipts": [{"seq": item.seq, "receipt": dict(item.receipt)} for item in kept],
            "head": head.to_json(),
            "next": kept[-1].seq if more and kept else None,
        }

    # The requester's side.

    async def keep(
        self, uow: UnitOfWork, peer: Peer, record: m.UsageRecord, receipt: object
    ) -> r.StoredReceipt | None:
        """Check the receipt an answer carried against the record this side writes of it,
        in the record's transaction, and keep it with what the check found. No receipt (an
        answer ended early) or one past a gap marks the grant behind."""
        grant = record.grant
        kept = await self._heads.keep_next(uow, peer, record, receipt)
        if kept is not None:
            return kept
        head = await uow.usage_receipts.head(grant, m.REQUESTER)
        if receipt is None:
            await self.gaps.note(uow, peer.id, grant, head.seq)
            return None
        body, problem, text = r.checked_alone(
            receipt, grant=grant, public_key=unb64(peer.cluster_key), verify=self._verify
        )
        raw = receipt.get("body") if isinstance(receipt, Mapping) else None
        seq = raw.get("seq") if isinstance(raw, Mapping) else None
        if isinstance(seq, bool) or not isinstance(seq, int) or seq < 1:
            log.warning("grant %s: the grantor's receipt of %s is malformed", grant, record.request)
            await self.gaps.note(uow, peer.id, grant, head.seq)
            return None
        if body is not None:
            if not r.matches_record(body, record):
                problem = r.COUNTS
            elif seq == head.seq + 1:
                problem = r.follows(body, head)
            elif seq > head.seq + 1:
                await self.gaps.note(uow, peer.id, grant, head.seq)
            else:
                problem = await late_problem(uow, grant, seq, body, receipt)
        assert isinstance(receipt, Mapping)
        stored = r.StoredReceipt(
            grant, m.REQUESTER, seq, record.request, receipt, problem is None, problem, text
        )
        if seq > head.seq:
            # Past the highest seq kept: nothing can be at it (the common case, one INSERT).
            await uow.usage_receipts.append(stored)
        elif not await uow.usage_receipts.add(stored):
            # The grantor gave a second receipt at one seq: the first one stays, and
            # reconcile shows the two differ.
            log.warning("grant %s: a second receipt at seq %d was refused", grant, seq)
            await self.gaps.note(uow, peer.id, grant, 0)
            return None
        if problem is not None:
            log.warning("grant %s: receipt %d fails verification: %s", grant, seq, problem)
        if seq < head.seq:
            await self.gaps.filled(uow, grant, head.seq)
        if seq > head.seq:
            self._heads.remember(stored)
        return stored

    async def catch_up(self, peer: Peer, grant_id: str, *, busy: bool = False) -> None:
        """Before a request through a grant that lacks receipts: fetch them (best effort,
        briefly: the request goes on whatever happens). ``busy``: other requests through the
        grant are still on their way, and may bring what is missing."""
        after = self.gaps.due(grant_id, busy=busy)
        if after is None:
            return
        with self.gaps.fetching(grant_id):
            try:
                await self._fetch(
                    peer, grant_id, timeout_seconds=CATCH_UP_TIMEOUT_SECONDS, after=after
                )
            except FiccError as exc:
                log.info("grant %s: receipts not fetched: %s", grant_id, exc.message)

    async def _fetch(
        self, peer: Peer, grant_id: str, *, timeout_seconds: float, after: int = 0
    ) -> tuple[list[tuple[int, JSONObject]], r.Head, int]:
        """The grantor's chain of ``grant_id`` past ``after`` (0: whole), keeping the
        receipts this side lacks, then checking this side's chain again from there: the
        grantor's receipts by seq, its head and how many were fetched."""
        theirs: list[tuple[int, JSONObject]] = []
        head = r.EMPTY_HEAD
        start = after
        while True:
            answer = await self._ctx.link.request(
                peer.hypernet_id,
                OPERATION,
                {"grant": grant_id, "after": after, "limit": r.MAX_RECEIPTS_PAGE},
                generation=peer.generation,
                ticket=peer.ticket,
                timeout_seconds=timeout_seconds,
                max_answer_bytes=r.RECEIPTS_ANSWER_BYTES,
            )
            page, head, following = _page_of(answer.body)
            theirs.extend(page)
            if following is None or following <= after:
                break
            after = following
        fetched = 0
        async with self._ctx.uow_factory() as uow:
            for seq, receipt in theirs:
                stored = r.StoredReceipt(
                    grant_id, m.REQUESTER, seq, _request_of(receipt), receipt, False
                )
                if await uow.usage_receipts.add(stored):
                    fetched += 1
            await self._recheck(uow, peer, grant_id, after=start)
            await self.gaps.caught_up(uow, grant_id)
            await uow.commit()
        return theirs, head, fetched

    async def _recheck(
        self,
        uow: UnitOfWork,
        peer: Peer,
        grant_id: str,
        *,
        head_seq: int | None = None,
        after: int = 0,
    ) -> list[r.Finding]:
        """Verify this side's chain of ``grant_id`` again past ``after`` (linked to the
        receipt at ``after``), each receipt against the record of its request too, and mark
        each receipt with what was found."""
        ours = await _all_receipts(uow, grant_id, after=max(after - 1, 0))
        start = r.EMPTY_HEAD
        if after and ours and ours[0].seq == after:
            try:
                start = r.head_after(ours[0].receipt)
            except (KeyError, TypeError, ValueError, AttributeError):
                start = r.Head(after, ours[0].digest, {})
            ours = ours[1:]
        elif after:
            # The receipt to link to is not here: check the whole chain.
            ours = await _all_receipts(uow, grant_id)
        _, findings = r.verify_chain(
            ((item.seq, dict(item.receipt)) for item in ours),
            grant=grant_id,
            public_key=unb64(peer.cluster_key),
            verify=self._verify,
            head_seq=head_seq,
            start=start,
        )
        records = await uow.usage.of_requests(
            grant_id, m.REQUESTER, [item.request for item in ours]
        )
        problems = {f.seq: f.reason for f in findings}
        for item in ours:
            record = records.get(item.request)
            if item.seq not in problems and (
                record is None or not r.matches_record(item.body, record)
            ):
                problems[item.seq] = r.COUNTS
                findings.append(r.Finding(item.seq, r.COUNTS))
            problem = problems.get(item.seq)
            if item.problem != problem or item.verified != (problem is None):
                await uow.usage_receipts.mark(grant_id, m.REQUESTER, item.seq, problem)
        return findings

    async def reconcile(
        self, principal: Principal, project: str, peer_id: str, *, grant: object = None
    ) -> JSONObject:
        """``POST /peers/{id}/reconcile`` and ``ficc federation-reconcile``: both chains of
        each grant of the peer (or of ``grant``) compared, what this side lacks fetched."""
        principal.require_scope("federation:read")
        chosen = None if grant is None else parse_id("grant", grant, field="grant")
        async with self._ctx.uow_factory() as uow:
            peer = await project_peer(uow, project, peer_id)
            # The grants the peer lists now, and those it gave and lists no more (retired):
            # their chains can still be fetched and compared.
            known = {str(item.get("id")) for item in await uow.remote_grants.of_peer(peer.id)}
            known.update(await uow.receipt_chains.of_peer(peer.id))
        check_paired(peer)
        if chosen is not None and chosen not in known:
            raise NotFound(
                f"the peer gives this project no grant {chosen}", details={"grant": chosen}
            )
        reports = [
            await self._reconcile_grant(peer, grant_id)
            for grant_id in ([chosen] if chosen is not None else sorted(known))
        ]
        return {"grants": reports}

    async def _reconcile_grant(self, peer: Peer, grant_id: str) -> JSONObject:
        async with self._ctx.uow_factory() as uow:
            before = {item.seq: dict(item.receipt) for item in await _all_receipts(uow, grant_id)}
        theirs, head, fetched = await self._fetch(
            peer, grant_id, timeout_seconds=PAIRING_TIMEOUT_SECONDS
        )
        found: dict[tuple[int, str], None] = {}
        _, their_findings = r.verify_chain(
            theirs,
            grant=grant_id,
            public_key=unb64(peer.cluster_key),
            verify=self._verify,
            head_seq=head.seq,
        )
        for finding in their_findings:
            found[(finding.seq, finding.reason)] = None
        for seq, receipt in theirs:
            if seq in before and before[seq] != receipt:
                found[(seq, r.DIFFERS)] = None
        async with self._ctx.uow_factory() as uow:
            for finding in await self._recheck(uow, peer, grant_id, head_seq=head.seq):
                found[(finding.seq, finding.reason)] = None
            ours = await _all_receipts(uow, grant_id)
            receipted = {item.request for item in ours}
            missing = [
                {"request": record.request, "outcome": record.outcome}
                for record in await _all_records(uow, grant_id)
                if record.request not in receipted
            ]
            our_head = ours[-1].digest if ours else r.GENESIS
            invalid = [{"seq": seq, "reason": reason} for seq, reason in sorted(found)]
            report = {
                "grant": grant_id,
                "head": head.to_json(),
                "matched": not invalid and not missing and our_head == head.digest,
                "fetched": fetched,
                "missing": missing,
                "invalid": invalid,
            }
            await uow.usage_receipts.save_report(grant_id, peer.id, self._ctx.clock(), report)
            await uow.commit()
        if invalid or missing:
            log.warning(
                "grant %s: reconcile found %d failing receipts, %d requests without one",
                grant_id,
                len(invalid),
                len(missing),
            )
        return report

    async def last_report(self, grant_id: str) -> JSONObject | None:
        async with self._ctx.uow_factory() as uow:
            return await uow.usage_receipts.last_report(grant_id)


def _request_of(receipt: Mapping[str, object]) -> str:
    body = receipt.get("body")
    request = body.get("request") if isinstance(body, Mapping) else None
    return request if isinstance(request, str) else ""


def _page_of(
    answer: Mapping[str, object],
) -> tuple[list[tuple[int, JSONObject]], r.Head, int | None]:
    """A ``usage.receipts`` answer read defensively: its receipts by seq, head and next."""
    items, head, following = answer.get("receipts"), answer.get("head"), answer.get("next")
    if not isinstance(items, list) or not isinstance(head, Mapping):
        raise Conflict("the peer answered usage.receipts with something else")
    page: list[tuple[int, JSONObject]] = []
    for item in items:
        seq = item.get("seq") if isinstance(item, Mapping) else None
        receipt = item.get("receipt") if isinstance(item, Mapping) else None
        if isinstance(seq, int) and not isinstance(seq, bool) and isinstance(receipt, dict):
            page.append((seq, receipt))
    seq, digest = head.get("seq"), head.get("digest")
    if not isinstance(seq, int) or isinstance(seq, bool) or not isinstance(digest, str):
        raise Conflict("the peer answered usage.receipts with something else")
    nxt = following if isinstance(following, int) and not isinstance(following, bool) else None
    return page, r.Head(seq, digest, {}), nxt


async def _all_receipts(uow: UnitOfWork, grant_id: str, *, after: int = 0) -> list[r.StoredReceipt]:
    return await _every(
        lambda seq: uow.usage_receipts.page(grant_id, m.REQUESTER, after=seq or 0, limit=READ_PAGE),
        after,
    )


async def _all_records(uow: UnitOfWork, grant_id: str) -> list[m.UsageRecord]:
    return await _every(
        lambda seq: uow.usage.page(m.UsageQuery(grant_id, m.REQUESTER), after=seq, limit=READ_PAGE),
        None,
    )


async def _every(
    read: Callable[[int | None], Awaitable[list[_Seq]]], after: int | None
) -> list[_Seq]:
    """Every row a paged read returns, page after page, each from the last ``seq`` read."""
    found: list[_Seq] = []
    while True:
        page = await read(after)
        found.extend(page)
        if len(page) < READ_PAGE:
            return found
        after = page[-1].seq
