"""File operations the blob store is made of: durable renames, locked temp files, hashing.

Each is a small blocking call on descriptors; :func:`in_thread` runs one off the event loop
without abandoning it half-done.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import os
import stat
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, TypeVar

from ficc.base.errors import InvalidInput
from ficc.base.units import MiB

T = TypeVar("T")

CHUNK_BYTES: Final = 1 * MiB
BLOB_MODE: Final = 0o444
TEMP_SUFFIX: Final = ".tmp"


def fsync_directory(directory: Path) -> None:
    """Make a rename or unlink in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def open_regular_file(path: Path, *, field: str) -> int:
    """Open for reading without blocking on a FIFO, and refuse anything but a regular file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError as exc:
        raise InvalidInput(f"{field} does not exist: {path}", field=field) from exc
    except OSError as exc:
        raise InvalidInput(f"{field} cannot be read: {exc.strerror}", field=field) from exc
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise InvalidInput(f"{field} is not a regular file: {path}", field=field)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def hash_fd(fd: int) -> tuple[str, int]:
    """SHA-256 and size of what ``fd`` holds from its current offset, read in chunks."""
    digest = hashlib.sha256()
    size = 0
    buffer = bytearray(CHUNK_BYTES)
    view = memoryview(buffer)
    while True:
        count = os.readv(fd, [buffer])
        if count == 0:
            return digest.hexdigest(), size
        digest.update(view[:count])
        size += count


def create_locked_temp(directory: Path) -> tuple[Path, int]:
    """Create a temp file holding an exclusive lock, which tells cleaners it is alive.

    A cleaner may lock and unlink a file in the instant between its creation and our lock; the
    blocking lock then returns only after that unlink, so a file with no link left is retried.
    """
    while True:
        path = directory / f"{uuid.uuid4().hex}{TEMP_SUFFIX}"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        if os.fstat(fd).st_nlink > 0:
            return path, fd
        os.close(fd)


async def in_thread(func: Callable[..., T], *args: Any) -> T:
    """Run blocking file work in a thread, never abandoning it half-done on cancellation.

    The thread cannot be interrupted, so a cancelled caller waits for it before cleaning up;
    otherwise the cleanup could close a descriptor the thread is still writing to.
    """
    task = asyncio.ensure_future(asyncio.to_thread(func, *args))
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        while not task.done():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait([task])
        raise


def mismatch(field: str, expected: str, actual: str) -> InvalidInput:
    return InvalidInput(
        f"{field} has SHA-256 {actual}, not the expected {expected}",
        field=field,
        details={"expected_sha256": expected, "actual_sha256": actual},
    )


def pwrite_all(fd: int, data: bytes | memoryview, offset: int) -> None:
    """Write all of ``data`` at ``offset``: ``pwrite`` may write less than it is given."""
    view = memoryview(data)
    position = offset
    while view:
        written = os.pwrite(fd, view, position)
        view = view[written:]
        position += written


def pread_file(path: Path, offset: int, size: int) -> bytes:
    """Up to ``size`` bytes of the file at ``path`` from ``offset``."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.pread(fd, size, offset)
    finally:
        os.close(fd)
