"""What one HyperNet ID may hold of the port: two connections per pairing it has, plus two."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from ficc.adapters.hypernet.admission import MAX_CONNECTIONS_PER_HYPERNET_ID, Admission
from ficc.base.errors import LimitExceeded

PEER = "ab" * 32


class _Open:
    """An established incoming session, as the admission sees it: open or closed."""

    def __init__(self) -> None:
        self.closed = asyncio.Event()


def _admit(admission: Admission, pairings: int) -> Any:
    return admission.admitted(PEER, pairings=pairings)


@pytest.mark.parametrize("pairings", [0, 1, 3])
def test_each_pairing_and_generation_zero_may_hold_two_connections(pairings: int) -> None:
    incoming: dict[tuple[str, int], Any] = {}
    admission = Admission(cast(Any, incoming))
    allowed = MAX_CONNECTIONS_PER_HYPERNET_ID * (1 + pairings)
    for generation in range(1 + pairings):
        incoming[(PEER, generation)] = _Open()
    with _admit(admission, pairings):  # one reconnection of each, one after another
        pass
    held = [_admit(admission, pairings) for _ in range(allowed - len(incoming))]
    for place in held:
        place.__enter__()
    with pytest.raises(LimitExceeded, match="too many connections"):
        _admit(admission, pairings).__enter__()
    for place in held:
        place.__exit__(None, None, None)
    with _admit(admission, pairings):
        pass


def test_a_closed_session_holds_no_place() -> None:
    ended = _Open()
    ended.closed.set()
    admission = Admission(cast(Any, {(PEER, 0): ended, (PEER, 7): _Open()}))
    with _admit(admission, 0), pytest.raises(LimitExceeded):
        _admit(admission, 0).__enter__()
