"""A metered budget's row (a grant's, a restricted token's): reserved, then settled.

Both are one conditional UPDATE of the holder's row, built once: the check and the charge in
one statement, so concurrent reservations (at once on PostgreSQL) never pass the budget.
The parameters are named apart from every column (``b_…``): SQLAlchemy reserves a column's
name for its own value in an UPDATE, and a token's row has a column ``tokens``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from sqlalchemy import Column, Table, Update, bindparam, case, update

from ficc.adapters.sql.database import SqlConnection


@dataclass(frozen=True)
class BudgetRow:
    """The statements over ``table``'s row named by ``key``; ``counts_requests``: a
    settlement also counts the request (a grant counts its requests at admission)."""

    table: Table
    key: Column[Any]
    counts_requests: bool = False
    _within: Update = field(init=False)
    _reserve: Update = field(init=False)
    _settle: Update = field(init=False)

    def __post_init__(self) -> None:
        c = self.table.c
        row = update(self.table).where(self.key == bindparam("b_holder"))
        used = c.prompt_tokens_used + c.completion_tokens_used + c.tokens_reserved
        reserve = row.values(tokens_reserved=c.tokens_reserved + bindparam("b_tokens"))
        settled: dict[str, Any] = {
            "tokens_reserved": case(
                (
                    c.tokens_reserved >= bindparam("b_reserved"),
                    c.tokens_reserved - bindparam("b_reserved"),
                ),
                else_=0,
            ),
            "prompt_tokens_used": c.prompt_tokens_used + bindparam("b_prompt"),
            "completion_tokens_used": c.completion_tokens_used + bindparam("b_completion"),
        }
        if self.counts_requests:
            settled["requests_used"] = c.requests_used + 1
        object.__setattr__(self, "_reserve", reserve)
        object.__setattr__(
            self, "_within", reserve.where(used + bindparam("b_tokens") <= bindparam("b_limit"))
        )
        object.__setattr__(self, "_settle", row.values(**settled))

    async def reserve(
        self, connection: SqlConnection, holder: str, tokens: int, limit: int | None
    ) -> bool:
        """Reserve ``tokens``, only while they fit under ``limit`` (None: no budget)."""
        if limit is None:
            result = await connection.execute(
                self._reserve, {"b_holder": holder, "b_tokens": tokens}
            )
        else:
            result = await connection.execute(
                self._within, {"b_holder": holder, "b_tokens": tokens, "b_limit": limit}
            )
        return result.rowcount == 1

    async def clear(self, connection: SqlConnection) -> None:
        """Hold nothing: at start, when no request is in flight."""
        c = self.table.c
        await connection.execute(
            update(self.table).where(c.tokens_reserved != 0).values(tokens_reserved=0)
        )

    @property
    def settle_statement(self) -> Update:
        """The settlement's UPDATE, for a repository that adds a ``RETURNING`` to it."""
        return self._settle

    async def settle(
        self,
        connection: SqlConnection,
        holder: str,
        *,
        reserved: int,
        prompt_tokens: int,
        completion_tokens: int,
    ) -> None:
        """Give back what was reserved and add the true counts."""
        await connection.execute(
            self._settle, self.settlement(holder, reserved, prompt_tokens, completion_tokens)
        )

    @staticmethod
    def settlement(
        holder: str, reserved: int, prompt_tokens: int, completion_tokens: int
    ) -> dict[str, Any]:
        """The settlement's parameters (for :attr:`settle_statement` with a ``RETURNING``)."""
        return {
            "b_holder": holder,
            "b_reserved": reserved,
            "b_prompt": prompt_tokens,
            "b_completion": completion_tokens,
        }


class BudgetMethods:
    """The reservation, settlement and clearing of the ``BudgetRows`` port over a
    repository's :attr:`_budget`, on its connection ``_c``."""

    _budget: ClassVar[BudgetRow]
    _c: SqlConnection

    async def reserve_tokens(self, holder: str, tokens: int, *, limit: int | None) -> bool:
        return await self._budget.reserve(self._c, holder, tokens, limit)

    async def settle_tokens(
        self, holder: str, *, reserved: int, prompt_tokens: int, completion_tokens: int
    ) -> None:
        await self._budget.settle(
            self._c,
            holder,
            reserved=reserved,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
        )

    async def clear_reservations(self) -> None:
        await self._budget.clear(self._c)
