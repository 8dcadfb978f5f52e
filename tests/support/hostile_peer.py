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

from ficc.adapters.hypernet.handshake import NonceMemory, run_handshake
from ficc.adapters.hypernet.keys import ed25519_verify
from ficc.adapters.hypernet.streams import FrameStream
from ficc.adapters.keys import ClusterKey
from ficc.base.errors import FiccError
from ficc.base.ids import new_id
from ficc.protocol import ALPN
from ficc.protocol.handshake import KnownPeer, Role, Session
from ficc.protocol.liveness import HEARTBEAT_INTERVAL_SECONDS
from ficc.protocol.messages import Heartbeat, Message
from ficc.protocol.requests import RequestSigner

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


async def bind(endpoints: list[iroh.Endpoint]) -> iroh.Endpoint:
    """A fresh endpoint: a fresh HyperNet ID."""
    options = iroh.EndpointOptions(
        preset=iroh.preset_minimal(),
        bind_addr=LOOPBACK,
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
        verify=ed25519_verify,
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
