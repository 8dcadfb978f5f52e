"""What a stranger can hold of the HyperNet port: handshakes, connections, unpaired sessions.

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

Every rule here is pure: no iroh, no clock (times are arguments).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from ficc.base.errors import LimitExceeded

if TYPE_CHECKING:
    from ficc.adapters.hypernet.session import PeerSession

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
pairings and for generation 0 (a HyperNet ID never paired: 2 in all); a newer session closes
the older one of its generation, so two exist only while a reconnection completes."""
MAX_UNPAIRED_SESSIONS: Final = 32
"""Incoming sessions of HyperNet IDs without a pairing; one more closes the idlest unpaired
session of the source holding the most (each also idles out after ``UNPAIRED_IDLE_SECONDS``)."""
IPV6_SOURCE_PREFIX: Final = 64
"""An IPv6 source is its /64: one host is commonly given a whole /64."""


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


@dataclass
class HandshakePlace:
    """One incoming handshake's hold on the counts, from before TLS to its end."""

    source: str
    stage: str = "tls"
    """``tls`` (TLS in progress), ``stranger`` or ``paired`` (after TLS), ``ended``."""


@dataclass(frozen=True)
class UnpairedSession:
    """What the eviction rule needs of an unpaired session."""

    key: tuple[str, int]
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


class Admission:
    """The counts behind the caps; ``incoming`` is the endpoint's incoming sessions by ID."""

    def __init__(self, incoming: Mapping[tuple[str, int], PeerSession]) -> None:
        self._incoming = incoming
        self._tls = 0
        self._strangers = 0
        self._from: dict[str, int] = {}
        self._handshakes_of: dict[str, int] = {}
        self.refused_connections = 0

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

    def identify(self, place: HandshakePlace, *, paired: bool) -> bool:
        """TLS proved the HyperNet ID: a paired one leaves the stranger counts; a stranger
        takes a stranger place, or False when all are taken (refuse it; the place is ended)."""
        assert place.stage == "tls"
        self._tls -= 1
        if paired:
            self._leave_source(place.source)
            place.stage = "paired"
            return True
        if self._strangers >= MAX_HANDSHAKES_IN_PROGRESS:
            self._leave_source(place.source)
            place.stage = "ended"
            self.refused_connections += 1
            return False
        self._strangers += 1
        place.stage = "stranger"
        return True

    def end_handshake(self, place: HandshakePlace) -> None:
        """The handshake ended, whichever way: free what it still held (idempotent)."""
        if place.stage == "tls":
            self._tls -= 1
            self._leave_source(place.source)
        elif place.stage == "stranger":
            self._strangers -= 1
            self._leave_source(place.source)
        place.stage = "ended"

    def _leave_source(self, source: str) -> None:
        left = self._from.pop(source) - 1
        if left:
            self._from[source] = left

    @contextmanager
    def admitted(self, hypernet_id: str, *, pairings: int) -> Iterator[None]:
        """Reserve a place for an incoming handshake of ``hypernet_id``, which has
        ``pairings`` pairings recorded with this cluster, or LimitExceeded."""
        connections = self._handshakes_of.get(hypernet_id, 0) + sum(
            1
            for (owner, _), session in self._incoming.items()
            if owner == hypernet_id and not session.closed.is_set()
        )
        if connections >= MAX_CONNECTIONS_PER_HYPERNET_ID * (1 + pairings):
            raise LimitExceeded(
                "too many connections from this HyperNet ID",
                details={"limit": "connections_per_hypernet_id"},
            )
        self._handshakes_of[hypernet_id] = self._handshakes_of.get(hypernet_id, 0) + 1
        try:
            yield
        finally:
            left = self._handshakes_of.pop(hypernet_id) - 1
            if left:
                self._handshakes_of[hypernet_id] = left

    def unpaired_to_close(
        self, arriving: tuple[str, int], sessions: Sequence[UnpairedSession]
    ) -> UnpairedSession | None:
        """The unpaired session to close so that ``arriving`` (just registered) fits under
        :data:`MAX_UNPAIRED_SESSIONS`, if it does not already."""
        others = [s for s in sessions if s.key != arriving]
        if len(others) < MAX_UNPAIRED_SESSIONS:
            return None
        return unpaired_to_evict(others)
