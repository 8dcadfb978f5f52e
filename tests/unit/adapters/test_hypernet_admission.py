"""What one HyperNet ID may hold of the port (two connections per pairing it has, plus two),
and what strangers may hold of the places friends need (G3)."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from ficc.adapters.hypernet.admission import (
    MAX_CONNECTIONS_PER_HYPERNET_ID,
    MAX_HANDSHAKES_IN_PROGRESS,
    MAX_HANDSHAKES_PER_SOURCE,
    MAX_TLS_HANDSHAKES,
    MAX_UNPAIRED_SESSIONS,
    Admission,
    HandshakePlace,
    UnpairedSession,
    source_of,
    unpaired_to_evict,
)
from ficc.adapters.hypernet.endpoint import connect_backoff_seconds
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


# -- fairness (G3): strangers cannot lock out friends ---------------------------------------


def _fill_stranger_places(admission: Admission) -> list[HandshakePlace]:
    """Every stranger place taken, from as few sources as the per-source cap allows."""
    places = []
    for index in range(MAX_HANDSHAKES_IN_PROGRESS):
        place = admission.begin_handshake(f"203.0.113.{index // MAX_HANDSHAKES_PER_SOURCE}")
        assert place is not None
        assert admission.identify(place, paired=False)
        places.append(place)
    return places


def test_one_source_holds_at_most_its_places_and_another_source_still_gets_in() -> None:
    admission = Admission({})
    held = [admission.begin_handshake("198.51.100.7") for _ in range(MAX_HANDSHAKES_PER_SOURCE)]
    assert all(held)
    assert admission.begin_handshake("198.51.100.7") is None
    assert admission.begin_handshake("198.51.100.8") is not None
    first = held[0]
    assert first is not None
    admission.end_handshake(first)
    admission.end_handshake(first)  # ending twice frees once
    assert admission.begin_handshake("198.51.100.7") is not None
    assert admission.begin_handshake("198.51.100.7") is None


def test_a_paired_hypernet_id_gets_in_while_strangers_hold_every_stranger_place() -> None:
    admission = Admission({})
    _fill_stranger_places(admission)
    stranger = admission.begin_handshake("192.0.2.1")
    assert stranger is not None
    assert not admission.identify(stranger, paired=False)  # refused after TLS, place freed
    friend = admission.begin_handshake("192.0.2.1")
    assert friend is not None
    assert admission.identify(friend, paired=True)


def test_a_paired_connection_leaves_its_source_places_after_tls() -> None:
    admission = Admission({})
    for _ in range(MAX_HANDSHAKES_PER_SOURCE):
        place = admission.begin_handshake("192.0.2.9")
        assert place is not None
        assert admission.identify(place, paired=True)
    assert admission.begin_handshake("192.0.2.9") is not None


def test_tls_handshakes_are_capped_in_total() -> None:
    admission = Admission({})
    for index in range(MAX_TLS_HANDSHAKES):
        assert admission.begin_handshake(f"10.0.{index}.1") is not None
    assert admission.begin_handshake("10.1.0.1") is None
    assert admission.refused_connections == 1


@pytest.mark.parametrize(
    ("address", "source"),
    [
        ("127.0.0.2:4433", "127.0.0.2"),
        ("[2001:db8:1:2:3:4:5:6]:4433", "2001:db8:1:2::/64"),
        ("[::ffff:192.0.2.5]:1", "192.0.2.5"),
        ("not an address", "not an address"),
    ],
)
def test_a_source_is_an_ipv4_address_or_an_ipv6_64(address: str, source: str) -> None:
    assert source_of(address) == source


def test_a_full_set_of_unpaired_sessions_closes_the_idlest_of_the_busiest_source() -> None:
    flood = [
        UnpairedSession((f"{index:064x}", 0), "198.51.100.7", idle_since=10.0 + index)
        for index in range(MAX_UNPAIRED_SESSIONS - 2)
    ]
    others = [
        UnpairedSession(("aa" * 32, 0), "192.0.2.1", idle_since=1.0),  # idlest of all
        UnpairedSession(("bb" * 32, 0), "192.0.2.2", idle_since=2.0),
    ]
    newcomer = UnpairedSession(("cc" * 32, 0), "192.0.2.3", idle_since=99.0)
    admission = Admission({})
    assert admission.unpaired_to_close(newcomer.key, [*flood[1:], *others, newcomer]) is None
    victim = admission.unpaired_to_close(newcomer.key, [*flood, *others, newcomer])
    assert victim == flood[0]  # the flooding source loses its own, not the idler friends
    assert unpaired_to_evict(others) == others[0]
    assert unpaired_to_evict([]) is None


def test_a_refused_connect_is_tried_again_after_a_doubling_pause() -> None:
    pauses = [connect_backoff_seconds(attempt) for attempt in range(7)]
    assert pauses == [0.1, 0.2, 0.4, 0.8, 1.6, 1.6, 1.6]
