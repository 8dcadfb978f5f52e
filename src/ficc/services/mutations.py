"""Mutation receipts as a capability of the unit of work.

``begin(uow, key)`` reads a mutation's receipt once per transaction and hands back a
:class:`MutationScope`: whether it is a replay (and of what), and the three ways to write it
(``mark_uncertain`` before an effect whose outcome could be lost, ``complete`` with the
effect, ``refuse`` when nothing happened). The receipt and the effect it records commit in
one transaction where the effect is a database change, so neither exists without the other.

A completed receipt keeps the answer itself: exactly what the caller is shown (``shown``,
as plain JSON), never a record to render again. A replay returns those values, so its bytes
are the first answer's, whatever became of the record since.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import weakref
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final

from ficc.base.errors import ErrorShape, FiccError, MutationConflict, error_from_code, render
from ficc.base.json_types import JSONObject
from ficc.domain.mutations import MutationReceipt, ReceiptState, arguments_sha256
from ficc.services.ports import Clock, UnitOfWork

UNCERTAIN: Final = ReceiptState.UNCERTAIN
COMPLETED: Final = ReceiptState.COMPLETED
REFUSED: Final = ReceiptState.REFUSED

Shown = Callable[[Mapping[str, object]], Mapping[str, object]]
"""What the caller of a mutation is shown of its result (a peer: its own view of a service)."""


def _as_is(result: Mapping[str, object]) -> Mapping[str, object]:
    return result


@dataclass(frozen=True)
class MutationKey:
    """Where a mutation_id lives (a project locally, a grant remotely) and what it asked."""

    scope: str
    mutation_id: str
    operation: str
    arguments_sha256: str
    shown: Shown = field(default=_as_is, compare=False, repr=False)
    """What the caller is shown of a result: the receipt keeps exactly that as the answer."""

    @classmethod
    def of(
        cls, scope: str, mutation_id: str, operation: str, arguments: object, shown: Shown = _as_is
    ) -> MutationKey:
        return cls(scope, mutation_id, operation, arguments_sha256(operation, arguments), shown)

    @classmethod
    def local(
        cls, project: str, mutation_id: str, operation: str, arguments: object
    ) -> MutationKey:
        """A local caller's mutation (``Idempotency-Key``): its IDs live in its project."""
        return cls.of(f"local:{project}", mutation_id, operation, arguments)

    @classmethod
    def grant(
        cls,
        grant_id: str,
        mutation_id: str,
        operation: str,
        arguments: object,
        shown: Shown = _as_is,
    ) -> MutationKey:
        """A peer's mutation: its IDs live in the grant, and go when the grant is retired."""
        return cls.of(grant_scope(grant_id), mutation_id, operation, arguments, shown)


def grant_scope(grant_id: str) -> str:
    """The receipt scope of a grant's remote mutations."""
    return f"grant:{grant_id}"


class InFlight:
    """The tries of each mutation in this process, run one at a time.

    A retry sent while the first try still runs waits for it, then replays the answer its
    receipt keeps; it never reads an answer the first try has yet to give (a stop's, once its
    replicas ended).
    """

    def __init__(self) -> None:
        self._locks: dict[tuple[str, str], tuple[asyncio.Lock, int]] = {}

    @contextlib.asynccontextmanager
    async def one_at_a_time(self, key: MutationKey) -> AsyncIterator[None]:
        name = (key.scope, key.mutation_id)
        lock, users = self._locks.get(name, (asyncio.Lock(), 0))
        self._locks[name] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[name]
            if users == 1:
                del self._locks[name]
            else:
                self._locks[name] = (lock, users - 1)

    def __len__(self) -> int:
        """How many mutations have a try running or waiting (none leak past their tries)."""
        return len(self._locks)


async def count_held(uow: UnitOfWork, grant_id: str, operation: str) -> int:
    """The creations of ``operation`` that count against a grant's cap: every one completed
    (whatever became of its record since) and every one still uncertain.

    The grant's row is held first, so concurrent creations under one grant count one after
    another, each seeing the others' receipts (else each could take the last place).
    """
    await uow.grants.lock(grant_id)
    scope = grant_scope(grant_id)
    completed = await uow.receipts.count(scope, operation, ReceiptState.COMPLETED)
    return completed + await uow.receipts.count(scope, operation, ReceiptState.UNCERTAIN)


