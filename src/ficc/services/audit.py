"""Writing and reading the append-only audit log."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from ficc.base.errors import InvalidInput
from ficc.base.json_types import JSONObject
from ficc.domain.audit import MAX_AUDIT_PAGE as MAX_AUDIT_PAGE
from ficc.domain.audit import MAX_AUDIT_SEQ as MAX_AUDIT_SEQ
from ficc.domain.audit import AuditEntry
from ficc.domain.audit_chain import ChainReport, ChainVerifier, Verify
from ficc.domain.principals import Principal
from ficc.services.ports import Clock, UnitOfWork, UnitOfWorkFactory


def actor_of(principal: Principal) -> str:
    """How a local principal appears in the audit log."""
    credential = principal.token_id or principal.session_id or principal.via
    return f"{principal.username}:{credential}"


async def record(
    uow: UnitOfWork,
    clock: Clock,
    *,
    action: str,
    actor: str,
    project: str | None,
    target: str | None,
    details: JSONObject | None = None,
    peer_hypernet_id: str | None = None,
    peer_cluster_key: str | None = None,
) -> None:
    """Append an entry inside the caller's transaction, so it commits with the change."""
    # The arguments are AuditEntry's fields in its order, with the time read here.
    entry = AuditEntry(
        action, actor, project, target, clock(), details or {}, peer_hypernet_id, peer_cluster_key
    )
    await uow.audit.append(entry)


async def record_by(
    uow: UnitOfWork,
    clock: Clock,
    principal: Principal,
    action: str,
    *,
    project: str | None,
    target: str,
    details: JSONObject | None = None,
) -> None:
    """Append an entry for a local principal's change, named as :func:`actor_of` names it."""
    actor = actor_of(principal)
    await record(
        uow, clock, action=action, actor=actor, project=project, target=target, details=details
    )


VERIFY_PAGE: Final = 1000
"""Rows read per transaction while verifying: a long log never sits in memory whole."""


@dataclass(frozen=True, eq=False)
class Audit:
    """Reading the log, and checking its chain against the heads signed with ``public_key``.

    Writing stays :func:`record`: an entry commits inside the transaction of the change it
    records, which the service making the change holds.
    """

    uow_factory: UnitOfWorkFactory
    public_key: bytes
    verify: Verify

    async def list_audit(
        self, *, project: str, after_seq: int, limit: int, principal: Principal
    ) -> list[AuditEntry]:
        """The project's entries; cluster-wide ones (project None: tokens, sessions, login
        links, unbound offers) only for the local owner, as they name credentials and strangers.

        A cursor outside ``0 .. MAX_AUDIT_SEQ`` is refused naming ``after``: past the
        database's integers it would fail in the query instead.
        """
        if not 0 <= after_seq <= MAX_AUDIT_SEQ:
            raise InvalidInput(
                f"after must be an integer between 0 and {MAX_AUDIT_SEQ}", field="after"
            )
        if not 1 <= limit <= MAX_AUDIT_PAGE:
            raise InvalidInput(
                f"limit must be an integer between 1 and {MAX_AUDIT_PAGE}", field="limit"
            )
        async with self.uow_factory() as uow:
            return await uow.audit.list(
                project=project,
                after_seq=after_seq,
                limit=limit,
                cluster_wide=principal.is_owner,
            )

    async def verify_chain(self) -> ChainReport:
        """Check the audit chain row by row against the signed heads: the report names the
        first broken link (``broken.seq``, ``broken.reason``), or is ``intact``."""
        async with self.uow_factory() as uow:
            # The end first: every row up to it had its head committed with it, so the heads
            # read next hold them all, whatever is appended meanwhile.
            end = await uow.audit.end()
            heads = {head.seq: head for head in await uow.audit.heads()}
        verifier = ChainVerifier(self.public_key, self.verify, heads, due_through=end)
        after = 0
        while True:
            async with self.uow_factory() as uow:
                rows = await uow.audit.chain(after_seq=after, limit=VERIFY_PAGE)
            if not rows or not verifier.feed(rows):
                break
            after = rows[-1].seq
        verifier.finish()
        return verifier.report()

    async def seal(self) -> int | None:
        """Sign the head of a chain no head signs yet (the rows migration 0015 chained): the
        first start after the migration pins that history to the cluster key."""
        async with self.uow_factory() as uow:
            sealed = await uow.audit.seal()
            await uow.commit()
        return sealed
