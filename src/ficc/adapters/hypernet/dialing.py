"""Dialing a peer: one dial per pairing at a time, which every caller for that pairing joins,
retried with backoff until the connect deadline."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import iroh

from ficc.adapters.hypernet.binding import peer_address
from ficc.adapters.hypernet.shovel import PeerSession
from ficc.base.errors import FiccError, LimitExceeded, PeerUnreachable
from ficc.protocol.sessions import SessionKey, connect_backoff_seconds

Attempt = Callable[[str, iroh.EndpointAddr, int], Awaitable[PeerSession]]
"""One connection and handshake with ``peer`` at ``address`` for ``generation``."""


@dataclass(eq=False, kw_only=True)
class Dialer:
    """The outgoing connections of one endpoint (``endpoint`` gives it while it runs)."""

    endpoint: Callable[[], iroh.Endpoint]
    attempt: Attempt
    connect_timeout_seconds: float
    _connecting: dict[SessionKey, asyncio.Future[PeerSession]] = field(
        default_factory=dict, init=False
    )

    async def dial(self, peer: str, generation: int, ticket: str | None) -> PeerSession:
        """A new session with ``peer``'s pairing at ``generation``: the dial in flight to
        it, or one started now."""
        key = (peer, generation)
        pending = self._connecting.get(key)
        if pending is None:
            pending = asyncio.ensure_future(self._connect(peer, generation, ticket))
            self._connecting[key] = pending
            pending.add_done_callback(lambda _: self._connecting.pop(key, None))
        return await asyncio.shield(pending)

    async def _connect(self, peer: str, generation: int, ticket: str | None) -> PeerSession:
        """Connect and handshake within the connect deadline, trying again with backoff
        after a refused or failed attempt (a peer's handshake places may be briefly full)."""
        address = peer_address(peer, ticket)
        if not ticket:
            with contextlib.suppress(iroh.IrohError):
                address = await self.endpoint().remote_addr(address.id()) or address
        attempts = 0
        last: FiccError | None = None
        try:
            async with asyncio.timeout(self.connect_timeout_seconds):
                while True:
                    try:
                        return await self.attempt(peer, address, generation)
                    except (PeerUnreachable, LimitExceeded) as exc:
                        last = exc
                    await asyncio.sleep(connect_backoff_seconds(attempts))
                    attempts += 1
        except TimeoutError as exc:
            why = f" (last: {last.message})" if last is not None else ""
            raise PeerUnreachable(
                f"could not reach the peer {peer} within {self.connect_timeout_seconds} s{why}",
                details={"attempts": attempts + 1},
            ) from exc
