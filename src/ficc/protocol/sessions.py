"""The sessions of one endpoint, sans-IO: what a stranger may hold, and which session is whose.

Anyone who can reach the UDP port may try a handshake, so what a stranger can hold is counted
here, and so that strangers cannot lock out friends the places are kept fair (G3, G5):

- before TLS only the source address is known: a connection is counted against a cap per
  source address and a cap for all TLS handshakes; both are held for a TLS handshake only
  (milliseconds; a silent one is dropped after ``SessionLimits.silent_seconds``);
- after TLS the HyperNet ID is proven: a paired ID leaves those places and is bounded only by
  its own connections per pairing, so strangers never take a paired peer's place; a stranger
  takes one of ``MAX_HANDSHAKES_IN_PROGRESS`` places (its source still counted) until its
  handshake ends;
- sessions without a pairing are bounded in total; a new one past the cap closes the idlest
  unpaired session of the source that holds the most (:func:`unpaired_to_evict`), rather than
  being refused.

Sessions are kept per HyperNet ID and pairing generation and per direction: a newer session
closes the older one of its direction, so a peer that reconnects (a restart, a new address) is
served at once rather than after its dead session's heartbeats lapse. Requests go on the
newest open session of either direction. The transport closes the sessions
:meth:`SessionTable.register` returns, and calls :meth:`SessionTable.forget` once one closed.
No clock: times are arguments.
"""

from __future__ import annotations

import ipaddress
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Generic, TypeVar

from ficc.base.errors import FiccError, LimitExceeded, PeerUnreachable

MAX_TLS_HANDSHAKES: Final = 64
"""Incoming connections still in their TLS handshake, from every source together; the next
is refused before TLS. Each is held milliseconds (at most the silent deadline)."""
MAX_HANDSHAKES_PER_SOURCE: Final = 4
"""Handshakes in progress from one source address (an IPv4 address, an IPv6 /64) that are
not yet known to be a paired HyperNet ID; the next from that source is refused before TLS."""
MAX_HANDSHAKES_IN_PROGRESS: Final = 16
"""Handshakes in progress of HyperNet IDs without a pairing, after TLS; the next stranger is
refused. Paired HyperNet IDs never count here."""
MAX_CONNECTIONS_PER_HYPERNET_ID: Final = 2
"""Incoming connections from one HyperNet ID, established or handshaking, for each of its
pairings and for generation 0 (a HyperNet ID never paired: 2 in all). A newer session closes
the older one of its generation, so one is established and one may be replacing it."""
MAX_UNPAIRED_SESSIONS: Final = 32
"""Incoming sessions of HyperNet IDs without a pairing; one more closes the idlest unpaired
session of the source holding the most (each also idles out after ``UNPAIRED_IDLE_SECONDS``)."""
IPV6_SOURCE_PREFIX: Final = 64
"""An IPv6 source is its /64: one host is commonly given a whole /64."""
CONNECT_BACKOFF_SECONDS: Final = 0.1
"""A refused or failed connect is tried again after 0.1 s, then 0.2, 0.4 … s (doubling, at most
``MAX_CONNECT_BACKOFF_SECONDS``), as long as the connect deadline allows: a peer whose handshake
places are briefly full is reached. No request has been sent, so nothing is replayed."""
MAX_CONNECT_BACKOFF_SECONDS: Final = 1.6

SessionKey = tuple[str, int]
"""A session's place in the table: the peer's HyperNet ID and the pairing generation."""

S = TypeVar("S")


def source_of(address: str) -> str:
    """The source an incoming ``ip:port`` (or ``[ip]:port``) is counted under: the IPv4
    address, the IPv6 /64 (an IPv4-mapped one as IPv4); anything else as it is."""
    host = address.rpartition(":")[0] if address.count(":") == 1 else address
    host = host.removeprefix("[").split("]", 1)[0]
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/{IPV6_SOURCE_PREFIX}", strict=False))
    return str(ip)


def connect_backoff_seconds(attempt: int) -> float:
    """The pause after failed connect attempt ``attempt`` (0 first): 0.1, 0.2, 0.4 … 1.6 s."""
    return float(min(CONNECT_BACKOFF_SECONDS * 2.0**attempt, MAX_CONNECT_BACKOFF_SECONDS))


