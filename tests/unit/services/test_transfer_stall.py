"""A range that stalls pauses its transfer at once: nothing is asked for again automatically
(the contract: requests are never replayed at any layer), and acquiring again resumes it.

A cluster over fakes on virtual time: the stall deadline is the real default, and the pause
comes exactly when it runs out."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from tests.support.fakes.cluster import fake_cluster
from tests.support.fakes.loop_clock import LoopWallClock, run_virtual
from tests.support.isolation import paired_peer

from ficc.base.ids import new_id
from ficc.bootstrap import lifecycle
from ficc.domain import transfers as tr
from ficc.domain.manifests import canonical_sha256, parse_manifest
from ficc.domain.principals import owner_principal
from ficc.services.transfers import Fetcher, Transfers

STALL_SECONDS = tr.STALL_SECONDS
MANIFEST: dict[str, Any] = {
    "name": "silent",
    "format": "gguf",
    "files": [{"path": "w.gguf", "size": 4096, "sha256": "b" * 64}],
    "metadata": {},
}


class SilentGrantor:
    """A grantor that answers the manifest, then never sends a byte of any range."""

    def __init__(self) -> None:
        self.ranges_asked = 0

    async def request(self, *_: object, **__: object) -> dict[str, Any]:
        sha256 = canonical_sha256(parse_manifest(MANIFEST))
        return {"result": {"manifest": MANIFEST, "sha256": sha256, "model": "x"}}

    @contextlib.asynccontextmanager
    async def open_stream(self, *_: object, **__: object) -> AsyncIterator[AsyncIterator[bytes]]:
        self.ranges_asked += 1

        async def silence() -> AsyncIterator[bytes]:
            await asyncio.Event().wait()
            yield b""

        yield silence()


def test_a_stalled_range_pauses_the_transfer_without_asking_again(tmp_path: Path) -> None:
    run_virtual(_stalled(tmp_path))


async def _stalled(tmp_path: Path) -> None:
    cluster = await fake_cluster(tmp_path, clock=LoopWallClock())
    try:
        peer = await paired_peer(cluster)
        async with cluster.uow_factory() as uow:
            stored = await uow.peers.get(peer.id)
            assert stored is not None
            grant_id = new_id("grant", secrets.token_bytes(16))
            await uow.peers.update(replace(stored, selected_grant=grant_id))
            await uow.commit()
        silent = SilentGrantor()
        transfers = Transfers(
            Fetcher(
                cluster.uow_factory,
                cluster.clock,
                silent,  # type: ignore[arg-type]
                cluster.blobs,
                lambda: 2**40,
                stall_seconds=STALL_SECONDS,
            )
        )
        owner = owner_principal("usr_owner", "owner", via="socket")
        model = new_id("model", secrets.token_bytes(16))
        started = await transfers.acquire(owner, "default", peer.id, model=model)
        await asyncio.sleep(STALL_SECONDS - 0.001)
        assert (await transfers.get("default", started.id)).state == "running"
        await asyncio.sleep(0.002)
        view = await transfers.get("default", started.id)
        assert view.state == "paused", view
        assert view.error is not None
        assert "no progress" in view.error
        assert "acquire again" in view.error
        assert view.bytes_done == 0
        assert silent.ranges_asked == 1
        await transfers.close()
    finally:
        await lifecycle.close(cluster)
