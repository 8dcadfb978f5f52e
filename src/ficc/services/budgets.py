"""Budgets of metered holders: reserve, then settle; rolling windows.

Where each rule is kept, and why:

- ``tokens`` (the grant's lifetime budget) is kept in the database, on the grant's row: a
  reservation reads what is settled and reserved, and adds its share with one conditional
  UPDATE (settled + reserved + share <= tokens), which takes the row's lock on PostgreSQL
  and is checked again there against the row a concurrent UPDATE left: concurrent requests,
  on any number of connections, can never both take the last tokens. Settling gives back
  what was reserved and adds the true count, never more than the reservation.
- ``tokens_per_minute`` and ``requests_per_minute`` are rolling 60 s windows kept in this
  process: one process owns the HyperNet endpoint that serves a grant, the windows change
  on every request (a row write per request would cost more than the request's relay), and
  the event loop makes each check-and-take one step (nothing awaits between them). A restart
  forgets the windows, never the budget.

The same rules meter a restricted local token on the requesting cluster (its row in
``token_limits``, its windows here): a :class:`Budget` is one holder's rules, and a request
is reserved in every budget it counts against (a grant's; a token's and each of its
creators') in one transaction, or in none.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final, Protocol, TypedDict

from ficc.domain import metering as m
from ficc.domain.grants import Grant, GrantTerms
from ficc.services.ports import BudgetRows, Clock, UnitOfWork, UnitOfWorkFactory

RESERVE_TRIES: Final = 3
"""Reads and conditional UPDATEs one reservation may take when others race it."""


class WindowState(TypedDict):
    """A rate window as the API shows it."""

    used: int
    remaining: int
    reset_seconds: float


class Rules(Protocol):
    """The metered rules as a grant's terms and a token's restrictions both keep them."""

    @property
    def tokens(self) -> int | None: ...
    @property
    def tokens_per_minute(self) -> int | None: ...
    @property
    def requests_per_minute(self) -> int | None: ...


@dataclass(frozen=True)
class Budget:
    """One holder's metered rules, a grant's or a restricted token's: where its row is kept
    (``rows``), the key of its windows, and how its refusals name it."""

    holder: str
    rows: Callable[[UnitOfWork], BudgetRows]
    tokens: int | None
    tokens_per_minute: int | None
    requests_per_minute: int | None
    noun: str = "grant"
    rule: str = ""
    """What ``details.limit`` starts with: nothing for a grant's rule, ``token.`` for a token's."""

    @classmethod
    def of(
        cls,
        holder: str,
        rows: Callable[[UnitOfWork], BudgetRows],
        rules: Rules,
        *,
        noun: str = "grant",
        rule: str = "",
    ) -> Budget:
        """The budget of a holder whose rules are kept as ``rules`` keeps them."""
        return cls(
            holder,
            rows,
            rules.tokens,
            rules.tokens_per_minute,
            rules.requests_per_minute,
            noun=noun,
            rule=rule,
        )

    @property
    def limits_tokens(self) -> bool:
        return self.tokens is not None or self.tokens_per_minute is not None


def grant_budget(grant: Grant) -> Budget:
    return Budget.of(grant.id, _grant_rows, grant.terms)


def _grant_rows(uow: UnitOfWork) -> BudgetRows:
    return uow.usage


@dataclass
class Holding:
    """What one request holds in its budgets: the reservation, each window entry it took
    and what each row holds reserved for it."""

    budgets: tuple[Budget, ...]
    reservation: m.Reservation
    token_entries: list[tuple[str, list[float]]] = field(default_factory=list)
    reserved: dict[str, int] = field(default_factory=dict)


@dataclass
class _Windows:
    requests: m.RollingWindow = field(default_factory=m.RollingWindow)
    tokens: m.RollingWindow = field(default_factory=m.RollingWindow)


class Budgets:
    """Every holder's budgets on this cluster: its rows' reservations and its windows."""

    def __init__(self, uow_factory: UnitOfWorkFactory, clock: Clock) -> None:
        self._uow_factory = uow_factory
        self._clock = clock
        self._windows: dict[str, _Windows] = {}

    def _seconds(self) -> float:
        return self._clock().timestamp()

    def _of(self, grant_id: str) -> _Windows:
        windows = self._windows.get(grant_id)
        if windows is None:
            windows = self._windows[grant_id] = _Windows()
        return windows

    def hold_request(self, terms: GrantTerms, grant_id: str) -> list[float] | None:
        """Take one request of ``requests_per_minute``, or refuse with ``Retry-After``."""
        limit = terms.requests_per_minute
        if limit is None:
            return None
        held = self.hold_requests(
            [Budget(grant_id, _grant_rows, None, None, limit)],
        )
        return held[0][1]

    def hold_requests(self, budgets: list[Budget]) -> list[tuple[str, list[float]]]:
        """Take one request in the ``requests_per_minute`` of every budget that has one, or
        refuse naming the first that is full (checked all before any is taken)."""
        now = self._seconds()
        limited = [b for b in budgets if b.requests_per_minute is not None]
        for budget in limited:
            limit = budget.requests_per_minute
            assert limit is not None
            window = self._of(budget.holder).requests
            if window.total(now) + 1 > limit:
                raise m.window_refusal(
                    "requests_per_minute",
                    limit,
                    window.retry_after(now, 1, limit),
                    holder=budget.noun,
                    rule=budget.rule,
                )
        return [(b.holder, self._of(b.holder).requests.add(now, 1)) for b in limited]

    def release_request(self, grant_id: str, entry: list[float] | None) -> None:
        """A request refused after its window entry was taken gives it back."""
        if entry is not None:
            self._of(grant_id).requests.remove(entry)

    def release_requests(self, held: list[tuple[str, list[float]]]) -> None:
        for holder, entry in held:
            self._of(holder).requests.remove(entry)

    def windows_of(self, budget: Budget) -> dict[str, WindowState | None]:
        """A budget's windows as the API shows them: used, remaining, seconds to reset."""
        now = self._seconds()
        state: dict[str, WindowState | None] = {}
        windows = self._windows.get(budget.holder)
        for name, limit in (
            ("requests_per_minute", budget.requests_per_minute),
            ("tokens_per_minute", budget.tokens_per_minute),
        ):
            if limit is None:
                state[name] = None
                continue
            window = None
            if windows is not None:
                window = windows.requests if name == "requests_per_minute" else windows.tokens
            used = 0 if window is None else window.total(now)
            reset = 0.0 if window is None else window.reset_seconds(now)
            state[name] = {
                "used": used,
                "remaining": max(limit - used, 0),
                "reset_seconds": round(reset, 3),
            }
        return state

    def window_state(self, grant: Grant) -> dict[str, WindowState | None]:
        """The windows as the requester is shown them: used, remaining, seconds to reset."""
        return self.windows_of(grant_budget(grant))

    async def reserve(
        self,
        budgets: list[Budget],
        prompt_tokens: int,
        max_tokens: int | None,
        held: Mapping[str, int] | None = None,
    ) -> Holding:
        """Reserve a request's tokens in every budget (or in none, refusing naming the rule
        that has too little): the ``tokens_per_minute`` windows at once, in full (nothing
        awaits between their checks and the takes; lowered below if a budget leaves less),
        then the lifetime budgets in the database. ``held``: what each budget's row already
        holds for the request (its admission's hold), which a reservation within it takes
        without a transaction."""
        metered = tuple(b for b in budgets if b.limits_tokens)
        if not metered:
            # Nothing to hold: the request settles to whatever the engine counted.
            return Holding(tuple(budgets), m.Reservation(prompt_tokens, None))
        needed = m.least_needed(prompt_tokens, max_tokens)
        now = self._seconds()
        window_room: int | None = None
        windowed = [b for b in metered if b.tokens_per_minute is not None]
        for budget in windowed:
            limit = budget.tokens_per_minute
            assert limit is not None
            window = self._of(budget.holder).tokens
            room = limit - window.total(now)
            if room < needed:
                raise m.window_refusal(
                    "tokens_per_minute",
                    limit,
                    window.retry_after(now, min(needed, limit), limit),
                    holder=budget.noun,
                    rule=budget.rule,
                )
            window_room = room if window_room is None else min(window_room, room)
        entries: list[tuple[str, list[float]]] = []
        if window_room is not None:
            tentative = m.reserve(prompt_tokens, max_tokens, window_room)
            entries = [
                (b.holder, self._of(b.holder).tokens.add(now, tentative.tokens)) for b in windowed
            ]
        holding = Holding(tuple(budgets), m.Reservation(prompt_tokens, None), entries)
        try:
            budgeted = [b for b in metered if b.tokens is not None]
            if not budgeted:
                assert window_room is not None
                holding.reservation = m.reserve(prompt_tokens, max_tokens, window_room)
            else:
                holding.reservation = await self._reserve_rows(
                    holding, budgeted, prompt_tokens, max_tokens, window_room, held or {}
                )
        except BaseException:
            for holder, entry in entries:
                self._of(holder).tokens.remove(entry)
            raise
        for holder, entry in entries:
            self._of(holder).tokens.adjust(entry, holding.reservation.tokens)
        return holding

    async def _reserve_rows(
        self,
        holding: Holding,
        budgets: list[Budget],
        prompt_tokens: int,
        max_tokens: int | None,
        window_room: int | None,
        held: Mapping[str, int],
    ) -> m.Reservation:
        """The lifetime budgets: one conditional UPDATE per row that takes the share only if
        it still fits (see the module), all in one transaction. A bound given that fits costs
        nothing more; else each row is read, the share is what the least of them leaves, and
        a reservation that lost a race (a row took tokens between the read and the UPDATE)
        reads again and tries once more. A reservation within what every row holds for the
        request already takes no transaction; else the holds go back first, in the same
        transaction (a refusal rolls that back too: they stay the request's, to settle)."""
        within = _within_held(budgets, prompt_tokens, max_tokens, window_room, held)
        if within is not None:
            holding.reserved = {b.holder: held[b.holder] for b in budgets}
            return within
        needed = m.least_needed(prompt_tokens, max_tokens)
        async with self._uow_factory() as uow:
            for budget in budgets:
                if held.get(budget.holder):
                    await budget.rows(uow).reserve_tokens(
                        budget.holder, -held[budget.holder], limit=None
                    )
            if max_tokens is not None:
                # The common case, a bound given that fits: one statement a row, nothing read.
                wanted = m.reserve(prompt_tokens, max_tokens, window_room)
                if await _take_all(uow, budgets, wanted.tokens):
                    await uow.commit()
                    holding.reserved = {b.holder: wanted.tokens for b in budgets}
                    return wanted
            least: tuple[Budget, int] | None = None
            for _ in range(RESERVE_TRIES):
                least = None
                for budget in budgets:
                    assert budget.tokens is not None
                    standing = await budget.rows(uow).standing(budget.holder)
                    left = 0 if standing is None else standing.tokens_left(budget.tokens)
                    if least is None or left < least[1]:
                        least = (budget, left)
                assert least is not None
                if least[1] < needed:
                    break
                allowance = least[1] if window_room is None else min(least[1], window_room)
                reservation = m.reserve(prompt_tokens, max_tokens, allowance)
                if await _take_all(uow, budgets, reservation.tokens):
                    await uow.commit()
                    holding.reserved = {b.holder: reservation.tokens for b in budgets}
                    return reservation
        assert least is not None
        raise m.budget_refusal(needed, least[1], holder=least[0].noun, rule=least[0].rule)

    async def settle_rows(
        self, uow: UnitOfWork, holding: Holding, prompt_tokens: int, completion_tokens: int
    ) -> None:
        """Settle every budget's row (inside the caller's transaction) and its windows to
        the counts charged; each row gives back what it held for the request."""
        for budget in holding.budgets:
            await budget.rows(uow).settle_tokens(
                budget.holder,
                reserved=holding.reserved.get(budget.holder, 0),
                prompt_tokens=prompt_tokens,
                completion_tokens=completion_tokens,
            )
        holding.reserved = {}
        for holder, entry in holding.token_entries:
            self._of(holder).tokens.adjust(entry, prompt_tokens + completion_tokens)