class MutationScope:
    """One mutation inside one transaction: its receipt as read at ``begin``, then written."""

    def __init__(self, uow: UnitOfWork, key: MutationKey, receipt: MutationReceipt | None) -> None:
        self._uow = uow
        self.key = key
        self._receipt = receipt

    @property
    def state(self) -> ReceiptState | None:
        return None if self._receipt is None else ReceiptState(self._receipt.state)

    @property
    def replayed(self) -> bool:
        """A completed earlier try: its result is the answer, and nothing runs again."""
        return self.state == ReceiptState.COMPLETED

    @property
    def result(self) -> JSONObject | None:
        """The answer a completed earlier try gave, as it gave it."""
        return None if self._receipt is None or not self.replayed else self._receipt.result

    @property
    def refusal(self) -> FiccError | None:
        """The refusal an earlier try was given, to raise again; None when there was none."""
        if self._receipt is None or self.state != ReceiptState.REFUSED:
            return None
        error = (self._receipt.result or {}).get("error") or {}
        if not isinstance(error, dict):
            error = {}
        details = error.get("details")
        return error_from_code(
            str(error.get("code", "conflict")),
            str(error.get("message", "this mutation was refused")),
            details if isinstance(details, dict) else None,
        )

    async def mark_uncertain(self, now: datetime) -> None:
        """Before an effect whose answer may be lost: the mutation may have happened."""
        await self._write(ReceiptState.UNCERTAIN, None, now)

    async def complete(self, result: Mapping[str, object], now: datetime) -> JSONObject:
        """With the effect, in its transaction: the answer, as the caller is shown ``result``;
        a retry replays exactly it.

        Again on a completed receipt, before anyone was answered, it replaces the answer: a
        change whose answer is known only after its commit (a stop, once its replicas ended)
        keeps the answer its caller is then given.
        """
        answer = canonical_answer(self.key.shown(result))
        await self._write(ReceiptState.COMPLETED, answer, now)
        return canonical_answer(answer)

    async def mark_not_applied(self, now: datetime) -> None:
        """Inspection found an uncertain mutation with nothing of it in flight: its effect
        commits with its receipt, so nothing happened; a retry applies it."""
        await self._write(ReceiptState.NOT_APPLIED, None, now)

    async def refuse(self, error: FiccError, now: datetime) -> None:
        """Nothing happened, certainly: the mutation holds no capacity and leaves no doubt."""
        await self._write(ReceiptState.REFUSED, render(error, ErrorShape.FICC), now)

    async def _write(self, state: ReceiptState, result: JSONObject | None, now: datetime) -> None:
        key = self.key
        receipt = MutationReceipt(
            scope=key.scope,
            mutation_id=key.mutation_id,
            operation=key.operation,
            arguments_sha256=key.arguments_sha256,
            state=state.value,
            result=result,
            created_at=self._receipt.created_at if self._receipt is not None else now,
            completed_at=now if state == ReceiptState.COMPLETED else None,
        )
        await self._uow.receipts.put(receipt)
        self._receipt = receipt


def canonical_answer(answer: Mapping[str, object]) -> JSONObject:
    """``answer`` as plain JSON values: what a stored receipt gives back, to the last byte."""
    plain = json.loads(json.dumps(answer, allow_nan=False))
    assert isinstance(plain, dict)
    return plain


_begun: weakref.WeakKeyDictionary[UnitOfWork, dict[tuple[str, str], MutationScope]] = (
    weakref.WeakKeyDictionary()
)
"""The scopes begun in each open transaction: a second ``begin`` of one key reads nothing."""


async def begin(uow: UnitOfWork, key: MutationKey) -> MutationScope:
    """The mutation ``key`` in this transaction; a reused mutation_id with other arguments
    is a conflict."""
    begun = _begun.setdefault(uow, {})
    scope = begun.get((key.scope, key.mutation_id))
    if scope is None:
        scope = MutationScope(uow, key, await uow.receipts.get(key.scope, key.mutation_id))
        begun[(key.scope, key.mutation_id)] = scope
    earlier = scope._receipt
    if earlier is not None and (earlier.operation, earlier.arguments_sha256) != (
        key.operation,
        key.arguments_sha256,
    ):
        raise MutationConflict(
            "this mutation_id was used with other arguments; use a new mutation_id",
            details={"mutation_id": key.mutation_id, "operation": earlier.operation},
        )
    return scope


async def replay(uow: UnitOfWork, key: MutationKey) -> JSONObject | None:
    """The retained result of an earlier try, None if there is none to replay."""
    return (await begin(uow, key)).result


async def record(
    uow: UnitOfWork, clock: Clock, key: MutationKey, *, state: str, result: JSONObject | None
) -> JSONObject | None:
    """Write the receipt of ``key`` begun in this transaction; a completed one's answer."""
    scope = await begin(uow, key)
    if ReceiptState(state) == ReceiptState.COMPLETED:
        assert result is not None
        return await scope.complete(result, clock())
    await scope.mark_uncertain(clock())
    return None
