"""The requester's side of one transfer's run: every file range by range, verified, then
registered.

A range's bytes count as done only after they are fsynced and recorded, so an interruption of
any kind re-fetches at most the range that was in flight. The running hash lives in memory;
after a restart it is rebuilt once by reading the file's partial prefix from local disk (see
docs/transfers.md). Nothing enters the blob store before its SHA-256 matches the manifest, and
the model is registered only when every file did.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Final

from ficc.base.errors import Conflict, FiccError, LimitExceeded, PeerUnreachable
from ficc.base.ids import new_id
from ficc.base.units import MiB
from ficc.domain.catalogue import CatalogueModel
from ficc.domain.manifests import canonical_sha256, parse_manifest
from ficc.domain.principals import Principal
from ficc.domain.remote_grants import RemoteGrant
from ficc.domain.transfers import (
    RANGE_BYTES,
    STALL_SECONDS,
    Transfer,
    TransferFile,
    TransferState,
    ranges,
)
from ficc.services import audit
from ficc.services.ports import BlobStore, Clock, Hasher, UnitOfWorkFactory
from ficc.services.remote.client import RemoteClient

log = logging.getLogger("ficc.transfers")

WRITE_AHEAD_BYTES: Final = 16 * MiB
"""Received bytes that may wait for the requester's disk: memory stays flat in model size."""
SYNC_AHEAD_BYTES: Final = 16 * MiB
"""The writer's thread fsyncs the partial file after every this many bytes of a range, while
more arrive, so the fsync that ends the range (which the transfer waits for) is short."""
DISK_RESERVE_BYTES: Final = 64 * MiB
"""Disk a transfer leaves free for the database and logs."""
FreeDisk = Callable[[], int]


