"""The endpoint's session table, sans-IO: what one HyperNet ID may hold of the port (two
connections per pairing it has, plus two), what strangers may hold of the places friends need
(G3, G5), and which session replaces which."""

from __future__ import annotations

import pytest

from ficc.base.errors import LimitExceeded
from ficc.protocol.sessions import (
    MADE_ROOM,
    MAX_CONNECTIONS_PER_HYPERNET_ID,
    MAX_HANDSHAKES_IN_PROGRESS,
    MAX_HANDSHAKES_PER_SOURCE,
    MAX_TLS_HANDSHAKES,
    MAX_UNPAIRED_SESSIONS,
    REPLACED,
    HandshakePlace,
    SessionTable,
    UnpairedSession,
    connect_backoff_seconds,
    source_of,
    unpaired_to_evict,
)

PEER = "ab" * 32
Admission = SessionTable[str]


def _admit(table: Admission, pairings: int) -> HandshakePlace:
    """A paired (or stranger) handshake of ``PEER`` past TLS, counted against its ID."""
    place = table.begin_handshake("192.0.2.1")
    assert place is not None
    table.identify(place, paired=pairings > 0)
    try:
        table.admit(place, PEER, pairings=pairings)
    except LimitExceeded:
        table.end_handshake(place)
        raise
    return place


@pytest.mark.parametrize("pairings", [0, 1, 3])
def test_each_pairing_and_generation_zero_may_hold_two_connections(pairings: int) -> None:
    table = Admission()
    allowed = MAX_CONNECTIONS_PER_HYPERNET_ID * (1 + pairings)
    for generation in range(1 + pairings):
        table.register((PEER, generation), f"g{generation}", incoming=True, now=0.0)
    table.end_handshake(_admit(table, pairings))  # one reconnection of each, one after another
    held = [_admit(table, pairings) for _ in range(allowed - (1 + pairings))]
    with pytest.raises(LimitExceeded, match="too many connections"):
        _admit(table, pairings)
    for place in held:
        table.end_handshake(place)
        table.end_handshake(place)  # ending twice frees once
    table.end_handshake(_admit(table, pairings))


def test_a_forgotten_session_holds_no_place() -> None:
    table = Admission()
    ended, _ = table.register((PEER, 0), "ended", incoming=True, now=0.0)
    table.register((PEER, 7), "open", incoming=True, now=0.0)
    table.forget(ended)
    _admit(table, 0)
    with pytest.raises(LimitExceeded):
        _admit(table, 0)


def test_a_newer_session_closes_the_older_of_its_direction_and_requests_follow_it() -> None:
    table = Admission()
    first, closing = table.register((PEER, 3), "in-1", incoming=True, now=0.0)
    assert closing == []
    outgoing, closing = table.register((PEER, 3), "out-1", incoming=False, now=1.0)
    assert closing == []  # the other direction lives on beside it
    assert table.current((PEER, 3)) == "out-1"
    second, closing = table.register((PEER, 3), "in-2", incoming=True, now=2.0)
    assert [(s, e.message) for s, e in closing] == [("in-1", REPLACED)]
    table.forget(first)  # the replaced one closes: nothing of the newer is lost
    assert sorted(table.of((PEER, 3))) == ["in-2", "out-1"]
    table.forget(second)
    assert table.current((PEER, 3)) == "out-1"  # requests go on the other direction's
    table.forget(outgoing)
    assert table.current((PEER, 3)) is None
    assert len(table) == 0


# -- fairness (G3): strangers cannot lock out friends ---------------------------------------


def _fill_stranger_places(admission: Admission) -> list[HandshakePlace]:
    """Every stranger place taken, from as few sources as the per-source cap allows."""
    places = []
    for index in range(MAX_HANDSHAKES_IN_PROGRESS):
        place = admission.begin_handshake(f"203.0.113.{index // MAX_HANDSHAKES_PER_SOURCE}")
        assert place is not None
        admission.identify(place, paired=False)
        places.append(place)
    return places


def test_one_source_holds_at_most_its_places_and_another_source_still_gets_in() -> None:
    admission = Admission()
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
    admission = Admission()
    _fill_stranger_places(admission)
    stranger = admission.begin_handshake("192.0.2.1")
    assert stranger is not None
    with pytest.raises(LimitExceeded, match="handshakes in progress"):
        admission.identify(stranger, paired=False)  # refused after TLS, place freed
    friend = admission.begin_handshake("192.0.2.1")
    assert friend is not None
    admission.identify(friend, paired=True)


def test_a_paired_connection_leaves_its_source_places_after_tls() -> None:
    admission = Admission()
    for _ in range(MAX_HANDSHAKES_PER_SOURCE):
        place = admission.begin_handshake("192.0.2.9")
        assert place is not None
        admission.identify(place, paired=True)
    assert admission.begin_handshake("192.0.2.9") is not None


def test_tls_handshakes_are_capped_in_total() -> None:
    admission = Admission()
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
    assert unpaired_to_evict([*flood, *others, newcomer]) == flood[0]
    assert unpaired_to_evict(others) == others[0]
    assert unpaired_to_evict([]) is None


def test_past_the_unpaired_cap_a_newcomer_closes_the_idlest_of_the_busiest_source() -> None:
    table = Admission()
    for index in range(MAX_UNPAIRED_SESSIONS - 1):
        _, closing = table.register(
            (f"{index:064x}", 0),
            f"flood-{index}",
            incoming=True,
            now=10.0 + index,
            source="198.51.100.7",
        )
        assert closing == []
    _, closing = table.register(("aa" * 32, 0), "friend", incoming=True, now=1.0, source="a")
    assert closing == []  # exactly at the cap
    _, closing = table.register(("cc" * 32, 0), "new", incoming=True, now=99.0, source="b")
    assert [(s, e.message) for s, e in closing] == [("flood-0", MADE_ROOM)]
    _, closing = table.register(("dd" * 32, 5), "paired", incoming=True, now=99.0, source="b")
    assert closing == []  # paired sessions are never counted nor closed for room


def test_a_refused_connect_is_tried_again_after_a_doubling_pause() -> None:
    pauses = [connect_backoff_seconds(attempt) for attempt in range(7)]
    assert pauses == [0.1, 0.2, 0.4, 0.8, 1.6, 1.6, 1.6]
