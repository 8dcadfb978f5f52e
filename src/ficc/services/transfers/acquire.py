"""Model acquisition from a peer, as its owner drives it: start, resume, pause, show.

The requester fetches the manifest (``models.manifest``: canonical SHA-256 checked, no URL)
and checks that the whole model fits on disk and in the grant before it records anything; a
task of its own then runs the transfer (:mod:`ficc.services.transfers.fetch`).
"""

from __future__ import annotations

import asyncio
import secrets
from dataclasses import replace

from ficc.base.errors import Conflict, NotFound, PeerUnreachable
from ficc.base.ids import new_id, parse_id
from ficc.domain.manifests import canonical_sha256, parse_manifest
from ficc.domain.peers import PeerState
from ficc.domain.principals import Principal
from ficc.domain.transfers import (
    Transfer,
    TransferFile,
    TransferState,
    TransferView,
)
from ficc.services import audit
from ficc.services.transfers.fetch import Fetcher


class Transfers:
    """The requester's transfers: one task per running transfer, its record in the database."""

    def __init__(self, fetcher: Fetcher) -> None:
        """``fetcher`` runs each transfer's task; its database, clock and peers are these."""
        self._uow_factory = fetcher.uow_factory
        self._clock = fetcher.clock
        self._remote = fetcher.remote
        self._fetcher = fetcher
        self._tasks: dict[str, asyncio.Task[None]] = {}
        # Deciding to start a transfer's task and starting it must not interleave with another
        # acquire of the same transfer: two tasks would write one partial file.
        self._starting = asyncio.Lock()

    # --- lifecycle ----------------------------------------------------------------------------

    async def recover(self) -> None:
        """Transfers left running by an earlier FICC process are paused, bytes kept."""
        async with self._uow_factory() as uow:
            for transfer in await uow.transfers.in_state(
                TransferState.RUNNING
            ) + await uow.transfers.in_state(TransferState.VERIFYING):
                await uow.transfers.update(
                    replace(
                        transfer,
                        state=TransferState.PAUSED,
                        error="FICC restarted during the transfer; acquire again to resume",
                        updated_at=self._clock(),
                    )
                )
            await uow.commit()

    async def close(self) -> None:
        for transfer_id in list(self._tasks):
            await self._stop_task(transfer_id)
            await self._set_state(
                transfer_id, TransferState.PAUSED, "FICC stopped; acquire again to resume"
            )

    async def acquire(
        self, principal: Principal, project: str, peer_id: str, *, model: object
    ) -> TransferView:
        """Start, resume, or show the completed acquisition of a peer's model."""
        principal.require_scope("federation:invoke", "models:manage")
        remote_model = parse_id("model", model, field="model")
        async with self._uow_factory() as uow:
            peer = await uow.peers.get(peer_id)
            if peer is None or peer.project != project:
                raise NotFound(f"no peer {peer_id} in project {project}", details={"peer": peer_id})
            existing = await uow.transfers.of_model(project, peer_id, remote_model)
        if existing is not None and existing.state != TransferState.FAILED:
            async with self._starting:
                current = await self._load(project, existing.id)
                if current.state == TransferState.PAUSED and current.id not in self._tasks:
                    await self._set_state(current.id, TransferState.RUNNING, None)
                    self._start(current.id, principal)
            return await self.get(project, existing.id)
        if peer.state != PeerState.PAIRED or peer.selected_grant is None:
            raise Conflict(f"peer {peer_id} is not paired with a selected grant")
        answer = await self._remote.request(
            principal, project, peer_id, operation="models.manifest", body={"model": remote_model}
        )
        result = answer["result"]
        if not isinstance(result, dict):
            raise PeerUnreachable("the peer's manifest answer is not an object")
        manifest = parse_manifest(result.get("manifest"), field="manifest")
        digest = canonical_sha256(manifest)
        if result.get("sha256") != digest:
            raise Conflict(
                "the peer's manifest does not match its canonical SHA-256",
                details={"expected": result.get("sha256"), "actual": digest},
            )
        await self._fetcher.check_room_for_model(peer_id, peer.selected_grant, manifest.total_bytes)
        now = self._clock()
        transfer = Transfer(
            id=new_id("transfer", secrets.token_bytes(16)),
            project=project,
            peer_id=peer_id,
            remote_model=remote_model,
            grant_id=peer.selected_grant,
            manifest=manifest.to_json(),
            sha256=digest,
            state=TransferState.RUNNING,
            files=tuple(TransferFile(f.path, f.size, f.sha256) for f in manifest.files),
            local_model=None,
            error=None,
            created_at=now,
            updated_at=now,
        )
        async with self._uow_factory() as uow:
            await uow.transfers.add(transfer)
            await audit.record_by(
                uow,
                self._clock,
                principal,
                "transfer.started",
                project=project,
                target=transfer.id,
                details={"peer": peer_id, "model": remote_model, "sha256": digest},
            )
            await uow.commit()
        self._start(transfer.id, principal)
        return await self.get(project, transfer.id)

    async def pause(self, principal: Principal, project: str, transfer_id: str) -> TransferView:
        """Stop at once; bytes on disk stay for the next acquire."""
        principal.require_scope("federation:invoke")
        transfer = await self._load(project, transfer_id)
        if transfer.state in (TransferState.COMPLETE, TransferState.FAILED):
            raise Conflict(
                f"transfer {transfer_id} is {transfer.state}", details={"state": transfer.state}
            )
        async with self._starting:
            stopped = await self._stop_task(transfer_id)
            current = await self._load(project, transfer_id)
            if current.state in (TransferState.COMPLETE, TransferState.FAILED):
                # It finished while it was being stopped: nothing is left to pause.
                return self._view(current)
            # Pausing a transfer that is paused already keeps the reason it paused for.
            error = current.error if not stopped and current.state == TransferState.PAUSED else None
            await self._set_state(transfer_id, TransferState.PAUSED, error)
        return await self.get(project, transfer_id)

    async def get(self, project: str, transfer_id: str) -> TransferView:
        return self._view(await self._load(project, transfer_id))

    async def list(self, project: str) -> list[TransferView]:
        async with self._uow_factory() as uow:
            return [self._view(t) for t in await uow.transfers.in_project(project)]

    async def _load(self, project: str, transfer_id: str) -> Transfer:
        async with self._uow_factory() as uow:
            transfer = await uow.transfers.get(transfer_id)
        if transfer is None or transfer.project != project:
            raise NotFound(f"no transfer {transfer_id}", details={"transfer": transfer_id})
        return transfer

    def _view(self, transfer: Transfer) -> TransferView:
        return TransferView.of(transfer, round(self._fetcher.rate(transfer.id)))

    def _start(self, transfer_id: str, principal: Principal) -> None:
        task = asyncio.create_task(self._fetcher.run(transfer_id, principal))
        self._tasks[transfer_id] = task

        def forget(done: asyncio.Task[None]) -> None:
            # Only this task's own entry: a later task of the same transfer may have replaced it.
            if self._tasks.get(transfer_id) is done:
                del self._tasks[transfer_id]

        task.add_done_callback(forget)

    async def _stop_task(self, transfer_id: str) -> bool:
        """Cancel the transfer's task and wait for it; whether one was running."""
        task = self._tasks.pop(transfer_id, None)
        if task is None:
            return False
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return True

    async def _set_state(self, transfer_id: str, state: TransferState, error: str | None) -> None:
        await self._fetcher.set_state(transfer_id, state, error)
