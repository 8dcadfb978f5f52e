"""The requester's side of a request to a peer, as routes use it: what a caller asks (the
operation and its body) and the client that checks, then sends it (``RemoteClient``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from typing import Any, NotRequired, Protocol, TypedDict, Unpack

from ficc.domain.principals import Principal


class PeerAsk(TypedDict):
    """One operation asked of a peer through its selected grant, as the caller gave it (the
    client checks every field before anything is sent)."""

    operation: object
    body: object
    mutation_id: NotRequired[object]
    """The idempotency key of a mutation; none for a read."""
    service: NotRequired[str | None]
    """A remote service the selected grant must publish."""


class RoutedAsk(PeerAsk):
    """An operation asked through a route: the route as well."""

    via: NotRequired[tuple[str, ...]]
    """The route (name and ID) the request comes through, which a restricted token may list
    instead of the service."""


class RemoteInvoker(Protocol):
    """The requester's side as routes use it (``RemoteClient``): every check before sending,
    then the send, so a refusal of the first proves nothing went out."""

    async def prepare(
        self, principal: Principal, project: str, peer_id: str, **ask: Unpack[RoutedAsk]
    ) -> Any: ...

    async def send(self, prepared: Any) -> dict[str, Any]: ...

    def stream(self, prepared: Any) -> AbstractAsyncContextManager[AsyncIterator[bytes]]: ...

    def known_refusal(self, prepared: Any) -> str | None:
        """The grant's rule its grantor last said is spent, if any (tokens, a window)."""
        ...
