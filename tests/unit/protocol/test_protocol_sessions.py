"""The endpoint's session table, sans-IO: what one HyperNet ID may hold of the port (two
connections per pairing it has, plus two), what strangers may hold of the places friends need
(G3, G5), and which session replaces which."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from ficc.base.errors import LimitExceeded
from ficc.protocol.sessions import (
    MADE_ROOM,
    MAX_CONNECTIONS_PER_HYPERNET_ID,
    MAX_HANDSHAKES_IN_PROGRESS,
    MAX_HANDSHAKES_PER_SOURCE,
    MAX_TLS_HANDSHAKES,
    MAX_UNPAIRED_SESSIONS,
    REPLACED,
    Entry,
    HandshakePlace,
    NonceMemory,
    SessionKey,
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


PEERS = [f"{index:02x}" * 32 for index in range(40)]
SOURCES = ["192.0.2.1", "192.0.2.2", "198.51.100.7"]


class SessionsMachine(RuleBasedStateMachine):
    """Any order of handshakes, registrations and closes keeps the caps, frees every place
    it took, keeps one session per key and direction, and sends requests to a live one."""

    def __init__(self) -> None:
        super().__init__()
        self.table: SessionTable[int] = SessionTable()
        self.places: list[HandshakePlace] = []
        self.entries: dict[tuple[SessionKey, bool], Entry[int]] = {}
        self.serial = 0

    def _at(self, *stages: str) -> list[HandshakePlace]:
        return [place for place in self.places if place.stage in stages]

    @rule(source=st.sampled_from(SOURCES))
    def begin(self, source: str) -> None:
        held = [p for p in self._at("tls", "stranger") if p.source == source]
        full = len(self._at("tls")) >= MAX_TLS_HANDSHAKES or len(held) >= MAX_HANDSHAKES_PER_SOURCE
        place = self.table.begin_handshake(source)
        assert (place is None) == full
        if place is not None:
            self.places.append(place)

    @precondition(lambda self: self._at("tls"))
    @rule(data=st.data(), paired=st.booleans())
    def identify(self, data: st.DataObject, paired: bool) -> None:
        place = data.draw(st.sampled_from(self._at("tls")))
        if not paired and len(self._at("stranger")) >= MAX_HANDSHAKES_IN_PROGRESS:
            with pytest.raises(LimitExceeded):
                self.table.identify(place, paired=paired)
            assert place.stage == "ended"
            return
        self.table.identify(place, paired=paired)
        assert place.stage == ("paired" if paired else "stranger")

    @precondition(lambda self: [p for p in self._at("paired", "stranger") if not p.hypernet_id])
    @rule(data=st.data(), peer=st.sampled_from(PEERS[:3]), pairings=st.integers(0, 2))
    def admit(self, data: st.DataObject, peer: str, pairings: int) -> None:
        place = data.draw(
            st.sampled_from([p for p in self._at("paired", "stranger") if not p.hypernet_id])
        )
        held = sum(p.hypernet_id == peer for p in self.places) + sum(
            incoming and key[0] == peer for key, incoming in self.entries
        )
        if held >= MAX_CONNECTIONS_PER_HYPERNET_ID * (1 + pairings):
            with pytest.raises(LimitExceeded, match="too many connections"):
                self.table.admit(place, peer, pairings=pairings)
            return
        self.table.admit(place, peer, pairings=pairings)
        assert place.hypernet_id == peer

    @precondition(lambda self: self._at("tls", "stranger", "paired"))
    @rule(data=st.data())
    def end(self, data: st.DataObject) -> None:
        place = data.draw(st.sampled_from(self._at("tls", "stranger", "paired")))
        self.table.end_handshake(place)
        assert (place.stage, place.hypernet_id) == ("ended", None)

    @rule(
        peer=st.sampled_from(PEERS), generation=st.sampled_from([0, 0, 3]), incoming=st.booleans()
    )
    def register(self, peer: str, generation: int, incoming: bool) -> None:
        self.serial += 1
        key = (peer, generation)
        entry, closing = self.table.register(
            key, self.serial, incoming=incoming, now=float(self.serial), source=peer[:2]
        )
        older = self.entries.get((key, incoming))
        closed = [session for session, _ in closing]
        assert older is None or older.session in closed
        assert self.serial not in closed
        self.entries[(key, incoming)] = entry
        for place, known in list(self.entries.items()):
            if known.session in closed and known is not entry:  # the transport closes it
                self.table.forget(known)
                del self.entries[place]

    @precondition(lambda self: self.entries)
    @rule(data=st.data())
    def forget(self, data: st.DataObject) -> None:
        place = data.draw(st.sampled_from(sorted(self.entries)))
        self.table.forget(self.entries.pop(place))

    @invariant()
    def one_session_per_key_and_direction_and_requests_go_on_a_live_one(self) -> None:
        assert len(self.table) == len(self.entries)
        for key in {key for key, _ in self.entries} | {(PEERS[0], 0)}:
            live = [e.session for (k, _), e in self.entries.items() if k == key]
            assert sorted(self.table.of(key)) == sorted(live)
            current = self.table.current(key)
            assert (current is None) == (not live)
            assert current is None or current in live
        unpaired = [key for key, incoming in self.entries if incoming and key[1] == 0]
        assert len(unpaired) <= MAX_UNPAIRED_SESSIONS

    @invariant()
    def every_place_is_counted_once_and_freed_when_it_ends(self) -> None:
        assert self.table._tls == len(self._at("tls"))
        assert self.table._strangers == len(self._at("stranger"))
        for source in SOURCES:
            held = [p for p in self._at("tls", "stranger") if p.source == source]
            assert self.table._from.get(source, 0) == len(held)
        for peer in PEERS[:3]:
            admitted = sum(p.hypernet_id == peer for p in self.places)
            assert self.table._handshakes_of.get(peer, 0) == admitted


# 60 runs under the default profile, fewer under the fast tier's.
SessionsMachine.TestCase.settings = settings(
    max_examples=settings.default.max_examples * 3 // 5, stateful_step_count=60, deadline=None
)
test_sessions_machine = SessionsMachine.TestCase


def test_a_nonce_is_fresh_once_and_the_oldest_are_forgotten_first() -> None:
    nonces = NonceMemory(capacity=2)
    assert nonces.fresh(b"a")
    assert not nonces.fresh(b"a")  # a replayed challenge
    assert nonces.fresh(b"b")
    assert nonces.fresh(b"c")
    assert nonces.fresh(b"a")  # forgotten past the capacity
    assert not nonces.fresh(b"c")