def _within_held(
    budgets: list[Budget],
    prompt_tokens: int,
    max_tokens: int | None,
    window_room: int | None,
    held: Mapping[str, int],
) -> m.Reservation | None:
    """The reservation, when every budget's hold covers it; None when one does not."""
    if not budgets or not all(held.get(b.holder, 0) > 0 for b in budgets):
        return None
    least = min(held[b.holder] for b in budgets)
    if max_tokens is not None:
        wanted = m.reserve(prompt_tokens, max_tokens, window_room)
        return wanted if wanted.tokens <= least else None
    allowance = least if window_room is None else min(least, window_room)
    if allowance < m.least_needed(prompt_tokens, max_tokens):
        return None  # the rows are read: their refusal says what is left
    return m.reserve(prompt_tokens, None, allowance)


async def _take_all(uow: UnitOfWork, budgets: list[Budget], tokens: int) -> bool:
    """Reserve ``tokens`` on every budget's row, or (one does not fit) give back those taken
    in this transaction and say so."""
    taken: list[Budget] = []
    for budget in budgets:
        if not await budget.rows(uow).reserve_tokens(budget.holder, tokens, limit=budget.tokens):
            for other in taken:
                await other.rows(uow).reserve_tokens(other.holder, -tokens, limit=None)
            return False
        taken.append(budget)
    return True
