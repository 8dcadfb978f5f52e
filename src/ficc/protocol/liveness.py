"""Application heartbeats: the transport notices a killed peer only after ~30 s, we in seconds.

Pure bookkeeping with ``now`` passed in: the adapter asks what to send and whether the peer is
silent for too long, and sleeps until :meth:`Liveness.next_deadline`.
"""

from __future__ import annotations

from typing import Final

from ficc.base.errors import ProtocolError
from ficc.protocol.messages import Heartbeat

HEARTBEAT_INTERVAL_SECONDS: Final = 1.0
PEER_SILENCE_LIMIT_SECONDS: Final = 3.5
"""A peer silent this long is dead: three heartbeats missed plus slack, well within 5 s."""


class Liveness:
    """Heartbeats of one connection's control stream."""

    def __init__(
        self,
        now: float,
        *,
        interval_seconds: float = HEARTBEAT_INTERVAL_SECONDS,
        silence_limit_seconds: float = PEER_SILENCE_LIMIT_SECONDS,
    ) -> None:
        self._interval = interval_seconds
        self._limit = silence_limit_seconds
        self._last_sent = now
        self._last_heard = now
        self._sent = 0
        self._heard = 0

    def heard(self, now: float, heartbeat: Heartbeat) -> None:
        """Record a heartbeat; its counter must be the next one."""
        if heartbeat.counter != self._heard + 1:
            raise ProtocolError(
                f"heartbeat {heartbeat.counter} out of order (expected {self._heard + 1})"
            )
        self._heard = heartbeat.counter
        self._last_heard = now

    def due(self, now: float) -> Heartbeat | None:
        """The heartbeat to send now, if the interval has passed."""
        if now - self._last_sent < self._interval:
            return None
        self._sent += 1
        self._last_sent = now
        return Heartbeat(self._sent)

    def is_dead(self, now: float) -> bool:
        """True once the peer has been silent past the limit."""
        return now - self._last_heard > self._limit

    def next_deadline(self) -> float:
        """The next instant something may change: a heartbeat to send or the silence limit."""
        return min(self._last_sent + self._interval, self._last_heard + self._limit)
