"""Model acquisition from a peer: verified, resumable, within the grant's allowance.

The requester fetches the manifest (``models.manifest``: canonical SHA-256 checked, no URL),
then each file range by range (``models.range``) into a partial file, hashing as it writes.
A range's bytes count as done only after they are fsynced and recorded, so an interruption of
any kind re-fetches at most the range that was in flight. The running hash lives in memory;
after a restart it is rebuilt once by reading the file's partial prefix from local disk (see
docs/transfers.md). Nothing enters the blob store before its SHA-256 matches the manifest, and
the model is registered only when every file did.

The grantor's side (``serve_range``) reserves the range's bytes from ``transfer_bytes`` before
sending and gives back what it could not send.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import hashlib
import logging
import secrets
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any, Final

from ficc.base.errors import (
    Conflict,
    FiccError,
    InvalidInput,
    LimitExceeded,
    NotFound,
    Unavailable,
)
from ficc.base.ids import new_id, parse_id
from ficc.base.units import MiB
from ficc.domain import peers as p
from ficc.domain import transfers as tr
from ficc.domain.catalogue import CatalogueModel
from ficc.domain.manifests import canonical_sha256, parse_manifest
from ficc.domain.principals import Principal
from ficc.services import audit
from ficc.services.catalogue import resolves
from ficc.services.ports import BlobStore, Clock, UnitOfWorkFactory
from ficc.services.remote.call import Call
from ficc.services.remote.client import RemoteClient

log = logging.getLogger("ficc.transfers")

CHUNK_BYTES: Final = 1 * MiB
"""What the grantor reads from disk and sends at once."""
WRITE_AHEAD_BYTES: Final = 16 * MiB
"""Received bytes that may wait for the requester's disk: memory stays flat in model size."""
SYNC_AHEAD_BYTES: Final = 16 * MiB
"""The writer's thread fsyncs the partial file after every this many bytes of a range, while
more arrive, so the fsync that ends the range (which the transfer waits for) is short."""
DISK_RESERVE_BYTES: Final = 64 * MiB
"""Disk a transfer leaves free for the database and logs."""
FreeDisk = Callable[[], int]