@dataclass
class Fetcher:
    """Runs transfers: fetches, verifies and registers, pausing on what it cannot overcome."""

    uow_factory: UnitOfWorkFactory
    clock: Clock
    remote: RemoteClient
    blobs: BlobStore
    free_disk: FreeDisk
    range_bytes: int = RANGE_BYTES
    stall_seconds: float = STALL_SECONDS
    _hashers: dict[tuple[str, int], tuple[int, Hasher]] = field(default_factory=dict, init=False)
    _rates: dict[str, float] = field(default_factory=dict, init=False)

    def rate(self, transfer_id: str) -> float:
        """Bytes per second of the transfer's current run (0 before its first range)."""
        return self._rates.get(transfer_id, 0.0)

    async def set_state(self, transfer_id: str, state: TransferState, error: str | None) -> None:
        """Record where the transfer stands and why (a transfer gone meanwhile is left be)."""
        async with self.uow_factory() as uow:
            transfer = await uow.transfers.get(transfer_id)
            if transfer is None:
                return
            await uow.transfers.update(
                replace(transfer, state=state, error=error, updated_at=self.clock())
            )
            await uow.commit()

    async def run(self, transfer_id: str, principal: Principal) -> None:
        """A transfer's task: to the end, or paused with the reason it stopped for."""
        try:
            await self._fetch_all(transfer_id, principal)
        except asyncio.CancelledError:
            raise
        except _Failed:
            return
        except _Paused as paused:
            await self.set_state(transfer_id, TransferState.PAUSED, paused.message)
        except FiccError as exc:
            await self.set_state(transfer_id, TransferState.PAUSED, f"{exc.code}: {exc.message}")
        except OSError as exc:
            await self.set_state(
                transfer_id,
                TransferState.PAUSED,
                f"local disk error: {exc.strerror or 'I/O error'}",
            )
        except Exception:
            log.exception("transfer %s stopped on an unexpected error", transfer_id)
            await self.set_state(
                transfer_id,
                TransferState.PAUSED,
                "internal error; see the server log, then acquire again",
            )

    async def _fetch_all(self, transfer_id: str, principal: Principal) -> None:
        async with self.uow_factory() as uow:
            transfer = await uow.transfers.get(transfer_id)
            assert transfer is not None
            peer = await uow.peers.get(transfer.peer_id)
            selected = None if peer is None else peer.selected_grant
            if selected is not None and selected != transfer.grant_id:
                # Ranges travel under the peer's selected grant: after another grant was
                # selected, the transfer continues under it and its record says so.
                transfer = replace(transfer, grant_id=selected, updated_at=self.clock())
                await uow.transfers.update(transfer)
                await uow.commit()
        loop = asyncio.get_running_loop()
        started = loop.time()
        fetched = 0
        for index, entry in enumerate(transfer.files):
            if entry.verified:
                continue
            name = _partial_name(transfer_id, index)
            on_disk = await asyncio.to_thread(self.blobs.partial_size, name)
            done = entry.done
            if on_disk < done:
                # Recorded bytes are missing (the partial file was removed or cut): they cannot
                # be trusted any more, so this file starts again from its first byte.
                log.warning("partial file %s lost recorded bytes; fetching it again", name)
                self._hashers.pop((transfer_id, index), None)
                done = 0
                transfer = await self._record(transfer_id, index, done=0, verified=False)
            # Bytes past the last recorded range were never confirmed: drop them. This also
            # creates the file of an empty or not yet started one.
            await asyncio.to_thread(self.blobs.truncate_partial, name, done)
            hasher = await self._hasher(transfer_id, index, name, done)
            for offset, length in ranges(entry.size, done, self.range_bytes):
                await self._check_room(transfer, length)
                hasher = await self._fetch_range(
                    principal, transfer, entry, name, hasher, offset, length
                )
                done = offset + length
                fetched += length
                self._rates[transfer_id] = fetched / max(loop.time() - started, 1e-6)
                self._hashers[(transfer_id, index)] = (done, hasher)
                transfer = await self._record(transfer_id, index, done=done, verified=False)
            if hasher.hexdigest() != entry.sha256:
                await asyncio.to_thread(self.blobs.remove_partial, name)
                self._hashers.pop((transfer_id, index), None)
                await self._record(transfer_id, index, done=0, verified=False)
                await self.set_state(
                    transfer_id,
                    TransferState.FAILED,
                    f"{entry.path} failed verification: its SHA-256 is not the manifest's; "
                    "nothing was registered",
                )
                raise _Failed
            await asyncio.to_thread(self.blobs.adopt_partial, name, entry.sha256, entry.size)
            self._hashers.pop((transfer_id, index), None)
            transfer = await self._record(transfer_id, index, done=entry.size, verified=True)
        await self._register(transfer_id, principal)

    async def _hasher(self, transfer_id: str, index: int, name: str, done: int) -> Hasher:
        kept = self._hashers.get((transfer_id, index))
        if kept is not None and kept[0] == done:
            return kept[1]
        hasher = hashlib.sha256()
        offset = 0
        while offset < done:
            data = await asyncio.to_thread(
                self.blobs.read_partial, name, offset, min(8 * MiB, done - offset)
            )
            if not data:
                break
            hasher.update(data)
            offset += len(data)
        return hasher

    async def check_room_for_model(self, peer_id: str, grant_id: str, total_bytes: int) -> None:
        """Before any range is asked for: the whole model must fit on disk and in the grant.

        Refused here, a model too large for either costs nothing: no record, no partial file.
        """
        free = await asyncio.to_thread(self.free_disk)
        if total_bytes + DISK_RESERVE_BYTES > free:
            raise LimitExceeded(
                f"the model is {total_bytes} bytes; {free} bytes of disk are free "
                f"(keeping {DISK_RESERVE_BYTES} in reserve)",
                details={"limit": "free_disk", "needed": total_bytes, "free": free},
            )
        remaining = await self._remaining_transfer_bytes(peer_id, grant_id)
        if remaining is not None and total_bytes > remaining:
            raise LimitExceeded(
                f"the model is {total_bytes} bytes; the grant has {remaining} transfer bytes left",
                details={"limit": "transfer_bytes", "needed": total_bytes, "remaining": remaining},
            )

    async def _remaining_transfer_bytes(self, peer_id: str, grant_id: str) -> int | None:
        """What the peer's grant has left to send, as last refreshed; None when not known."""
        async with self.uow_factory() as uow:
            remote = await uow.remote_grants.of_peer(peer_id)
        for grant in map(RemoteGrant.of, remote):
            if grant.id == grant_id and grant.remaining_transfer_bytes is not None:
                return grant.remaining_transfer_bytes
        return None

    async def _check_room(self, transfer: Transfer, length: int) -> None:
        free = await asyncio.to_thread(self.free_disk)
        if free < length + DISK_RESERVE_BYTES:
            raise _Paused(f"disk full: {length} bytes needed for the next range, {free} free")
        remaining = await self._remaining_transfer_bytes(transfer.peer_id, transfer.grant_id)
        if remaining is not None and remaining < length:
            raise _Paused(
                f"limit_exceeded: the grant's remaining transfer_bytes ({remaining}) "
                f"are less than the next range ({length})"
            )

    async def _fetch_range(
        self,
        principal: Principal,
        transfer: Transfer,
        entry: TransferFile,
        name: str,
        hasher: Hasher,
        offset: int,
        length: int,
    ) -> Hasher:
        """One range, then fsynced; a stall pauses the transfer (nothing is retried: the
        user resumes it with another acquire).

        Returns the file's running hash advanced over the range (a copy: a range abandoned
        half-way leaves the caller's hash as it was).
        """
        body = {
            "model": transfer.remote_model,
            "file": entry.path,
            "offset": offset,
            "length": length,
            "digest": entry.sha256,
        }
        loop = asyncio.get_running_loop()
        position = offset
        unsynced = 0
        running = hasher.copy()
        writer = self.blobs.partial_writer(name, running, WRITE_AHEAD_BYTES)
        try:
            # One deadline from asking for the range to its last byte, moved on by every
            # chunk: a peer that goes silent at any point (also before its first byte)
            # is noticed within stall_seconds. Time spent waiting for the local disk is
            # not counted against the peer.
            async with asyncio.timeout(self.stall_seconds) as stall:
                async with self.remote.open_stream(
                    principal,
                    transfer.project,
                    transfer.peer_id,
                    operation="models.range",
                    body=body,
                ) as chunks:
                    async for data in chunks:
                        if position + len(data) > offset + length:
                            raise Conflict("the peer sent more bytes than the range asked for")
                        stall.reschedule(None)
                        # Written and hashed in order on the writer's thread while this
                        # loop goes on receiving; waits only when too much is queued.
                        await writer.write(position, data)
                        position += len(data)
                        unsynced += len(data)
                        if unsynced >= SYNC_AHEAD_BYTES:
                            unsynced = 0
                            await writer.sync()
                        stall.reschedule(loop.time() + self.stall_seconds)
            await writer.drain()
        except TimeoutError as exc:
            raise _Paused(
                f"no progress for {self.stall_seconds:g} s on {entry.path} at byte "
                f"{position}; acquire again to resume"
            ) from exc
        finally:
            # No write of this range may land after it is over.
            await writer.close()
        if position != offset + length:
            raise PeerUnreachable(f"the peer ended the range of {entry.path} early")
        await asyncio.to_thread(self.blobs.sync_partial, name)
        return running

    async def _record(self, transfer_id: str, index: int, *, done: int, verified: bool) -> Transfer:
        async with self.uow_factory() as uow:
            transfer = await uow.transfers.get(transfer_id)
            assert transfer is not None
            files = list(transfer.files)
            files[index] = replace(files[index], done=done, verified=verified)
            updated = replace(transfer, files=tuple(files), updated_at=self.clock())
            await uow.transfers.update(updated)
            await uow.commit()
        return updated

    async def _register(self, transfer_id: str, principal: Principal) -> None:
        async with self.uow_factory() as uow:
            transfer = await uow.transfers.get(transfer_id)
            assert transfer is not None
            await uow.transfers.update(replace(transfer, state=TransferState.VERIFYING))
            await uow.commit()
        manifest = parse_manifest(transfer.manifest)
        if canonical_sha256(manifest) != transfer.sha256:
            await self.set_state(
                transfer_id, TransferState.FAILED, "the manifest changed; nothing registered"
            )
            return
        model = CatalogueModel(
            id=new_id("model", secrets.token_bytes(16)),
            project=transfer.project,
            name=manifest.name,
            format=manifest.format,
            manifest=manifest.to_json(),
            sha256=transfer.sha256,
            created_at=self.clock(),
            provenance={
                "peer": transfer.peer_id,
                "remote_model": transfer.remote_model,
                "grant": transfer.grant_id,
                "transfer": transfer.id,
            },
        )
        async with self.uow_factory() as uow:
            await uow.models.add(model)
            # Every file was fetched and verified into this project: its blobs are its own.
            await uow.models.own_blobs(transfer.project, model.blob_digests())
            await uow.transfers.update(
                replace(
                    transfer,
                    state=TransferState.COMPLETE,
                    local_model=model.id,
                    error=None,
                    updated_at=self.clock(),
                )
            )
            await audit.record_by(
                uow,
                self.clock,
                principal,
                "transfer.completed",
                project=transfer.project,
                target=transfer.id,
                details={"model": model.id, "sha256": model.sha256},
            )
            await uow.commit()


class _Failed(Exception):
    """The transfer failed and says why in its record."""


class _Paused(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _partial_name(transfer_id: str, index: int) -> str:
    return f"{transfer_id}.{index}"
