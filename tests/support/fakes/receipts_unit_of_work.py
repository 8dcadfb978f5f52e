"""A dict-backed unit of work holding mutation receipts only: what it holds changes only when a
transaction commits.

It implements the repositories the federation's service tests use (receipts); each one counts
its reads so a test can hold a service to "read once per transaction".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import TracebackType
from typing import Self

from ficc.domain.service_records import MutationReceipt


@dataclass
class FakeDatabase:
    """The committed state every transaction of one fake starts from."""

    receipts: dict[tuple[str, str], MutationReceipt] = field(default_factory=dict)
    receipt_reads: list[int] = field(default_factory=list)
    """Receipt reads of each transaction, in the order they ended."""
    commits: int = 0


class FakeReceipts:
    def __init__(self, rows: dict[tuple[str, str], MutationReceipt]) -> None:
        self.rows = rows
        self.reads = 0

    async def get(self, scope: str, mutation_id: str) -> MutationReceipt | None:
        self.reads += 1
        return self.rows.get((scope, mutation_id))

    async def put(self, receipt: MutationReceipt) -> None:
        self.rows[(receipt.scope, receipt.mutation_id)] = receipt

    async def delete_scope(self, scope: str) -> None:
        for key in [key for key in self.rows if key[0] == scope]:
            del self.rows[key]

    async def delete(self, scope: str, mutation_id: str) -> None:
        self.rows.pop((scope, mutation_id), None)

    async def count(self, scope: str, operation: str, state: str) -> int:
        return sum(
            1
            for (row_scope, _), row in self.rows.items()
            if row_scope == scope and row.operation == operation and row.state == state
        )


class FakeUnitOfWork:
    """One transaction over a copy of the committed state; ``commit`` writes it back."""

    def __init__(self, database: FakeDatabase) -> None:
        self._database = database
        self.receipts = FakeReceipts(dict(database.receipts))

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._database.receipt_reads.append(self.receipts.reads)

    async def commit(self) -> None:
        self._database.receipts = dict(self.receipts.rows)
        self._database.commits += 1


class FakeUnitOfWorkFactory:
    def __init__(self) -> None:
        self.database = FakeDatabase()

    def __call__(self) -> FakeUnitOfWork:
        return FakeUnitOfWork(self.database)
