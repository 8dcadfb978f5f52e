"""A HyperNet peer in its own process that floods the test's endpoint with large bodies
(``body``) or answers every request with a large JSON answer (``answer``), so the test's
event loop measures only its own side.

Usage: ``python -m tests.support.flood_peer MODE DIRECTORY PEER_HEX_KEY SIZE COUNT``. Prints
``{"hypernet_id", "cluster_key", "ticket"}``, then reads one line ``{"hypernet_id",
"ticket"}`` naming the test's endpoint (paired with it at generation 4). ``body``: sends
COUNT requests ``measure`` with a body of SIZE bytes at generation 4, two at a time, and
prints the error code of each (or ``"ok"``); ``answer``: answers each request with SIZE bytes
until killed.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from ficc.adapters.hypernet import HyperNetEndpoint
from ficc.adapters.keys import ClusterKey
from ficc.base.errors import FiccError
from ficc.services.ports.peers import KnownPeer, PeerIdentity

GENERATION = 4


async def main(mode: str, directory: Path, peer_key: bytes, size: int, count: int) -> None:
    async def lookup(hypernet_id: str) -> tuple[KnownPeer, ...]:
        return (KnownPeer(peer_key, GENERATION),)

    async def handle(
        peer: PeerIdentity, operation: str, body: dict[str, Any], body_bytes: int
    ) -> dict[str, Any]:
        return {"text": "z" * size}

    key = ClusterKey.generate()
    endpoint = HyperNetEndpoint(
        agent_directory=directory,
        cluster_key=key,
        lookup=lookup,
        handler=handle,
        bind_address="127.0.0.1:0",
    )
    await endpoint.start()
    line = {"hypernet_id": endpoint.hypernet_id, "cluster_key": key.public_key.hex()}
    print(json.dumps({**line, "ticket": endpoint.ticket}), flush=True)
    target = json.loads(await asyncio.to_thread(sys.stdin.readline))
    if mode == "answer":
        await asyncio.Event().wait()
    body = {"text": "y" * size}
    outcomes: list[str] = []

    async def send() -> None:
        try:
            await endpoint.request(
                target["hypernet_id"],
                "measure",
                body,
                generation=GENERATION,
                ticket=target["ticket"],
                timeout_seconds=60,
            )
            outcomes.append("ok")
        except FiccError as exc:
            outcomes.append(exc.code)

    for _ in range(count // 2):
        await asyncio.gather(send(), send())
    print(json.dumps(outcomes), flush=True)
    await endpoint.stop()


if __name__ == "__main__":
    mode, directory, key_hex, size, count = sys.argv[1:6]
    asyncio.run(main(mode, Path(directory), bytes.fromhex(key_hex), int(size), int(count)))
