"""The port through which services talk to peer clusters; only adapters know the transport.

A service sends a request to a peer (named by its HyperNet ID, and by the generation of the
pairing it goes under: 0 before any) and gets either an :class:`Answer` (the JSON result and
who answered, as its session proved) or an async stream of byte chunks. The serving side is a
:data:`RequestHandler` the adapter calls with the peer's proven identity. Errors the caller
sees are :mod:`ficc.base.errors`: ``PeerUnreachable`` (nothing was sent or the peer is
unreachable), ``OutcomeUnknown`` (sent, but no answer in time), ``ProtocolError``, or the
error the peer's handler raised.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TypedDict, Unpack

from ficc.base.errors import FiccError
from ficc.base.json_types import JSONObject
from ficc.protocol.handshake import KnownPeer

__all__ = [
    "Answer",
    "Asking",
    "BodyBound",
    "EncodedAnswer",
    "HeldChunk",
    "KnownPeer",
    "PeerChannel",
    "PeerIdentity",
    "PeerLink",
    "PeerLookup",
    "RequestHandler",
    "RequestResult",
    "Sending",
    "Transport",
    "TransportFactory",
    "end_request",
    "ending_reason",
]


@dataclass(frozen=True)
class PeerIdentity:
    """Who sent a request, as proven: the transport-verified HyperNet ID, the cluster key
    proven in the handshake, and the pairing generation the session was bound to."""

    hypernet_id: str
    cluster_key: bytes
    generation: int
    source: str | None = field(default=None, compare=False)
    """The source address the session came from (an IPv4 address, an IPv6 /64), when the
    transport knows it: where per-source limits count a stranger. Not part of who it is."""


@dataclass(frozen=True)
class Answer:
    """A peer's JSON answer, with who answered as the session's handshake proved it: the
    caller needs no second look-up that a reconnection could race."""

    identity: PeerIdentity
    body: JSONObject


@dataclass(frozen=True)
class EncodedAnswer:
    """A JSON answer already encoded as RFC 8785 JSON: measured against a limit by the
    encoding that sends it, so it is never encoded twice."""

    content: bytes
    usage: bytes | None = None
    """What the grantor tells the requester it counted (RFC 8785 JSON), sent beside the
    result as the answer's ``usage``."""


class HeldChunk(bytes):
    """A streamed answer's chunk made once nothing more is awaited from the engine: what
    follows it (the grantor's counts, the stream's end) is made at once. The transport holds
    it and writes it with what follows, in one write; the end goes once the handler has
    finished (its slot freed)."""


RequestResult = JSONObject | EncodedAnswer | AsyncIterator[bytes]
"""A handler answers with a JSON object (or its encoding), or with chunks of bytes to stream
(the last ones may be held: :class:`HeldChunk`)."""

RequestHandler = Callable[[PeerIdentity, str, JSONObject, int], Awaitable[RequestResult]]
"""``handler(peer, operation, body, body_bytes)``: ``body_bytes`` is the size of ``body``'s
canonical JSON as it travelled (limits count it, nothing encodes it again). Cancelled when the
requester abandons the request. Raise a :class:`~ficc.base.errors.FiccError` to refuse: the
requester receives it."""


BodyBound = Callable[[PeerIdentity], int]
"""``bound(peer)``: the largest request body (bytes of canonical JSON, envelope included) the
peer's session may send after a request now, from the grants it holds; the transport refuses
a larger announced body before keeping any of it."""


def end_request(task: asyncio.Task[object], reason: FiccError) -> None:
    """End the request ``task`` serves, wherever it waits (even on a peer that stopped reading).

    The task is cancelled with ``reason`` as the cancel message; the transport tells the
    requester ``reason`` (an error frame, or a stream reset naming it when no frame can go).
    """
    task.cancel(msg=reason)


def ending_reason(cancelled: asyncio.CancelledError) -> FiccError | None:
    """The reason :func:`end_request` gave, or ``None`` for any other cancellation."""
    reason = cancelled.args[0] if cancelled.args else None
    return reason if isinstance(reason, FiccError) else None


PeerLookup = Callable[[str], Awaitable[Sequence[KnownPeer]]]
"""The pairings recorded with a HyperNet ID (a cluster key and a generation each; one per
project paired with it), empty if none."""


class Sending(TypedDict, total=False):
    """How a request goes to a peer, each optional.

    ``generation``: the pairing whose session carries it (0, the default: a session of no
    pairing, for the pairing operations). ``ticket``: an address hint only; the peer's identity
    is its HyperNet ID. ``timeout_seconds``: the wait for the answer, or for each chunk of a
    stream (the transport's own when absent).
    """

    generation: int
    ticket: str | None
    timeout_seconds: float | None


class Asking(Sending, total=False):
    """How a request that awaits one JSON answer goes: ``max_answer_bytes`` is the most the
    answer may be (the operation's bound); a larger one is refused before it is decoded
    (``PeerUnreachable``, or ``OutcomeUnknown`` once sent). Before a pairing it is never
    above 64 KiB."""

    max_answer_bytes: int | None


class PeerChannel(Protocol):
    """Requests to peer clusters."""

    async def request(
        self, peer: str, operation: str, body: Mapping[str, object], **how: Unpack[Asking]
    ) -> Answer:
        """Send ``operation`` to the peer with HyperNet ID ``peer``; return its JSON result
        and who answered."""
        ...

    def stream(
        self, peer: str, operation: str, body: Mapping[str, object], **how: Unpack[Sending]
    ) -> AbstractAsyncContextManager[AsyncIterator[bytes]]:
        """Send ``operation`` and iterate the chunks it streams back; leaving the context
        before the end cancels the request on the peer."""
        ...


class PeerLink(PeerChannel, Protocol):
    """The peer channel as the federation uses it: its own ID, and closing a pairing's
    sessions."""

    @property
    def hypernet_id(self) -> str: ...
    @property
    def label(self) -> str: ...
    def disconnect(self, hypernet_id: str, generation: int, reason: FiccError) -> None: ...


class Transport(PeerChannel, Protocol):
    """A started HyperNet endpoint, as the services see it."""

    @property
    def hypernet_id(self) -> str: ...
    @property
    def addresses(self) -> list[str]: ...
    @property
    def ticket(self) -> str: ...
    async def start(self) -> None: ...
    async def stop(self) -> None: ...
    def disconnect(self, hypernet_id: str, generation: int, reason: FiccError) -> None: ...


TransportFactory = Callable[[Path, str], Transport]
"""``factory(agent_directory, bind_address)``."""
