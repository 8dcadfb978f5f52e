"""Where and how the endpoint binds, and the loop that owns iroh in this process.

Always an explicit minimal preset (no relays, no DNS discovery) and explicit bind addresses:
``bind_addr`` alone still leaves a ``[::]`` socket on every interface.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
from collections.abc import Mapping
from typing import Final, cast

import iroh
from iroh import iroh_ffi

from ficc.adapters.hypernet.errors import describe
from ficc.base.errors import InvalidInput
from ficc.base.units import seconds_setting
from ficc.protocol.limits import SessionLimits
from ficc.protocol.sessions import source_of

READ_DEADLINE_VARIABLE: Final = "FICC_HYPERNET_READ_DEADLINE_SECONDS"
UNPAIRED_IDLE_VARIABLE: Final = "FICC_HYPERNET_UNPAIRED_IDLE_SECONDS"
SILENT_VARIABLE: Final = "FICC_HYPERNET_SILENT_SECONDS"
MAX_TICKET_ADDRESSES: Final = 8
"""Direct addresses a ticket may name: each is dialled, so a ticket naming hundreds would make
this cluster send UDP to hundreds of hosts for one request (F20)."""

_loop_owner: asyncio.AbstractEventLoop | None = None


def claim_event_loop() -> None:
    """Make the running loop the one that owns iroh, refusing a second live owner."""
    global _loop_owner
    loop = asyncio.get_running_loop()
    if _loop_owner is not None and _loop_owner is not loop and not _loop_owner.is_closed():
        raise RuntimeError("another running asyncio loop already owns iroh in this process")
    _loop_owner = loop
    iroh_ffi.uniffi_set_event_loop(cast(asyncio.BaseEventLoop, loop))


def limits_from_environment(environ: Mapping[str, str] | None = None) -> SessionLimits:
    """The session deadlines; ``FICC_HYPERNET_*`` variables shorten them (tests only)."""
    env = os.environ if environ is None else environ
    defaults = SessionLimits()
    return SessionLimits(
        read_deadline_seconds=seconds_setting(
            env, READ_DEADLINE_VARIABLE, defaults.read_deadline_seconds
        ),
        unpaired_idle_seconds=seconds_setting(
            env, UNPAIRED_IDLE_VARIABLE, defaults.unpaired_idle_seconds
        ),
        silent_seconds=seconds_setting(env, SILENT_VARIABLE, defaults.silent_seconds),
    )


def bind_addresses(address: str) -> list[str]:
    """``address`` plus an explicit socket of the other IP family in the same scope.

    Without an explicit second address iroh also binds ``[::]`` on every interface.
    """
    host, separator, port = address.rpartition(":")
    try:
        ip = ipaddress.ip_address(host.removeprefix("[").removesuffix("]"))
        if not separator or not 0 <= int(port) <= 65535:
            raise ValueError(address)
    except ValueError as exc:
        raise InvalidInput(
            f"the HyperNet bind address {address!r} must be HOST:PORT", field="hypernet_bind"
        ) from exc
    if ip.version == 4:
        partner = "[::]:0" if ip.is_unspecified else "[::1]:0"
    else:
        partner = "0.0.0.0:0" if ip.is_unspecified else "127.0.0.1:0"
    return [address, partner]


def relay_mode(relay: str) -> iroh.RelayMode:
    """``disabled``, ``default`` (n0's relays) or the URL of one relay."""
    if relay == "disabled":
        return iroh.RelayMode.disabled()
    if relay == "default":
        return iroh.RelayMode.default_mode()
    if relay.startswith(("https://", "http://")):
        return iroh.RelayMode.custom_from_urls([relay])
    raise InvalidInput(
        "the HyperNet relay must be disabled, default or a relay URL", field="hypernet_relay"
    )


class ExplicitBind(iroh.Preset):
    """The minimal preset (no relays, no DNS discovery) bound to explicit addresses only."""

    def __init__(self, addresses: list[str]) -> None:
        self._addresses = addresses

    def apply(self, builder: iroh.EndpointBuilder) -> None:
        builder.apply_minimal()
        for address in self._addresses:
            builder.bind_addr(address)


def peer_address(peer: str, ticket: str | None) -> iroh.EndpointAddr:
    """Where to reach ``peer``: its ticket's addresses (which must be its own), else its ID."""
    try:
        remote = iroh.EndpointId.from_string(peer)
        if ticket is not None:
            address = iroh.EndpointTicket.from_string(ticket).endpoint_addr()
            if bytes(address.id().to_bytes()) != bytes(remote.to_bytes()):
                raise InvalidInput("the ticket is for another HyperNet ID", field="ticket")
            if len(address.direct_addresses()) > MAX_TICKET_ADDRESSES:
                raise InvalidInput(
                    f"ticket must name at most {MAX_TICKET_ADDRESSES} direct addresses",
                    field="ticket",
                    details={"max": MAX_TICKET_ADDRESSES},
                )
            return address
    except iroh.IrohError as exc:
        raise InvalidInput(f"malformed HyperNet ID or ticket: {describe(exc)}") from exc
    return iroh.EndpointAddr(remote, None, [])


async def source_of_incoming(incoming: iroh.Incoming) -> str:
    """The source an incoming connection is counted under, before its TLS handshake."""
    try:
        address = await incoming.remote_addr()
    except iroh.IrohError:
        return "unknown"
    if isinstance(address, iroh.IncomingAddr.IP):
        return source_of(address.addr)
    if isinstance(address, iroh.IncomingAddr.RELAY):
        return f"relay:{address.endpoint_id}"
    return "other"


async def refuse_incoming(incoming: iroh.Incoming) -> None:
    """Refuse a connection before its TLS handshake (too many handshakes in progress)."""
    with contextlib.suppress(iroh.IrohError):
        await incoming.refuse()
