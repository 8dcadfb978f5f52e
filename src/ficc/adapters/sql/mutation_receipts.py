"""Mutation receipts in SQL: what became of each ``mutation_id``, by scope."""

from __future__ import annotations

from sqlalchemy import delete, func, insert, select, update

from ficc.adapters.sql import tables as t
from ficc.adapters.sql.repository import _record, _Repository, _row_values
from ficc.domain.mutations import MutationReceipt


class SqlReceipts(_Repository):
    async def get(self, scope: str, mutation_id: str) -> MutationReceipt | None:
        query = select(t.mutation_receipts).where(
            t.mutation_receipts.c.scope == scope, t.mutation_receipts.c.mutation_id == mutation_id
        )
        row = (await self._c.execute(query)).first()
        if row is None:
            return None
        return _record(MutationReceipt, t.mutation_receipts, row)

    async def put(self, receipt: MutationReceipt) -> None:
        values = _row_values(receipt, t.mutation_receipts)
        changed = await self._c.execute(
            update(t.mutation_receipts)
            .where(
                t.mutation_receipts.c.scope == receipt.scope,
                t.mutation_receipts.c.mutation_id == receipt.mutation_id,
            )
            .values(**values)
        )
        if changed.rowcount == 0:
            await self._c.execute(
                insert(t.mutation_receipts).values(
                    scope=receipt.scope, mutation_id=receipt.mutation_id, **values
                )
            )

    async def delete_scope(self, scope: str) -> None:
        await self._delete_where(t.mutation_receipts, "scope", scope)

    async def delete(self, scope: str, mutation_id: str) -> None:
        await self._c.execute(
            delete(t.mutation_receipts).where(
                t.mutation_receipts.c.scope == scope,
                t.mutation_receipts.c.mutation_id == mutation_id,
            )
        )

    async def count(self, scope: str, operation: str, state: str) -> int:
        query = (
            select(func.count())
            .select_from(t.mutation_receipts)
            .where(
                t.mutation_receipts.c.scope == scope,
                t.mutation_receipts.c.operation == operation,
                t.mutation_receipts.c.state == state,
            )
        )
        return int((await self._c.execute(query)).scalar_one())
