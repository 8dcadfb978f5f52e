"""Transfers: acquiring a peer's model file by file, range by range, verified before use."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Final, TypedDict

from ficc.base.errors import InvalidInput
from ficc.base.ids import parse_id
from ficc.base.units import MiB

MAX_RANGE_BYTES: Final = 256 * MiB
"""The Federation API's bound on one ``models.range``."""
RANGE_BYTES: Final = 64 * MiB
"""What FICC asks for at once: an interruption re-fetches at most this much."""
STALL_SECONDS: Final = 30.0
"""A range without progress this long is abandoned (and retried once)."""


class TransferState(StrEnum):
    RUNNING = "running"
    PAUSED = "paused"
    VERIFYING = "verifying"
    COMPLETE = "complete"
    FAILED = "failed"


class TransferFileView(TypedDict):
    """One file of a transfer, as shown and as stored (one shape, :meth:`TransferFile.to_json`)."""

    path: str
    size: int
    sha256: str
    bytes_done: int
    verified: bool


@dataclass(frozen=True)
class TransferFile:
    path: str
    size: int
    sha256: str
    done: int = 0
    verified: bool = False

    def to_json(self) -> TransferFileView:
        return {
            "path": self.path,
            "size": self.size,
            "sha256": self.sha256,
            "bytes_done": self.done,
            "verified": self.verified,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TransferFile:
        return cls(
            path=str(data["path"]),
            size=int(data["size"]),
            sha256=str(data["sha256"]),
            done=int(data["bytes_done"]),
            verified=bool(data["verified"]),
        )


@dataclass(frozen=True)
class Transfer:
    id: str
    project: str
    peer_id: str
    remote_model: str
    grant_id: str
    manifest: dict[str, Any]
    sha256: str
    state: TransferState
    files: tuple[TransferFile, ...]
    local_model: str | None
    error: str | None
    created_at: datetime
    updated_at: datetime

    @property
    def bytes_total(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def bytes_done(self) -> int:
        return sum(f.done for f in self.files)


@dataclass(frozen=True, slots=True)
class TransferView:
    """A transfer as its project sees it (``GET /transfers/{id}``): its record without the
    manifest, with the speed its task measures now."""

    id: str
    peer: str
    model: str
    grant: str
    sha256: str
    state: TransferState
    bytes_done: int
    bytes_total: int
    rate_bytes_per_second: int
    files: tuple[TransferFile, ...]
    local_model: str | None
    error: str | None
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, transfer: Transfer, rate_bytes_per_second: int) -> TransferView:
        return cls(
            id=transfer.id,
            peer=transfer.peer_id,
            model=transfer.remote_model,
            grant=transfer.grant_id,
            sha256=transfer.sha256,
            state=transfer.state,
            bytes_done=transfer.bytes_done,
            bytes_total=transfer.bytes_total,
            rate_bytes_per_second=rate_bytes_per_second,
            files=transfer.files,
            local_model=transfer.local_model,
            error=transfer.error,
            created_at=transfer.created_at,
            updated_at=transfer.updated_at,
        )


def ranges(size: int, done: int, range_bytes: int = RANGE_BYTES) -> Iterator[tuple[int, int]]:
    """The (offset, length) ranges still to fetch of a file with ``done`` bytes on disk.

    Made one at a time: a list of every range of a file a peer declares huge would take the
    requester's memory before any check could refuse the file.
    """
    offset = done
    while offset < size:
        length = min(range_bytes, size - offset)
        yield offset, length
        offset += length


@dataclass(frozen=True)
class RangeRequest:
    """A peer's ``models.range`` body, its numbers checked (the file and digest are checked
    against the model's manifest, which only the grantor's records hold)."""

    model: str
    file: object
    offset: int
    length: int
    digest: object


def parse_range_request(body: Mapping[str, Any]) -> RangeRequest:
    """Check a ``models.range`` body's model ID and span, naming the field of a refusal."""
    model = parse_id("model", body["model"], field="body.model")
    offset, length = body["offset"], body["length"]
    for name, value in (("offset", offset), ("length", length)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidInput(f"body.{name} must be a non-negative integer", field=f"body.{name}")
    if not 1 <= length <= MAX_RANGE_BYTES:
        raise InvalidInput(
            f"body.length must be between 1 and {MAX_RANGE_BYTES}", field="body.length"
        )
    return RangeRequest(model, body["file"], offset, length, body["digest"])
