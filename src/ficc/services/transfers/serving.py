"""The grantor's side of a transfer: ``models.range``, one verified range of a granted file.

The range's bytes are reserved from the grant's ``transfer_bytes`` before the first is sent,
and what could not be sent is given back. Nothing here knows the requester's side, so the
operation table names this handler without importing the requester (no import cycle).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Final

from ficc.base.errors import FiccError, InvalidInput, LimitExceeded, NotFound, PeerUnreachable
from ficc.base.units import MiB
from ficc.domain.transfers import parse_range_request
from ficc.services.catalogue import resolves
from ficc.services.ports import BlobStore, UnitOfWorkFactory
from ficc.services.remote.call import Call

CHUNK_BYTES: Final = 1 * MiB
"""What the grantor reads from disk and sends at once."""


class RangeServer:
    """Serves ``models.range`` under a grant."""

    def __init__(self, uow_factory: UnitOfWorkFactory, blobs: BlobStore) -> None:
        self._uow_factory = uow_factory
        self._blobs = blobs

    async def serve_range(self, call: Call) -> AsyncIterator[bytes]:
        """Stream one verified range of a granted model's file, charged to transfer_bytes."""
        asked = parse_range_request(call.body)
        call.require("models", asked.model, "body.model")
        offset, length = asked.offset, asked.length
        async with self._uow_factory() as uow:
            model = await uow.models.get(asked.model)
            if model is None or model.project != call.grant.project:
                raise NotFound(f"no model {asked.model}", details={"model": asked.model})
            entry = next((f for f in model.manifest["files"] if f["path"] == asked.file), None)
            if entry is None:
                raise InvalidInput("body.file is not a file of the model", field="body.file")
            owned = await resolves(uow, model, [str(entry["sha256"])])
        if asked.digest != entry["sha256"]:
            raise InvalidInput("body.digest is not the file's SHA-256", field="body.digest")
        if offset + length > int(entry["size"]):
            raise InvalidInput("the range passes the end of the file", field="body.length")
        # A blob another project owns, or (for a peer's own record) one its grant never gave
        # it, reads exactly like one that is not stored: naming its digest in a record reads no
        # bytes and tells nothing.
        if not owned or not self._blobs.has(entry["sha256"]):
            raise PeerUnreachable("the file is not stored on this cluster")
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