@dataclass
class HandshakePlace:
    """One incoming handshake's hold on the counts, from before TLS to its end."""

    source: str
    stage: str = "tls"
    """``tls`` (TLS in progress), ``stranger`` or ``paired`` (after TLS), ``ended``."""
    hypernet_id: str | None = None
    """Set once :meth:`SessionTable.admit` counted it against its HyperNet ID."""


@dataclass(frozen=True)
class UnpairedSession:
    """What the eviction rule needs of an unpaired session."""

    key: SessionKey
    source: str
    idle_since: float
    """When it last carried a request (or opened)."""


def unpaired_to_evict(sessions: Sequence[UnpairedSession]) -> UnpairedSession | None:
    """The session to close for a new one: the idlest of the source holding the most
    (ties: the source whose idlest is idlest). A source flooding unpaired sessions thus
    loses its own before anyone else's."""
    if not sessions:
        return None
    by_source: dict[str, list[UnpairedSession]] = {}
    for session in sessions:
        by_source.setdefault(session.source, []).append(session)
    heaviest = max(
        by_source.values(),
        key=lambda group: (len(group), -min(s.idle_since for s in group)),
    )
    return min(heaviest, key=lambda s: s.idle_since)


@dataclass(eq=False)
class Entry(Generic[S]):
    """One registered session; the transport keeps it and sets ``idle_since``."""

    key: SessionKey
    incoming: bool
    session: S
    source: str | None
    idle_since: float
    """When the peer's last request ended (or the session opened)."""


REMEMBERED_NONCES: Final = 65536
"""Remote challenge nonces an endpoint remembers (the oldest forgotten first)."""


class NonceMemory:
    """Remote challenge nonces seen recently, over every session: a repeated one is a replay."""

    def __init__(self, capacity: int = REMEMBERED_NONCES) -> None:
        self._seen: OrderedDict[bytes, None] = OrderedDict()
        self._capacity = capacity

    def fresh(self, nonce: bytes) -> bool:
        """True the first time ``nonce`` is offered; remembers it."""
        if nonce in self._seen:
            return False
        self._seen[nonce] = None
        if len(self._seen) > self._capacity:
            self._seen.popitem(last=False)
        return True


REPLACED: Final = "a newer connection with the peer replaced this one"
MADE_ROOM: Final = "this cluster made room for a newer session without a pairing"


