"""The companion: this cluster's HyperNet endpoint, configured once and restored at start.

A broken agent directory does not stop FICC: the companion shows ``failed`` with the reason,
and the API keeps serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Final, TypedDict, Unpack

from ficc.base.errors import FiccError, InvalidInput, PeerUnreachable
from ficc.base.text import parse_short_text
from ficc.domain.principals import Principal
from ficc.services import audit
from ficc.services.ports import Clock, UnitOfWorkFactory
from ficc.services.ports.peers import Answer, Asking, Sending, Transport, TransportFactory

log = logging.getLogger("ficc.companion")


class CompanionState(StrEnum):
    UNCONFIGURED = "unconfigured"
    RUNNING = "running"
    FAILED = "failed"
    STOPPED = "stopped"


class CompanionView(TypedDict):
    """The companion as ``GET /api/v1/federation`` shows it."""

    configured: bool
    state: CompanionState
    agent_directory: str | None
    hypernet_id: str | None
    addresses: list[str]
    error: str | None


class IdentityView(TypedDict):
    """How other clusters know this one: its label, key, HyperNet ID and ticket."""

    label: str
    cluster_key: str
    hypernet_id: str | None
    ticket: str | None


COMPANION_SETTING: Final = "companion"
LABEL_SETTING: Final = "label"
MAX_LABEL_CHARS: Final = 100


def parse_agent_directory(value: object) -> Path:
    if not isinstance(value, str) or not value or "\0" in value:
        raise InvalidInput("agent_directory must be a path", field="agent_directory")
    path = Path(value)
    if not path.is_absolute():
        raise InvalidInput("agent_directory must be an absolute path", field="agent_directory")
    if ".." in path.parts:
        raise InvalidInput("agent_directory must not contain '..'", field="agent_directory")
    return path


RECLAIM_PORT_SECONDS: Final = 1.0
"""How often a companion bound elsewhere tries the port peers know again."""


@dataclass(eq=False)
class Companion:
    """This cluster's HyperNet endpoint: configured once, restored at start, and its state
    (``unconfigured``, ``running``, ``failed`` with the reason, ``stopped``) as shown."""

    uow_factory: UnitOfWorkFactory
    clock: Clock
    factory: TransportFactory
    cluster_key: str
    bind_address: str = "0.0.0.0:0"
    state: CompanionState = field(default=CompanionState.UNCONFIGURED, init=False)
    error: str | None = field(default=None, init=False)
    agent_directory: Path | None = field(default=None, init=False)
    label: str = field(default="", init=False)
    _transport: Transport | None = field(default=None, init=False)
    _reclaim: asyncio.Task[None] | None = field(default=None, init=False)
    """Moving back to the port used last time, while another process holds it."""

    async def restore(self) -> None:
        """Start the companion a previous configuration asked for."""
        async with self.uow_factory() as uow:
            config = await uow.settings.get(COMPANION_SETTING)
            label = await uow.settings.get(LABEL_SETTING)
        self.label = str(label or "")
        if isinstance(config, dict) and isinstance(config.get("agent_directory"), str):
            await self._start(Path(config["agent_directory"]))

    async def configure(self, principal: Principal, agent_directory: object, label: object) -> None:
        principal.require_scope("federation:manage")
        principal.require_local_owner()
        directory = parse_agent_directory(agent_directory)
        new_label = None if label is None else parse_short_text(label, "label", MAX_LABEL_CHARS)
        async with self.uow_factory() as uow:
            await uow.settings.put(COMPANION_SETTING, {"agent_directory": str(directory)})
            if new_label is not None:
                await uow.settings.put(LABEL_SETTING, new_label)
            await audit.record_by(
                uow,
                self.clock,
                principal,
                "companion.configured",
                project=None,
                target=str(directory),
                details={"label": new_label},
            )
            await uow.commit()
        if new_label is not None:
            self.label = new_label
        await self._start(directory)

    async def _bind(self) -> str:
        """The configured bind address; a port of 0 becomes the port used last time.

        Peers know this cluster by the addresses in its ticket: keeping the port across
        restarts keeps those addresses valid.
        """
        host, _, port = self.bind_address.rpartition(":")
        if port != "0":
            return self.bind_address
        async with self.uow_factory() as uow:
            config = await uow.settings.get(COMPANION_SETTING)
        kept = config.get("port") if isinstance(config, dict) else None
        return f"{host}:{kept}" if isinstance(kept, int) and 0 < kept < 65536 else self.bind_address

    async def _remember_port(self, transport: Transport) -> None:
        ipv6 = self.bind_address.startswith("[")
        ports = {
            int(address.rpartition(":")[2])
            for address in transport.addresses
            if address.startswith("[") == ipv6
        }
        if len(ports) != 1:
            return
        async with self.uow_factory() as uow:
            config = await uow.settings.get(COMPANION_SETTING)
            if isinstance(config, dict) and config.get("port") != min(ports):
                await uow.settings.put(COMPANION_SETTING, {**config, "port": min(ports)})
                await uow.commit()

    async def _start(self, directory: Path) -> None:
        await self.stop()
        self.agent_directory = directory
        bind = await self._bind()
        transport = self.factory(directory, bind)
        elsewhere = False
        try:
            try:
                await transport.start()
            except FiccError:
                if bind == self.bind_address:
                    raise
                # The port used last time is taken now: take any for the time being.
                transport = self.factory(directory, self.bind_address)
                await transport.start()
                elsewhere = True
        except FiccError as exc:
            # Shown to every federation:read holder: name the file, not the machine's path.
            self.state = CompanionState.FAILED
            self.error = exc.message.replace(f"{directory}/", "").replace(str(directory), "")
            log.warning("the companion failed to start: %s", exc.message)
            return
        except OSError as exc:
            self.state = CompanionState.FAILED
            self.error = f"the agent directory cannot be used: {exc.strerror or 'I/O error'}"
            return
        self._transport, self.state, self.error = transport, CompanionState.RUNNING, None
        if elsewhere:
            self._reclaim = asyncio.create_task(self._move_back(directory, bind))
        else:
            await self._remember_port(transport)

    async def _move_back(self, directory: Path, bind: str) -> None:
        """Peers know this cluster by the port in its ticket: while another process holds it (a
        former active paused, not dead), try it again each second, and move there once free
        (that process ends as soon as it wakes to a lapsed lease, or when it is killed)."""
        while True:
            await asyncio.sleep(RECLAIM_PORT_SECONDS)
            moved = self.factory(directory, bind)
            try:
                await moved.start()
            except (FiccError, OSError):
                continue
            old, self._transport = self._transport, moved
            if old is not None:
                await old.stop()
            log.info("the companion moved back to the port peers know", extra={"bind": bind})
            return

    async def stop(self) -> None:
        reclaim, self._reclaim = self._reclaim, None
        if reclaim is not None and reclaim is not asyncio.current_task():
            reclaim.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reclaim
        transport, self._transport = self._transport, None
        if transport is not None:
            await transport.stop()
            self.state = CompanionState.STOPPED

    @property
    def transport(self) -> Transport:
        if self._transport is None:
            raise PeerUnreachable(
                "the companion is not running; configure it with PUT /api/v1/federation/"
                "configuration",
                details={"companion": self.state},
            )
        return self._transport

    def companion_json(self) -> CompanionView:
        transport = self._transport
        return {
            "configured": self.agent_directory is not None,
            "state": self.state,
            "agent_directory": None if self.agent_directory is None else str(self.agent_directory),
            "hypernet_id": None if transport is None else transport.hypernet_id,
            "addresses": [] if transport is None else transport.addresses,
            "error": self.error,
        }

    def identity_json(self) -> IdentityView:
        transport = self._transport
        return {
            "label": self.label,
            "cluster_key": self.cluster_key,
            "hypernet_id": None if transport is None else transport.hypernet_id,
            "ticket": None if transport is None else transport.ticket,
        }


class CompanionChannel:
    """The peer channel of whichever endpoint the companion runs now.

    Services hold this from construction; it refuses with ``PeerUnreachable`` while no companion
    runs, so no service reaches into the companion for its transport.
    """

    def __init__(self, companion: Companion) -> None:
        self._companion = companion

    @property
    def hypernet_id(self) -> str:
        return self._companion.transport.hypernet_id

    @property
    def label(self) -> str:
        return self._companion.label

    async def request(
        self, peer: str, operation: str, body: Mapping[str, object], **how: Unpack[Asking]
    ) -> Answer:
        """The running endpoint's :meth:`PeerChannel.request`."""
        return await self._companion.transport.request(peer, operation, body, **how)

    def stream(
        self, peer: str, operation: str, body: Mapping[str, object], **how: Unpack[Sending]
    ) -> AbstractAsyncContextManager[AsyncIterator[bytes]]:
        """The running endpoint's :meth:`PeerChannel.stream`."""
        return self._companion.transport.stream(peer, operation, body, **how)

    def disconnect(self, hypernet_id: str, generation: int, reason: FiccError) -> None:
        """Close a pairing's sessions; without a companion there is none to close."""
        try:
            transport = self._companion.transport
        except PeerUnreachable:
            return
        transport.disconnect(hypernet_id, generation, reason)
