"""What a stranger can hold of the HyperNet port: handshakes, connections, unpaired sessions.

Anyone who can reach the UDP port may try a handshake, so handshakes in progress, connections
per HyperNet ID and pairing (a newer session closes the older one of the same direction and
generation) and sessions without a pairing are counted here and refused past their caps.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Final

from ficc.base.errors import LimitExceeded

if TYPE_CHECKING:
    from ficc.adapters.hypernet.session import PeerSession

MAX_HANDSHAKES_IN_PROGRESS: Final = 16
"""Incoming handshakes at once; the next connection is refused before its TLS handshake."""
MAX_CONNECTIONS_PER_HYPERNET_ID: Final = 2
"""Incoming connections from one HyperNet ID, established or handshaking, for each of its
pairings and for generation 0 (a HyperNet ID never paired: 2 in all); a newer session closes
the older one of its generation, so two exist only while a reconnection completes."""
MAX_UNPAIRED_SESSIONS: Final = 32
"""Incoming sessions (and handshakes) of HyperNet IDs without a pairing; further ones are
refused until one ends (each idles out after ``UNPAIRED_IDLE_SECONDS``)."""


class Admission:
    """The counts behind the caps; ``incoming`` is the endpoint's incoming sessions by ID."""

    def __init__(self, incoming: Mapping[tuple[str, int], PeerSession]) -> None:
        self._incoming = incoming
        self._handshakes = 0
        self._handshakes_of: dict[str, int] = {}
        self._unpaired_handshakes = 0
        self.refused_connections = 0

    def begin_handshake(self) -> bool:
        """Count one more incoming handshake, or False past the cap (refuse it before TLS)."""
        if self._handshakes >= MAX_HANDSHAKES_IN_PROGRESS:
            self.refused_connections += 1
            return False
        self._handshakes += 1
        return True

    def end_handshake(self) -> None:
        """A handshake :meth:`begin_handshake` counted ended, whichever way."""
        self._handshakes -= 1

    @contextmanager
    def admitted(self, hypernet_id: str, *, pairings: int) -> Iterator[None]:
        """Reserve a place for an incoming handshake of ``hypernet_id``, which has
        ``pairings`` pairings recorded with this cluster, or LimitExceeded."""
        paired = pairings > 0
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
        if not paired and self._unpaired_count(hypernet_id) >= MAX_UNPAIRED_SESSIONS:
            raise LimitExceeded(
                "too many sessions without a pairing; try again later",
                details={"limit": "unpaired_sessions"},
            )
        self._handshakes_of[hypernet_id] = self._handshakes_of.get(hypernet_id, 0) + 1
        self._unpaired_handshakes += not paired
        try:
            yield
        finally:
            self._unpaired_handshakes -= not paired
            left = self._handshakes_of.pop(hypernet_id) - 1
            if left:
                self._handshakes_of[hypernet_id] = left

    def _unpaired_count(self, replacing: str) -> int:
        """Incoming unpaired sessions and handshakes, but the one ``replacing`` would end."""
        sessions = sum(
            1
            for (hypernet_id, generation), session in self._incoming.items()
            if generation == 0 and hypernet_id != replacing and not session.closed.is_set()
        )
        return sessions + self._unpaired_handshakes
