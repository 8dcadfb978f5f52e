"""HyperNet figures: a connection that fails its handshake is counted, by this side's role."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import iroh
import pytest

from ficc.adapters.hypernet import HyperNetEndpoint
from ficc.adapters.hypernet.streams import FrameStream
from ficc.adapters.keys import ClusterKey
from ficc.adapters.metrics import REGISTRY
from ficc.protocol import ALPN
from ficc.protocol.handshake import KnownPeer

LOOPBACK = "127.0.0.1:0"
FAILURES = "ficc_hypernet_handshake_failures_total"
DEADLINE_SECONDS = 10.0


async def _nobody(_: str) -> tuple[KnownPeer, ...]:
    return ()


async def _refuse(*_: Any) -> dict[str, Any]:
    raise AssertionError("no request can arrive without a handshake")


def _failures(role: str) -> float:
    return REGISTRY.get_sample_value(FAILURES, {"role": role}) or 0.0


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[HyperNetEndpoint]:
    endpoint = HyperNetEndpoint(
        agent_directory=tmp_path / "agent",
        cluster_key=ClusterKey.generate(),
        lookup=_nobody,
        handler=_refuse,
        bind_address=LOOPBACK,
    )
    await endpoint.start()
    yield endpoint
    await endpoint.stop()


async def test_a_garbled_handshake_is_counted_as_a_responder_failure(
    server: HyperNetEndpoint,
) -> None:
    before = _failures("responder")
    options = iroh.EndpointOptions(
        preset=iroh.preset_minimal(),
        bind_addr=LOOPBACK,
        alpns=[ALPN],
        relay_mode=iroh.RelayMode.disabled(),
    )
    client = await iroh.Endpoint.bind(options)
    try:
        address = iroh.EndpointTicket.from_string(server.ticket).endpoint_addr()
        connection = await client.connect(address, ALPN)
        stream = FrameStream(await connection.open_bi())
        await stream.write(b"\x00\x00\x00\x01\xff")  # one frame, an unknown tag
        # The server counts the failure, then refuses and closes the connection.
        async with asyncio.timeout(DEADLINE_SECONDS):
            await connection.closed()
        assert _failures("responder") == before + 1
        assert REGISTRY.get_sample_value("ficc_hypernet_sessions") == 0
    finally:
        await client.close()