class SessionTable(Generic[S]):
    """The handshake counts behind the caps, and the sessions per key and direction."""

    def __init__(self) -> None:
        self._incoming: dict[SessionKey, Entry[S]] = {}
        self._outgoing: dict[SessionKey, Entry[S]] = {}
        self._current: dict[SessionKey, Entry[S]] = {}
        self._tls = 0
        self._strangers = 0
        self._from: dict[str, int] = {}
        self._handshakes_of: dict[str, int] = {}
        self.refused_connections = 0

    # -- handshakes -------------------------------------------------------------------------

    def begin_handshake(self, source: str) -> HandshakePlace | None:
        """Count one more incoming connection from ``source`` before its TLS handshake, or
        None past the caps (refuse it before TLS)."""
        if self._tls >= MAX_TLS_HANDSHAKES or (
            self._from.get(source, 0) >= MAX_HANDSHAKES_PER_SOURCE
        ):
            self.refused_connections += 1
            return None
        self._tls += 1
        self._from[source] = self._from.get(source, 0) + 1
        return HandshakePlace(source)

    def identify(self, place: HandshakePlace, *, paired: bool) -> None:
        """TLS proved the HyperNet ID: a paired one leaves the stranger counts; a stranger
        takes a stranger place, or LimitExceeded when all are taken (the place is ended)."""
        assert place.stage == "tls"
        self._tls -= 1
        if paired:
            self._leave_source(place.source)
            place.stage = "paired"
            return
        if self._strangers >= MAX_HANDSHAKES_IN_PROGRESS:
            self._leave_source(place.source)
            place.stage = "ended"
            self.refused_connections += 1
            raise LimitExceeded(
                "too many handshakes in progress; try again shortly",
                details={"limit": "handshakes_in_progress"},
            )
        self._strangers += 1
        place.stage = "stranger"

    def admit(self, place: HandshakePlace, hypernet_id: str, *, pairings: int) -> None:
        """Count ``place`` against ``hypernet_id`` (with ``pairings`` pairings recorded
        here) until :meth:`end_handshake`, or LimitExceeded past its connections."""
        connections = self._handshakes_of.get(hypernet_id, 0) + sum(
            1 for owner, _ in self._incoming if owner == hypernet_id
        )
        if connections >= MAX_CONNECTIONS_PER_HYPERNET_ID * (1 + pairings):
            raise LimitExceeded(
                "too many connections from this HyperNet ID",
                details={"limit": "connections_per_hypernet_id"},
            )
        self._handshakes_of[hypernet_id] = self._handshakes_of.get(hypernet_id, 0) + 1
        place.hypernet_id = hypernet_id

    def end_handshake(self, place: HandshakePlace) -> None:
        """The handshake ended, whichever way: free what it still held (idempotent)."""
        if place.stage == "tls":
            self._tls -= 1
            self._leave_source(place.source)
        elif place.stage == "stranger":
            self._strangers -= 1
            self._leave_source(place.source)
        place.stage = "ended"
        if place.hypernet_id is not None:
            left = self._handshakes_of.pop(place.hypernet_id) - 1
            if left:
                self._handshakes_of[place.hypernet_id] = left
            place.hypernet_id = None

    def _leave_source(self, source: str) -> None:
        left = self._from.pop(source) - 1
        if left:
            self._from[source] = left

    # -- sessions ---------------------------------------------------------------------------

    def register(
        self,
        key: SessionKey,
        session: S,
        *,
        incoming: bool,
        now: float,
        source: str | None = None,
    ) -> tuple[Entry[S], list[tuple[S, FiccError]]]:
        """Make ``session`` its key's; the sessions to close (and why): the older one of the
        same direction, and past :data:`MAX_UNPAIRED_SESSIONS` the one :func:`unpaired_to_evict`
        picks."""
        entry = Entry(key, incoming, session, source, now)
        same_direction = self._incoming if incoming else self._outgoing
        older = same_direction.get(key)
        same_direction[key] = entry
        self._current[key] = entry
        closing: list[tuple[S, FiccError]] = []
        if older is not None:
            closing.append((older.session, PeerUnreachable(REPLACED)))
        if incoming and key[1] == 0:
            victim = self._unpaired_to_close(key)
            if victim is not None:
                closing.append((victim.session, PeerUnreachable(MADE_ROOM)))
        return entry, closing

    def _unpaired_to_close(self, arriving: SessionKey) -> Entry[S] | None:
        others = {k: e for k, e in self._incoming.items() if k[1] == 0 and k != arriving}
        if len(others) < MAX_UNPAIRED_SESSIONS:
            return None
        victim = unpaired_to_evict(
            [UnpairedSession(k, e.source or k[0], e.idle_since) for k, e in others.items()]
        )
        return None if victim is None else others[victim.key]

    def forget(self, entry: Entry[S]) -> None:
        """``entry``'s session closed: requests go on the other direction's, if open."""
        for entries in (self._incoming, self._outgoing):
            if entries.get(entry.key) is entry:
                del entries[entry.key]
        if self._current.get(entry.key) is entry:
            del self._current[entry.key]
            other = self._incoming.get(entry.key) or self._outgoing.get(entry.key)
            if other is not None:
                self._current[entry.key] = other

    def current(self, key: SessionKey) -> S | None:
        """The session requests to ``key`` go on: the newest open one of either direction."""
        entry = self._current.get(key)
        return None if entry is None else entry.session

    def of(self, key: SessionKey) -> list[S]:
        """Every session of ``key``, both directions."""
        entries = (self._incoming.get(key), self._outgoing.get(key))
        return [entry.session for entry in entries if entry is not None]

    def everyone(self) -> list[S]:
        """Every registered session."""
        return [e.session for e in (*self._incoming.values(), *self._outgoing.values())]

    def __len__(self) -> int:
        return len(self._incoming) + len(self._outgoing)
