"""A hostile HyperNet peer against a real `ficc serve`: raw iroh endpoints that speak
ficc.federation/1 by hand (frames forged with ficc.protocol), and what the server holds."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import iroh
from iroh import iroh_ffi
from tests.support.cluster import RunningCluster
from tests.support.federation import identity

from ficc.adapters.hypernet.handshake import run_handshake
from ficc.adapters.hypernet.streams import FrameStream
from ficc.adapters.keys import ClusterKey, verify_signature
from ficc.base.errors import FiccError
from ficc.base.ids import new_id
from ficc.protocol import ALPN
from ficc.protocol.handshake import KnownPeer, Role, Session
from ficc.protocol.liveness import HEARTBEAT_INTERVAL_SECONDS
from ficc.protocol.messages import Heartbeat, Message
from ficc.protocol.requests import RequestSigner
from ficc.protocol.sessions import NonceMemory

LOOPBACK = "127.0.0.1:0"


def server_address(cluster: RunningCluster) -> iroh.EndpointAddr:
    """Where the cluster's companion listens (it must be configured)."""
    return iroh.EndpointTicket.from_string(identity(cluster)["ticket"]).endpoint_addr()


def memory_kib(pid: int) -> dict[str, int]:
    """``VmRSS`` and ``VmHWM`` (the peak) of a process, in KiB."""
    found: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            found[key] = int(value.split()[0])
    return found


def rows(cluster: RunningCluster, table: str) -> int:
    """Rows of one table of the cluster's database, read beside the running server."""
    with sqlite3.connect(f"file:{cluster.state_dir / 'ficc.db'}?mode=ro", uri=True) as db:
        return int(db.execute(f"SELECT count(*) FROM {table}").fetchone()[0])  # noqa: S608


@asynccontextmanager
async def raw_endpoints() -> AsyncIterator[list[iroh.Endpoint]]:
    """Bare iroh endpoints made on demand with :func:`bind`; all closed at the end."""
    iroh_ffi.uniffi_set_event_loop(asyncio.get_running_loop())  # type: ignore[arg-type]
    endpoints: list[iroh.Endpoint] = []
    try:
        yield endpoints
    finally:
        for endpoint in endpoints:
            await endpoint.close()


async def bind(endpoints: list[iroh.Endpoint], address: str = LOOPBACK) -> iroh.Endpoint:
    """A fresh endpoint: a fresh HyperNet ID (bound to ``address``: another loopback address
    is another source)."""
    options = iroh.EndpointOptions(
        preset=iroh.preset_minimal(),
        bind_addr=address,
        alpns=[ALPN],
        relay_mode=iroh.RelayMode.disabled(),
    )
    endpoint = await iroh.Endpoint.bind(options)
    endpoints.append(endpoint)
    return endpoint


class HostileSession:
    """A connection that completed a real handshake at generation 0, driven by hand."""

    def __init__(
        self, connection: iroh.Connection, session: Session, key: ClusterKey, control: FrameStream
    ) -> None:
        self.connection = connection
        self.session = session
        self.key = key
        self.control = control
        self.signer = RequestSigner(session, key)
        self._heartbeats = asyncio.ensure_future(self._beat())

    async def _beat(self) -> None:
        """Heartbeats, as a live peer sends them: the session stays up unless the server ends
        it."""
        counter = 0
        with contextlib.suppress(FiccError):
            while True:
                counter += 1
                await self.control.send(Heartbeat(counter))
                await asyncio.sleep(HEARTBEAT_INTERVAL_SECONDS)

    async def request(self, operation: str, body: dict[str, Any]) -> Message | FiccError | None:
        """One signed request on a new stream; the answer, or the error reading it."""
        stream = FrameStream(await self.connection.open_bi())
        await stream.send(self.signer.sign(operation, body))
        try:
            return await stream.receive()
        except FiccError as exc:
            return exc
        finally:
            await stream.finish()

    def close(self) -> None:
        self._heartbeats.cancel()
        self.connection.close(0, b"done")


async def handshake(
    raw: iroh.Endpoint,
    address: iroh.EndpointAddr,
    *,
    key: ClusterKey | None = None,
    nonce: bytes | None = None,
) -> HostileSession:
    """Connect and complete the handshake as an unknown cluster, heartbeats going."""
    key = key or ClusterKey.generate()
    connection, session, control = await raw_handshake(raw, address, key, nonce)
    return HostileSession(connection, session, key, control)


async def raw_handshake(
    raw: iroh.Endpoint, address: iroh.EndpointAddr, key: ClusterKey, nonce: bytes | None = None
) -> tuple[iroh.Connection, Session, FrameStream]:
    """A connection that completed the real handshake as an unknown cluster (generation 0);
    nothing more is sent on it."""
    connection = await raw.connect(address, ALPN)

    async def unknown(_: str) -> tuple[KnownPeer, ...]:
        return ()

    session, control = await run_handshake(
        connection,
        Role.INITIATOR,
        local_hypernet_id=bytes(raw.id().to_bytes()),
        signer=key,
        verify=verify_signature,
        lookup=unknown,
        nonces=NonceMemory(),
        nonce=nonce,
    )
    return connection, session, control


def offer_body(label: str = "hostile", offer_id: str | None = None) -> dict[str, Any]:
    return {
        "offer": offer_id or new_id("offer", secrets.token_bytes(16)),
        "scopes": ["discover"],
        "label": label,
        "expires_at": "2099-01-01T00:00:00+00:00",
    }


async def closed_within(connection: iroh.Connection, seconds: float) -> str:
    """The close reason, once the server closed the connection."""
    async with asyncio.timeout(seconds):
        return await connection.closed()


def ipv4_only(address: iroh.EndpointAddr) -> iroh.EndpointAddr:
    """``address`` with its IPv4 direct addresses only: the source the server sees is then the
    IPv4 address the client bound (not ``::1`` for everyone)."""
    direct = [a for a in address.direct_addresses() if not a.startswith("[")]
    return iroh.EndpointAddr(address.id(), None, direct)


class Tally:
    """Counts of what a flood's connections met (``held``, ``refused``, ``closed``), and a
    wait for a count to reach a number."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {"held": 0, "refused": 0, "closed": 0}
        self._changed = asyncio.Condition()

    async def add(self, what: str) -> None:
        async with self._changed:
            self.counts[what] += 1
            self._changed.notify_all()

    async def reaches(self, number: int, *what: str) -> None:
        async with self._changed:
            await self._changed.wait_for(lambda: sum(self.counts[w] for w in what) >= number)


async def silent_connections(
    endpoints: list[iroh.Endpoint],
    address: iroh.EndpointAddr,
    *,
    ids: int,
    sources: int,
    tally: Tally,
    reconnect: bool = True,
) -> None:
    """``ids`` fresh HyperNet IDs on ``sources`` loopback addresses (127.0.0.2 …) that
    complete TLS and never send a byte; with ``reconnect`` each connects again as soon as the
    server closes or refuses it."""
    raws = [await bind(endpoints, f"127.0.0.{2 + index % sources}:0") for index in range(ids)]

    async def hold(raw: iroh.Endpoint) -> None:
        while True:
            try:
                connection = await raw.connect(address, ALPN)
            except iroh.IrohError:
                await tally.add("refused")
            else:
                await tally.add("held")
                await connection.closed()
                await tally.add("closed")
            if not reconnect:
                return

    await asyncio.gather(*(hold(raw) for raw in raws))
