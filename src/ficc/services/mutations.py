"""Mutation receipts: a retried mutation replays its result; other arguments are a conflict.

The receipt and the effect it records commit in one transaction where the effect is a
database change, so there is no window in which one exists without the other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ficc.base.errors import MutationConflict
from ficc.domain.mutations import arguments_sha256
from ficc.domain.service_records import MutationReceipt
from ficc.services.ports import Clock, UnitOfWork

UNCERTAIN = "uncertain"
COMPLETED = "completed"


@dataclass(frozen=True)
class MutationKey:
    """Where a mutation_id lives (a project locally, a grant remotely) and what it asked."""

    scope: str
    mutation_id: str
    operation: str
    arguments_sha256: str

    @classmethod
    def of(cls, scope: str, mutation_id: str, operation: str, arguments: Any) -> MutationKey:
        return cls(scope, mutation_id, operation, arguments_sha256(operation, arguments))


async def replay(uow: UnitOfWork, key: MutationKey) -> dict[str, Any] | None:
    """The retained result of an earlier try, None if there is none to replay."""
    receipt = await uow.receipts.get(key.scope, key.mutation_id)
    if receipt is None:
        return None
    if receipt.operation != key.operation or receipt.arguments_sha256 != key.arguments_sha256:
        raise MutationConflict(
            "this mutation_id was used with other arguments; use a new mutation_id",
            details={"mutation_id": key.mutation_id, "operation": receipt.operation},
        )
    if receipt.state == COMPLETED:
        return receipt.result
    return None


async def record(
    uow: UnitOfWork, clock: Clock, key: MutationKey, *, state: str, result: dict[str, Any] | None
) -> None:
    existing = await uow.receipts.get(key.scope, key.mutation_id)
    now = clock()
    await uow.receipts.put(
        MutationReceipt(
            scope=key.scope,
            mutation_id=key.mutation_id,
            operation=key.operation,
            arguments_sha256=key.arguments_sha256,
            state=state,
            result=result,
            created_at=existing.created_at if existing else now,
            completed_at=now if state == COMPLETED else None,
        )
    )
