"""The requester's side: send one operation through a peer's selected grant; nothing is retried.

A request whose answer is lost after it was sent is an unknown outcome: the caller is told the
mutation_id to inspect (``operation.status``) or to retry with, and nothing else is assumed.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Unpack

from ficc.base.canonical import canonical_json
from ficc.base.errors import (
    Conflict,
    GrantExpired,
    GrantRevoked,
    InvalidInput,
    OutcomeUnknown,
    TooLarge,
)
from ficc.base.json_types import JSONObject
from ficc.base.units import MiB
from ficc.domain import metering as m
from ficc.domain.grants import (
    DEFAULT_RESPONSE_BYTES,
    MAX_REQUEST_BYTES,
    MAX_RESPONSE_BYTES,
    copied_term,
    wire_bytes,
)
from ficc.domain.operations import INVOKE, check_mutation_id, parse_body
from ficc.domain.peers import Peer
from ficc.domain.principals import Principal
from ficc.domain.rate_limit_headers import rate_limit_headers
from ficc.domain.remote_grants import RemoteGrant
from ficc.services.federation.common import check_paired, project_peer
from ficc.services.federation.remote_grants import RemoteGrantCopies
from ficc.services.ports import PeerAsk, RoutedAsk, UnitOfWorkFactory
from ficc.services.ports.peers import PeerChannel
from ficc.services.remote.prepared import Prepared
from ficc.services.remote.table import grant_operation
from ficc.services.remote.usage_meter import RequesterUsage, metered_stream
from ficc.services.remote.views import unpublished
from ficc.services.token_limits import check_peer, check_service

REQUEST_TIMEOUT_SECONDS: Final = 30.0
INVOKE_TIMEOUT_SECONDS: Final = 300.0
GRANT_ANSWER_BYTES: Final = 4 * MiB
"""The most an answer under a grant may be, but for ``inference.invoke`` and
``models.manifest``: the others answer records and lists of a few KiB."""
MANIFEST_ANSWER_BYTES: Final = 1 * MiB
"""A ``models.manifest`` answer: a manifest (at most 512 KiB) and the record around it."""


@dataclass(eq=False)
class RemoteClient:
    """Requests to the peers of a project, each through the grant the project selected."""

    uow_factory: UnitOfWorkFactory
    channel: PeerChannel
    copies: RemoteGrantCopies
    usage: RequesterUsage
    """The usage records of what this cluster sends, with a restricted token's budgets."""
    _routed: dict[str, tuple[str, JSONObject]] = field(default_factory=dict, init=False, repr=False)
    """By peer: the grant its last request went through and the copy of its terms."""

    @property
    def told(self) -> Mapping[str, Mapping[str, object]]:
        """The last counts and allowances each grantor told, by grant (for rate headers)."""
        return self.usage.told

    @property
    def on_settled(self) -> Callable[[str, str, int, int], None] | None:
        """Told each settled invocation's direction, operation and token counts."""
        return self.usage.on_settled

    @on_settled.setter
    def on_settled(self, callback: Callable[[str, str, int, int], None] | None) -> None:
        self.usage.on_settled = callback

    async def published_services(
        self, principal: Principal, project: str, peer_id: str
    ) -> list[str]:
        """The remote service IDs the peer's selected grant publishes (given and created)."""
        principal.require_scope("federation:invoke")
        peer, remote = await self._peer_and_copies(project, peer_id)
        return _published(peer.selected_grant, await self.copies.current(peer, remote))

    async def request(
        self, principal: Principal, project: str, peer_id: str, **ask: Unpack[PeerAsk]
    ) -> dict[str, Any]:
        """Send one operation through the selected grant; nothing is retried.

        ``service``: a remote service the selected grant must publish (checked before sending).
        """
        return await self.send(await self.prepare(principal, project, peer_id, **ask))

    async def prepare(
        self, principal: Principal, project: str, peer_id: str, **ask: Unpack[RoutedAsk]
    ) -> Prepared:
        """Every check this cluster makes before sending: a refusal here proves nothing was
        sent (a route tries its next target on it). ``via``: the route (name and ID) the
        request comes through, which a restricted token may list instead of the service."""
        check_peer(principal, peer_id)
        service = ask.get("service")
        peer, grant_id, terms = await self._route(principal, project, peer_id, service)
        name, wire, body_bytes = _wire(
            grant_id, ask["operation"], ask["body"], ask.get("mutation_id"), terms
        )
        sent = wire["body"]
        asked = sent.get("service") if isinstance(sent, dict) else None
        for named in {service, asked} - {None}:
            check_service(principal, str(named), *ask.get("via", ()))
        return Prepared(peer, grant_id, terms, name, wire, body_bytes, principal)

    async def send(self, prepared: Prepared) -> dict[str, Any]:
        """Send a prepared request; nothing is retried."""
        peer, name, wire = prepared.peer, prepared.operation, prepared.wire
        grant_id, terms = prepared.grant_id, prepared.terms
        timeout = INVOKE_TIMEOUT_SECONDS if name == INVOKE else REQUEST_TIMEOUT_SECONDS
        sent_id = wire.get("mutation_id")
        assert sent_id is None or isinstance(sent_id, str)  # as _wire checked it
        if name == INVOKE:
            await self.usage.catch_up(peer, grant_id)
            async with self.usage.recording(prepared) as usage:
                answer = await self._ask(peer, name, wire, terms, timeout, sent_id)
                result = answer.get("result")
                usage.response_bytes = len(canonical_json(result)) if result is not None else 0
                usage.told = answer.get("usage")
                usage.ended = True
                own = m.parse_told(result.get("usage")) if isinstance(result, dict) else None
                if own is not None:
                    usage.own_prompt, usage.own_completion = own
        else:
            answer = await self._ask(peer, name, wire, terms, timeout, sent_id)
        return {
            "operation": name,
            "mutation_id": sent_id,
            "replayed": bool(answer.get("replayed", False)),
            "result": answer.get("result"),
        }

    async def _ask(
        self,
        peer: Peer,
        name: str,
        wire: JSONObject,
        terms: JSONObject,
        timeout_seconds: float,
        sent_id: str | None,
    ) -> JSONObject:
        try:
            answer = (
                await self.channel.request(
                    peer.hypernet_id,
                    name,
                    wire,
                    generation=peer.generation,
                    ticket=peer.ticket,
                    timeout_seconds=timeout_seconds,
                    max_answer_bytes=answer_bytes(name, terms),
                )
            ).body
        except OutcomeUnknown as exc:
            # The transport knows only that an answer was lost; which mutation that leaves in
            # doubt is this layer's to say.
            raise OutcomeUnknown(exc.message, mutation_id=sent_id) from exc
        finally:
            self.copies.changed(peer.id)
        return answer

    @contextlib.asynccontextmanager
    async def open_stream(
        self, principal: Principal, project: str, peer_id: str, **ask: Unpack[PeerAsk]
    ) -> AsyncIterator[AsyncIterator[bytes]]:
        """A streamed operation; leaving the block cancels it on the peer.

        ``mutation_id`` is checked like any other request's (no streamed operation takes one),
        so a caller who sends one is told, not silently ignored.
        """
        prepared = await self.prepare(principal, project, peer_id, **ask)
        async with self.stream(prepared) as chunks:
            yield chunks

    @contextlib.asynccontextmanager
    async def stream(self, prepared: Prepared) -> AsyncIterator[AsyncIterator[bytes]]:
        """Send a prepared streamed request; leaving the block cancels it on the peer."""
        peer = prepared.peer
        self.copies.changed(peer.id)
        opening = self.channel.stream(
            peer.hypernet_id,
            prepared.operation,
            prepared.wire,
            generation=peer.generation,
            ticket=peer.ticket,
            timeout_seconds=INVOKE_TIMEOUT_SECONDS,
        )
        grant_id = prepared.grant_id
        if prepared.operation != INVOKE:
            async with opening as chunks:
                named = _naming_grant(chunks, grant_id)
                async with contextlib.aclosing(named):
                    yield named
            return
        # Recorded from before the request is sent: a refusal, too, leaves its record.
        await self.usage.catch_up(peer, grant_id)
        async with (
            self.usage.recording(prepared) as usage,
            opening as chunks,
        ):
            named = metered_stream(_naming_grant(chunks, grant_id), usage)
            async with contextlib.aclosing(named):
                yield named

    def known_refusal(self, prepared: Prepared) -> str | None:
        """The grant's rule its grantor last said is spent (a budget at 0, a window at 0 not
        reset since): a route skips that target rather than send a request it would refuse."""
        return self.usage.known_refusal(prepared.grant_id)

    def rate_limits(self, peer_id: str, principal: Principal | None = None) -> dict[str, str]:
        """OpenAI's ``x-ratelimit-*`` headers for the grant the last request to ``peer_id``
        went through, from what its grantor last told (or the copy of the grant the request
        was checked against); with ``principal``, the tighter of those and its token's rules.
        Read from memory, so an answer pays nothing for them."""
        routed = self._routed.get(peer_id)
        headers: dict[str, str] = {}
        if routed is not None:
            grant_id, terms = routed
            headers = rate_limit_headers(terms, self.told.get(grant_id))
        if principal is not None and self.usage.tokens is not None:
            headers = self.usage.tokens.rate_limits(principal, headers)
        return headers

    async def _peer_and_copies(self, project: str, peer_id: str) -> tuple[Peer, list[JSONObject]]:
        """The project's peer and this cluster's copies of the grants it gave."""
        async with self.uow_factory() as uow:
            peer = await project_peer(uow, project, peer_id)
            return peer, await uow.remote_grants.of_peer(peer_id)

    async def _route(
        self, principal: Principal, project: str, peer_id: str, service: str | None = None
    ) -> tuple[Peer, str, JSONObject]:
        """The peer, its selected grant and this cluster's copy of that grant's terms (empty
        if none is kept); with ``service``, one that grant must publish."""
        principal.require_scope("federation:invoke")
        peer, remote = await self._peer_and_copies(project, peer_id)
        copies = [RemoteGrant.of(item) for item in remote]
        if service is not None and service not in _published(peer.selected_grant, copies):
            raise unpublished(service)
        check_paired(peer)
        if peer.selected_grant is None:
            raise Conflict(
                "no grant of this peer is selected; refresh and select one",
                details={"peer": peer_id},
            )
        terms = next((item for item in remote if item.get("id") == peer.selected_grant), {})
        self._routed[peer.id] = (peer.selected_grant, terms)
        return peer, peer.selected_grant, terms