class Transfers:
    def __init__(
        self,
        uow_factory: UnitOfWorkFactory,
        clock: Clock,
        remote: RemoteClient,
        blobs: BlobStore,
        free_disk: FreeDisk,
        *,
        range_bytes: int = tr.RANGE_BYTES,
        stall_seconds: float = tr.STALL_SECONDS,
    ) -> None:
        self._uow_factory = uow_factory
        self._clock = clock
        self._remote = remote
        self._blobs = blobs
        self._free_disk = free_disk
        self._range_bytes = range_bytes
        self._stall_seconds = stall_seconds
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._hashers: dict[tuple[str, int], tuple[int, Any]] = {}
        self._rates: dict[str, float] = {}
        # Deciding to start a transfer's task and starting it must not interleave with another
        # acquire of the same transfer: two tasks would write one partial file.
        self._starting = asyncio.Lock()

    # --- lifecycle ----------------------------------------------------------------------------

    async def recover(self) -> None:
        """Transfers left running by an earlier FICC process are paused, bytes kept."""
        async with self._uow_factory() as uow:
            for transfer in await uow.transfers.in_state(tr.RUNNING) + await uow.transfers.in_state(
                tr.VERIFYING
            ):
                await uow.transfers.update(
                    replace(
                        transfer,
                        state=tr.PAUSED,
                        error="FICC restarted during the transfer; acquire again to resume",
                        updated_at=self._clock(),
                    )
                )
            await uow.commit()

    async def close(self) -> None:
        for transfer_id in list(self._tasks):
            await self._stop_task(transfer_id)
            await self._set_state(transfer_id, tr.PAUSED, "FICC stopped; acquire again to resume")

    # --- the requester's side -------------------------------------------------------------------

    async def acquire(
        self, principal: Principal, project: str, peer_id: str, *, model: object
    ) -> dict[str, Any]:
        """Start, resume, or show the completed acquisition of a peer's model."""
        principal.require_scope("federation:invoke", "models:manage")
        remote_model = parse_id("model", model, field="model")
        async with self._uow_factory() as uow:
            peer = await uow.peers.get(peer_id)
            if peer is None or peer.project != project:
                raise NotFound(f"no peer {peer_id} in project {project}", details={"peer": peer_id})
            existing = await uow.transfers.of_model(project, peer_id, remote_model)
        if existing is not None and existing.state != tr.FAILED:
            async with self._starting:
                current = await self._load(project, existing.id)
                if current.state == tr.PAUSED and current.id not in self._tasks:
                    await self._set_state(current.id, tr.RUNNING, None)
                    self._start(current.id, principal)
            return await self.get(project, existing.id)
        if peer.state != p.PAIRED or peer.selected_grant is None:
            raise Conflict(f"peer {peer_id} is not paired with a selected grant")
        answer = await self._remote.request(
            principal, project, peer_id, operation="models.manifest", body={"model": remote_model}
        )
        result = answer["result"]
        if not isinstance(result, dict):
            raise Unavailable("the peer's manifest answer is not an object")
        manifest = parse_manifest(result.get("manifest"), field="manifest")
        digest = canonical_sha256(manifest)
        if result.get("sha256") != digest:
            raise Conflict(
                "the peer's manifest does not match its canonical SHA-256",
                details={"expected": result.get("sha256"), "actual": digest},
            )
        await self._check_room_for_model(peer_id, peer.selected_grant, manifest.total_bytes)
        now = self._clock()
        transfer = tr.Transfer(
            id=new_id("transfer", secrets.token_bytes(16)),
            project=project,
            peer_id=peer_id,
            remote_model=remote_model,
            grant_id=peer.selected_grant,
            manifest=manifest.to_json(),
            sha256=digest,
            state=tr.RUNNING,
            files=tuple(tr.TransferFile(f.path, f.size, f.sha256) for f in manifest.files),
            local_model=None,
            error=None,
            created_at=now,
            updated_at=now,
        )
        async with self._uow_factory() as uow:
            await uow.transfers.add(transfer)
            await audit.record(
                uow,
                self._clock,
                action="transfer.started",
                actor=audit.actor_of(principal),
                project=project,
                target=transfer.id,
                details={"peer": peer_id, "model": remote_model, "sha256": digest},
            )
            await uow.commit()
        self._start(transfer.id, principal)
        return await self.get(project, transfer.id)

    async def pause(self, principal: Principal, project: str, transfer_id: str) -> dict[str, Any]:
        """Stop at once; bytes on disk stay for the next acquire."""
        principal.require_scope("federation:invoke")
        transfer = await self._load(project, transfer_id)
        if transfer.state in (tr.COMPLETE, tr.FAILED):
            raise Conflict(
                f"transfer {transfer_id} is {transfer.state}", details={"state": transfer.state}
            )
        async with self._starting:
            stopped = await self._stop_task(transfer_id)
            current = await self._load(project, transfer_id)
            if current.state in (tr.COMPLETE, tr.FAILED):
                # It finished while it was being stopped: nothing is left to pause.
                return self._json(current)
            # Pausing a transfer that is paused already keeps the reason it paused for.
            error = current.error if not stopped and current.state == tr.PAUSED else None
            await self._set_state(transfer_id, tr.PAUSED, error)
        return await self.get(project, transfer_id)

    async def get(self, project: str, transfer_id: str) -> dict[str, Any]:
        return self._json(await self._load(project, transfer_id))

    async def list(self, project: str) -> list[dict[str, Any]]:
        async with self._uow_factory() as uow:
            return [self._json(t) for t in await uow.transfers.in_project(project)]

    async def _load(self, project: str, transfer_id: str) -> tr.Transfer:
        async with self._uow_factory() as uow:
            transfer = await uow.transfers.get(transfer_id)
        if transfer is None or transfer.project != project:
            raise NotFound(f"no transfer {transfer_id}", details={"transfer": transfer_id})
        return transfer

    def _json(self, transfer: tr.Transfer) -> dict[str, Any]:
        return {
            "id": transfer.id,
            "peer": transfer.peer_id,
            "model": transfer.remote_model,
            "grant": transfer.grant_id,
            "sha256": transfer.sha256,
            "state": transfer.state,
            "bytes_done": transfer.bytes_done,
            "bytes_total": transfer.bytes_total,
            "rate_bytes_per_second": round(self._rates.get(transfer.id, 0.0)),
            "files": [f.to_json() for f in transfer.files],
            "local_model": transfer.local_model,
            "error": transfer.error,
            "created_at": transfer.created_at,
            "updated_at": transfer.updated_at,
        }

    def _start(self, transfer_id: str, principal: Principal) -> None:
        task = asyncio.create_task(self._run(transfer_id, principal))
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

    async def _set_state(self, transfer_id: str, state: str, error: str | None) -> None:
        async with self._uow_factory() as uow:
            transfer = await uow.transfers.get(transfer_id)
            if transfer is None:
                return
            await uow.transfers.update(
                replace(transfer, state=state, error=error, updated_at=self._clock())
            )
            await uow.commit()

    async def _run(self, transfer_id: str, principal: Principal) -> None:
        try:
            await self._fetch_all(transfer_id, principal)
        except asyncio.CancelledError:
            raise
        except _Failed:
            return
        except _Paused as paused:
            await self._set_state(transfer_id, tr.PAUSED, paused.message)
        except FiccError as exc:
            await self._set_state(transfer_id, tr.PAUSED, f"{exc.code}: {exc.message}")
        except OSError as exc:
            await self._set_state(
                transfer_id, tr.PAUSED, f"local disk error: {exc.strerror or 'I/O error'}"
            )
        except Exception:
            log.exception("transfer %s stopped on an unexpected error", transfer_id)
            await self._set_state(
                transfer_id, tr.PAUSED, "internal error; see the server log, then acquire again"
            )

    async def _fetch_all(self, transfer_id: str, principal: Principal) -> None:
        async with self._uow_factory() as uow:
            transfer = await uow.transfers.get(transfer_id)
            assert transfer is not None
            peer = await uow.peers.get(transfer.peer_id)
            selected = None if peer is None else peer.selected_grant
            if selected is not None and selected != transfer.grant_id:
                # Ranges travel under the peer's selected grant: after another grant was
                # selected, the transfer continues under it and its record says so.
                transfer = replace(transfer, grant_id=selected, updated_at=self._clock())
                await uow.transfers.update(transfer)
                await uow.commit()
        started = time.monotonic()
        fetched = 0
        for index, entry in enumerate(transfer.files):
            if entry.verified:
                continue
            name = _partial_name(transfer_id, index)
            on_disk = await asyncio.to_thread(self._blobs.partial_size, name)
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
            await asyncio.to_thread(self._blobs.truncate_partial, name, done)
            hasher = await self._hasher(transfer_id, index, name, done)
            for offset, length in tr.ranges(entry.size, done, self._range_bytes):
                await self._check_room(transfer, length)
                hasher = await self._fetch_range(
                    principal, transfer, entry, name, hasher, offset, length
                )
                done = offset + length
                fetched += length
                self._rates[transfer_id] = fetched / max(time.monotonic() - started, 1e-6)
                self._hashers[(transfer_id, index)] = (done, hasher)
                transfer = await self._record(transfer_id, index, done=done, verified=False)
            if hasher.hexdigest() != entry.sha256:
                await asyncio.to_thread(self._blobs.remove_partial, name)
                self._hashers.pop((transfer_id, index), None)
                await self._record(transfer_id, index, done=0, verified=False)
                await self._set_state(
                    transfer_id,
                    tr.FAILED,
                    f"{entry.path} failed verification: its SHA-256 is not the manifest's; "
                    "nothing was registered",
                )
                raise _Failed
            await asyncio.to_thread(self._blobs.adopt_partial, name, entry.sha256, entry.size)
            self._hashers.pop((transfer_id, index), None)
            transfer = await self._record(transfer_id, index, done=entry.size, verified=True)
        await self._register(transfer_id, principal)

    async def _hasher(self, transfer_id: str, index: int, name: str, done: int) -> Any:
        kept = self._hashers.get((transfer_id, index))
        if kept is not None and kept[0] == done:
            return kept[1]
        hasher = hashlib.sha256()
        offset = 0
        while offset < done:
            data = await asyncio.to_thread(
                self._blobs.read_partial, name, offset, min(8 * MiB, done - offset)
            )
            if not data:
                break
            hasher.update(data)
            offset += len(data)
        return hasher

    async def _check_room_for_model(self, peer_id: str, grant_id: str, total_bytes: int) -> None:
        """Before any range is asked for: the whole model must fit on disk and in the grant.

        Refused here, a model too large for either costs nothing: no record, no partial file.
        """
        free = await asyncio.to_thread(self._free_disk)
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
        async with self._uow_factory() as uow:
            remote = await uow.remote_grants.of_peer(peer_id)
        for grant in remote:
            if grant.get("id") == grant_id:
                remaining = grant.get("remaining", {}).get("transfer_bytes")
                if isinstance(remaining, int):
                    return remaining
        return None

    async def _check_room(self, transfer: tr.Transfer, length: int) -> None:
        free = await asyncio.to_thread(self._free_disk)
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
        transfer: tr.Transfer,
        entry: tr.TransferFile,
        name: str,
        hasher: Any,
        offset: int,
        length: int,
    ) -> Any:
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
        writer = _OrderedWriter(WRITE_AHEAD_BYTES)
        try:
            # One deadline from asking for the range to its last byte, moved on by every
            # chunk: a peer that goes silent at any point (also before its first byte)
            # is noticed within stall_seconds. Time spent waiting for the local disk is
            # not counted against the peer.
            async with asyncio.timeout(self._stall_seconds) as stall:
                async with self._remote.open_stream(
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
                        await writer.submit(len(data), self._write, name, position, data, running)
                        position += len(data)
                        unsynced += len(data)
                        if unsynced >= SYNC_AHEAD_BYTES:
                            unsynced = 0
                            await writer.submit(0, self._blobs.sync_partial, name)
                        stall.reschedule(loop.time() + self._stall_seconds)
            await writer.drain()
        except TimeoutError as exc:
            raise _Paused(
                f"no progress for {self._stall_seconds:g} s on {entry.path} at byte "
                f"{position}; acquire again to resume"
            ) from exc
        finally:
            # No write of this range may land after it is over.
            await writer.close()
        if position != offset + length:
            raise Unavailable(f"the peer ended the range of {entry.path} early")
        await asyncio.to_thread(self._blobs.sync_partial, name)
        return running

    def _write(self, name: str, position: int, data: bytes, running: Any) -> None:
        """Write and hash in a worker thread: both release the GIL on large buffers."""
        self._blobs.write_partial_at(name, position, data)
        running.update(data)

    async def _record(
        self, transfer_id: str, index: int, *, done: int, verified: bool
    ) -> tr.Transfer:
        async with self._uow_factory() as uow:
            transfer = await uow.transfers.get(transfer_id)
            assert transfer is not None
            files = list(transfer.files)
            files[index] = replace(files[index], done=done, verified=verified)
            updated = replace(transfer, files=tuple(files), updated_at=self._clock())
            await uow.transfers.update(updated)
            await uow.commit()
        return updated

    async def _register(self, transfer_id: str, principal: Principal) -> None:
        async with self._uow_factory() as uow:
            transfer = await uow.transfers.get(transfer_id)
            assert transfer is not None
            await uow.transfers.update(replace(transfer, state=tr.VERIFYING))
            await uow.commit()
        manifest = parse_manifest(transfer.manifest)
        if canonical_sha256(manifest) != transfer.sha256:
            await self._set_state(
                transfer_id, tr.FAILED, "the manifest changed; nothing registered"
            )
            return
        model = CatalogueModel(
            id=new_id("model", secrets.token_bytes(16)),
            project=transfer.project,
            name=manifest.name,
            format=manifest.format,
            manifest=manifest.to_json(),
            sha256=transfer.sha256,
            created_at=self._clock(),
            provenance={
                "peer": transfer.peer_id,
                "remote_model": transfer.remote_model,
                "grant": transfer.grant_id,
                "transfer": transfer.id,
            },
        )
        async with self._uow_factory() as uow:
            await uow.models.add(model)
            # Every file was fetched and verified into this project: its blobs are its own.
            await uow.models.own_blobs(transfer.project, model.blob_digests())
            await uow.transfers.update(
                replace(
                    transfer,
                    state=tr.COMPLETE,
                    local_model=model.id,
                    error=None,
                    updated_at=self._clock(),
                )
            )
            await audit.record(
                uow,
                self._clock,
                action="transfer.completed",
                actor=audit.actor_of(principal),
                project=transfer.project,
                target=transfer.id,
                details={"model": model.id, "sha256": model.sha256},
            )
            await uow.commit()

    # --- the grantor's side ------------------------------------------------------------------

    async def serve_range(self, call: Call) -> AsyncIterator[bytes]:
        """Stream one verified range of a granted model's file, charged to transfer_bytes."""
        body = call.body
        model_id = parse_id("model", body["model"], field="body.model")
        call.require("models", model_id, "body.model")
        offset, length = body["offset"], body["length"]
        for name, value in (("offset", offset), ("length", length)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidInput(
                    f"body.{name} must be a non-negative integer", field=f"body.{name}"
                )
        if not 1 <= length <= tr.MAX_RANGE_BYTES:
            raise InvalidInput(
                f"body.length must be between 1 and {tr.MAX_RANGE_BYTES}", field="body.length"
            )
        async with self._uow_factory() as uow:
            model = await uow.models.get(model_id)
            if model is None or model.project != call.grant.project:
                raise NotFound(f"no model {model_id}", details={"model": model_id})
            entry = next((f for f in model.manifest["files"] if f["path"] == body["file"]), None)
            if entry is None:
                raise InvalidInput("body.file is not a file of the model", field="body.file")
            owned = await resolves(uow, model, [str(entry["sha256"])])
        if body["digest"] != entry["sha256"]:
            raise InvalidInput("body.digest is not the file's SHA-256", field="body.digest")
        if offset + length > int(entry["size"]):
            raise InvalidInput("the range passes the end of the file", field="body.length")
        # A blob another project owns, or (for a peer's own record) one its grant never gave
        # it, reads exactly like one that is not stored: naming its digest in a record reads no
        # bytes and tells nothing.
        if not owned or not self._blobs.has(entry["sha256"]):
            raise Unavailable("the file is not stored on this cluster")
        async with self._uow_factory() as uow:
            # Reserve first, then check what the reservation left: the write holds the
            # database's write lock until commit, so two ranges of one grant cannot both pass.
            # A refused range rolls back, so nothing of it is charged.
            await uow.grants.charge(call.grant.id, requests=0, transfer_bytes=length)
            grant = await uow.grants.get(call.grant.id)
            assert grant is not None
            remaining = grant.terms.transfer_bytes - grant.transfer_bytes_used + length
            if length > remaining:
                raise LimitExceeded(
                    f"the range is {length} bytes; the grant has {max(remaining, 0)} "
                    "transfer bytes left",
                    details={"limit": "transfer_bytes", "remaining": max(remaining, 0)},
                )
            await uow.commit()
        sha256 = str(entry["sha256"])

        def read(at: int) -> asyncio.Future[bytes]:
            size = min(CHUNK_BYTES, offset + length - at)
            return asyncio.ensure_future(asyncio.to_thread(self._blobs.read_blob, sha256, at, size))

        sent = 0
        # The next chunk is read from disk while the current one is being sent.
        reading: asyncio.Future[bytes] | None = read(offset)
        try:
            while reading is not None:
                data = await reading
                reading = None
                if not data:
                    break
                if sent + len(data) < length:
                    reading = read(offset + sent + len(data))
                sent += len(data)
                yield data
        finally:
            if reading is not None:
                reading.cancel()
            if sent < length:
                with contextlib.suppress(FiccError):
                    await self._refund(call.grant.id, length - sent)

    async def _refund(self, grant_id: str, unsent: int) -> None:
        async with self._uow_factory() as uow:
            await uow.grants.charge(grant_id, requests=0, transfer_bytes=-unsent)
            await uow.commit()


class _Failed(Exception):
    """The transfer failed and says why in its record."""


class _Paused(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class _OrderedWriter:
    """Runs write-and-hash jobs in submission order on one thread of its own.

    The event loop hands each received chunk over and goes back to receiving; it waits only
    while more than ``limit`` bytes are queued. Errors surface in :meth:`submit` or
    :meth:`drain`. :meth:`close` waits for every submitted job, also after a cancellation, so
    no write of an abandoned range can land later.
    """

    def __init__(self, limit: int) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ficc-transfer")
        self._limit = limit
        self._pending: deque[tuple[concurrent.futures.Future[None], int]] = deque()
        self._queued = 0

    async def submit(self, size: int, job: Callable[..., None], *args: Any) -> None:
        """Queue ``job(*args)``, which holds ``size`` bytes until it has run."""
        self._pending.append((self._executor.submit(job, *args), size))
        self._queued += size
        while self._queued > self._limit:
            await self._oldest()

    async def _oldest(self) -> None:
        future, size = self._pending[0]
        await asyncio.wrap_future(future)
        self._pending.popleft()
        self._queued -= size

    async def drain(self) -> None:
        while self._pending:
            await self._oldest()

    async def close(self) -> None:
        self._pending.clear()
        await asyncio.shield(asyncio.to_thread(self._executor.shutdown, True))


def _partial_name(transfer_id: str, index: int) -> str:
    return f"{transfer_id}.{index}"
