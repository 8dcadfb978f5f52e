"""A FICC HyperNet peer in its own process, for tests that kill it with SIGKILL.

Usage: ``python hypernet_peer_child.py AGENT_DIRECTORY``. Prints one JSON line
``{"hypernet_id", "ticket"}`` once it accepts peers, then serves echo requests until killed.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from ficc.adapters.hypernet import HyperNetEndpoint
from ficc.adapters.keys import ClusterKey
from ficc.services.ports.peers import KnownPeer, PeerIdentity


async def echo(
    peer: PeerIdentity, operation: str, body: dict[str, Any], body_bytes: int
) -> dict[str, Any]:
    return {"operation": operation, "body": body}


async def unknown(hypernet_id: str) -> tuple[KnownPeer, ...]:
    return ()


async def main(directory: Path) -> None:
    endpoint = HyperNetEndpoint(
        agent_directory=directory,
        cluster_key=ClusterKey.generate(),
        lookup=unknown,
        handler=echo,
        bind_address="127.0.0.1:0",
    )
    await endpoint.start()
    print(json.dumps({"hypernet_id": endpoint.hypernet_id, "ticket": endpoint.ticket}), flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1])))