def answer_bytes(operation: str, terms: JSONObject) -> int:
    """The most an answer to ``operation`` under a grant with ``terms`` may be on the wire:
    for ``inference.invoke`` what the grant's ``response_bytes`` can take there, for
    ``models.manifest`` one frame (a manifest is at most 512 KiB), for the others
    :data:`GRANT_ANSWER_BYTES`. A larger answer is refused before it is decoded."""
    if operation == INVOKE:
        response_bytes = copied_term(
            terms, "response_bytes", DEFAULT_RESPONSE_BYTES, MAX_RESPONSE_BYTES
        )
        return wire_bytes(response_bytes)
    if operation == "models.manifest":
        return MANIFEST_ANSWER_BYTES
    return GRANT_ANSWER_BYTES


def _wire(
    grant_id: str,
    operation: object,
    body: object,
    mutation_id: object,
    terms: JSONObject,
) -> tuple[str, JSONObject, int]:
    """The request body an operation under a grant carries, checked against its row and the
    selected grant's ``request_bytes`` as this cluster's copy of the grant says (the grantor
    checks it again; a body it would refuse is not sent), and its size."""
    name, row = grant_operation(operation)
    checked_id = check_mutation_id(name, row.mutation, mutation_id)
    checked_body = parse_body(body)
    wire: JSONObject = {"grant": grant_id, "body": checked_body}
    if checked_id is not None:
        wire["mutation_id"] = checked_id
    try:
        # The one encoding made here: it proves the wire can carry the body, and measures it
        # as request_bytes counts it (RFC 8785 bytes, as the grantor counts them).
        size = len(canonical_json(checked_body))
    except ValueError as exc:
        raise InvalidInput(
            "body must be JSON the wire can carry (RFC 8785): finite numbers, integers within "
            "±(2**53 - 1)",
            field="body",
        ) from exc
    allowed = copied_term(terms, "request_bytes", MAX_REQUEST_BYTES, MAX_REQUEST_BYTES)
    if size > allowed:
        raise TooLarge(
            f"the request body is {size} bytes; the grant allows {allowed}",
            details={"limit": "request_bytes", "allowed": allowed},
        )
    return name, wire, size


async def _naming_grant(chunks: AsyncIterator[bytes], grant_id: str) -> AsyncGenerator[bytes, None]:
    """The chunks; a grant ending says which grant (a stream reset cannot carry its ID)."""
    try:
        async for chunk in chunks:
            yield chunk
    except (GrantRevoked, GrantExpired) as exc:
        if "grant" in exc.details:
            raise
        raise type(exc)(exc.message, details={**exc.details, "grant": grant_id}) from exc


def _published(selected: str | None, remote_grants: list[RemoteGrant]) -> list[str]:
    grant = next((item for item in remote_grants if item.id == selected), None)
    return [] if grant is None else list(grant.services)
