"""The HyperNet companion endpoint: iroh glue that drives the ficc.federation/1 core.

Nothing above the adapters touches iroh. This module binds the endpoint (an explicit minimal
preset and explicit bind addresses), accepts connections for our ALPN, dials peers (through
:class:`~ficc.adapters.hypernet.dialing.Dialer`), runs the handshake and implements the
:class:`~ficc.services.ports.peers.PeerChannel` port; which session is whose and what a
stranger may hold are asked of :class:`~ficc.protocol.sessions.SessionTable`. One asyncio loop
per process owns iroh: the bindings' event loop is process-global.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import iroh

from ficc.adapters import metrics
from ficc.adapters.hypernet.binding import (
    ExplicitBind,
    bind_addresses,
    claim_event_loop,
    refuse_incoming,
    relay_mode,
    source_of_incoming,
)
from ficc.adapters.hypernet.dialing import Dialer
from ficc.adapters.hypernet.errors import describe, translate
from ficc.adapters.hypernet.handshake import refuse, run_handshake
from ficc.adapters.hypernet.keys import load_or_create_secret_key
from ficc.adapters.hypernet.shovel import PeerSession, SessionTerms
from ficc.adapters.hypernet.streams import FrameStream
from ficc.adapters.hypernet.wakefix import apply_wake_fix
from ficc.adapters.hypernet.writefix import apply_write_fix
from ficc.adapters.keys import verify_signature
from ficc.base.errors import (
    FiccError,
    PeerUnreachable,
    PermissionDenied,
    ProtocolError,
)
from ficc.protocol import ALPN
from ficc.protocol.handshake import Role, Session
from ficc.protocol.limits import SessionLimits
from ficc.protocol.sessions import (
    HandshakePlace,
    NonceMemory,
    SessionTable,
)
from ficc.protocol.signing import Signer, Verify
from ficc.services.ports.peers import (
    Answer,
    BodyBound,
    PeerIdentity,
    PeerLookup,
    RequestHandler,
)

log = logging.getLogger(__name__)

DEFAULT_BIND_ADDRESS: Final = "0.0.0.0:0"
DEFAULT_CONNECT_TIMEOUT_SECONDS: Final = 5.0
"""A dead address otherwise hangs ~30 s in iroh."""
DEFAULT_REQUEST_TIMEOUT_SECONDS: Final = 30.0
HANDSHAKE_TIMEOUT_SECONDS: Final = 5.0
"""An incoming handshake must complete this long after TLS (each step has the shorter silent
deadline of ``SessionLimits.silent_seconds``)."""


class HyperNetEndpoint:
    """The companion's endpoint; implements the ``PeerChannel`` port."""

    def __init__(
        self,
        *,
        agent_directory: Path,
        cluster_key: Signer,
        lookup: PeerLookup,
        handler: RequestHandler,
        verify: Verify = verify_signature,
        bind_address: str = DEFAULT_BIND_ADDRESS,
        relay: str = "disabled",
        connect_timeout_seconds: float = DEFAULT_CONNECT_TIMEOUT_SECONDS,
        request_timeout_seconds: float = DEFAULT_REQUEST_TIMEOUT_SECONDS,
        on_peer_lost: Callable[[PeerIdentity, FiccError], None] | None = None,
        limits: SessionLimits | None = None,
        body_bound: BodyBound | None = None,
    ) -> None:
        self._agent_directory = agent_directory
        self._lookup = lookup
        self._terms = SessionTerms(
            signer=cluster_key,
            verify=verify,
            handler=handler,
            limits=limits or SessionLimits(),
            body_bound=body_bound,
        )
        self._bind = bind_addresses(bind_address)
        self._relay = relay_mode(relay)
        self._request_timeout = request_timeout_seconds
        self._on_peer_lost = on_peer_lost
        self._nonces = NonceMemory()
        self._endpoint: iroh.Endpoint | None = None
        self._table: SessionTable[PeerSession] = SessionTable()
        self._dialer = Dialer(
            endpoint=lambda: self._bound,
            attempt=self._connect_once,
            connect_timeout_seconds=connect_timeout_seconds,
        )
        self._tasks: set[asyncio.Task[None]] = set()

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Load or create the HyperNet key, bind, and start accepting peers."""
        if self._endpoint is not None:
            raise RuntimeError("the HyperNet endpoint is already started")
        seed = load_or_create_secret_key(self._agent_directory)
        apply_write_fix()
        apply_wake_fix()
        claim_event_loop()
        options = iroh.EndpointOptions(
            preset=ExplicitBind(self._bind),
            secret_key=seed,
            alpns=[ALPN],
            relay_mode=self._relay,
        )
        try:
            self._endpoint = await iroh.Endpoint.bind(options)
        except iroh.IrohError as exc:
            raise translate(exc, "binding the HyperNet endpoint") from exc
        self._spawn(self._accept_loop())

    async def stop(self) -> None:
        """Close every session and the endpoint; safe to call twice."""
        endpoint, self._endpoint = self._endpoint, None
        if endpoint is None:
            return
        for session in self._table.everyone():
            session.close(PeerUnreachable("the HyperNet endpoint stopped"))
        for task in list(self._tasks):
            task.cancel()
        with contextlib.suppress(iroh.IrohError):
            await endpoint.close()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, FiccError):
                await task

    @property
    def _bound(self) -> iroh.Endpoint:
        if self._endpoint is None:
            raise PeerUnreachable("the HyperNet endpoint is not running")
        return self._endpoint

    @property
    def hypernet_id(self) -> str:
        """This endpoint's HyperNet ID: 64 lowercase hex characters."""
        return bytes(self._bound.id().to_bytes()).hex()

    @property
    def addresses(self) -> list[str]:
        """The direct addresses peers can reach this endpoint on."""
        return list(self._bound.addr().direct_addresses())

    @property
    def ticket(self) -> str:
        """The HyperNet ID plus current addresses, as one string for a peer."""
        return str(iroh.EndpointTicket.from_addr(self._bound.addr()))

    def session(self, hypernet_id: str, generation: int = 0) -> PeerSession | None:
        """The open session with a peer's pairing at ``generation`` (0: none), if any."""
        return self._table.current((hypernet_id, generation))

    def disconnect(self, hypernet_id: str, generation: int, reason: FiccError) -> None:
        """Close the sessions of a pairing that ended (both directions); every request on
        them stops. The peer's other pairings keep theirs."""
        for session in self._table.of((hypernet_id, generation)):
            session.close(reason)

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- sessions -------------------------------------------------------------------------

    def _register(
        self,
        connection: iroh.Connection,
        handshake: tuple[Session, FrameStream],
        source: str | None = None,
    ) -> PeerSession:
        """Start the session a handshake made, its pairing's now; close what it replaces."""
        session_state, control = handshake
        session = PeerSession(
            source=source,
            connection=connection,
            control=control,
            session=session_state,
            terms=self._terms,
            on_closed=self._forget,
        )
        identity = session.identity
        session.entry, closing = self._table.register(
            (identity.hypernet_id, identity.generation),
            session,
            incoming=session.incoming,
            now=asyncio.get_running_loop().time(),
            source=identity.source,
        )
        metrics.HYPERNET_SESSIONS.set(len(self._table))
        session.start()
        for older, reason in closing:
            older.close(reason)
        return session

    def _forget(self, session: PeerSession, reason: FiccError) -> None:
        if session.entry is not None:
            self._table.forget(session.entry)
        metrics.HYPERNET_SESSIONS.set(len(self._table))
        log.info("session with %s closed: %s", session.identity.hypernet_id, reason.message)
        if self._on_peer_lost is not None:
            self._on_peer_lost(session.identity, reason)

    async def _accept_loop(self) -> None:
        endpoint = self._bound
        while True:
            try:
                incoming = await endpoint.accept_next()
            except iroh.IrohError as exc:
                log.warning("HyperNet accept loop ended: %s", describe(exc))
                return
            if incoming is None:
                return
            source = await source_of_incoming(incoming)
            place = self._table.begin_handshake(source)
            if place is None:
                self._spawn(refuse_incoming(incoming))
                continue
            self._spawn(self._accept(incoming, place))

    async def _accept(self, incoming: iroh.Incoming, place: HandshakePlace) -> None:
        """TLS, then the handshake; a connection silent past ``silent_seconds`` at either
        step is dropped, and a stranger past the stranger places is refused after TLS."""
        connection: iroh.Connection | None = None
        silent = self._terms.limits.silent_seconds
        try:
            async with asyncio.timeout(silent):
                connection = await (await incoming.accept()).connect()
            remote = bytes(connection.remote_id().to_bytes()).hex()
            pairings = len(await self._lookup(remote))
            self._table.identify(place, paired=pairings > 0)
            async with asyncio.timeout(HANDSHAKE_TIMEOUT_SECONDS):
                self._table.admit(place, remote, pairings=pairings)
                handshake = await self._handshake(
                    connection, Role.RESPONDER, first_message_seconds=silent
                )
                self._register(connection, handshake, place.source)
        except TimeoutError:
            log.info("an incoming HyperNet handshake timed out")
            if connection is not None:
                await refuse(connection, None, ProtocolError("the handshake timed out"))
        except iroh.IrohError as exc:
            log.info("an incoming HyperNet connection failed: %s", describe(exc))
        except FiccError as exc:
            log.info("an incoming HyperNet handshake failed: %s", exc.message)
            if connection is not None:
                await refuse(connection, None, exc)
        finally:
            self._table.end_handshake(place)

    async def _handshake(
        self,
        connection: iroh.Connection,
        role: Role,
        generation: int = 0,
        *,
        first_message_seconds: float | None = None,
    ) -> tuple[Session, FrameStream]:
        try:
            return await run_handshake(
                connection,
                role,
                local_hypernet_id=bytes(self._bound.id().to_bytes()),
                signer=self._terms.signer,
                verify=self._terms.verify,
                lookup=self._lookup,
                nonces=self._nonces,
                generation=generation,
                first_message_seconds=first_message_seconds,
            )
        except BaseException:
            metrics.HYPERNET_HANDSHAKE_FAILURES.labels(role=role.name.lower()).inc()
            raise

    async def connect(
        self, peer: str, *, generation: int = 0, ticket: str | None = None
    ) -> PeerSession:
        """The open session with ``peer``'s pairing at ``generation`` (0: none), connecting
        and handshaking if there is none."""
        if generation and not any(k.generation == generation for k in await self._lookup(peer)):
            # The pairing ended (or never was): its sessions serve nothing more.
            ended = PermissionDenied(
                "this cluster has no pairing with the peer at this generation",
                details={"reason": "not_paired"},
            )
            self.disconnect(peer, generation, ended)
            raise ended
        existing = self.session(peer, generation)
        if existing is not None:
            return existing
        return await self._dialer.dial(peer, generation, ticket)

    async def _connect_once(
        self, peer: str, address: iroh.EndpointAddr, generation: int
    ) -> PeerSession:
        connection: iroh.Connection | None = None
        try:
            connection = await self._bound.connect(address, ALPN)
            handshake = await self._handshake(connection, Role.INITIATOR, generation)
        except asyncio.CancelledError:
            if connection is not None:
                await asyncio.shield(
                    refuse(connection, None, PeerUnreachable("the handshake timed out"))
                )
            raise
        except iroh.IrohError as exc:
            raise translate(exc, f"connecting to the peer {peer}") from exc
        return self._register(connection, handshake)

    # -- the PeerChannel port -------------------------------------------------------------

    async def request(
        self,
        peer: str,
        operation: str,
        body: Mapping[str, Any],
        *,
        generation: int = 0,
        ticket: str | None = None,
        timeout_seconds: float | None = None,
        max_answer_bytes: int | None = None,
    ) -> Answer:
        """Send ``operation`` to ``peer``'s pairing at ``generation``; return who answered
        (as the session's handshake proved it) and its JSON result."""
        session = await self.connect(peer, generation=generation, ticket=ticket)
        timeout = self._request_timeout if timeout_seconds is None else timeout_seconds
        body = await session.request(operation, body, timeout, max_answer_bytes)
        return Answer(session.identity, body)

    @asynccontextmanager
    async def stream(
        self,
        peer: str,
        operation: str,
        body: Mapping[str, Any],
        *,
        generation: int = 0,
        ticket: str | None = None,
        timeout_seconds: float | None = None,
    ) -> AsyncIterator[AsyncIterator[bytes]]:
        """Send ``operation`` and iterate the chunks it streams back."""
        timeout = self._request_timeout if timeout_seconds is None else timeout_seconds
        session = await self.connect(peer, generation=generation, ticket=ticket)
        async with session.stream(operation, body, timeout) as chunks:
            yield chunks
