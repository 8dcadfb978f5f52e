"""The content-addressed blob store: blobs by SHA-256, imports, and resumable partial files."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
from collections.abc import AsyncIterable, Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

from ficc.adapters.blobstore.files import (
    BLOB_MODE,
    TEMP_SUFFIX,
    fsync_directory,
    hash_fd,
    in_thread,
    mismatch,
    open_regular_file,
    pread_file,
    pwrite_all,
)
from ficc.adapters.blobstore.writer import BlobWriter
from ficc.adapters.partial_writer import OrderedPartialWriter
from ficc.base.errors import InvalidInput, NotFound
from ficc.domain.manifests import Sha256, parse_sha256
from ficc.services.ports import Hasher

logger = logging.getLogger(__package__)  # the store logs as ``ficc.adapters.blobstore``

_SHA256_NAME = re.compile(r"^[0-9a-f]{64}$")
_PARTIAL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class BlobStore:
    """Blobs in ``root``, addressed by SHA-256; opening a store removes stale temp files."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.blobs_dir = root / "blobs"
        self.tmp_dir = root / "tmp"
        self.partial_dir = root / "partial"
        for directory in (self.blobs_dir, self.tmp_dir, self.partial_dir):
            directory.mkdir(parents=True, exist_ok=True)
        self.clean_stale_temporaries()

    # -- addresses -------------------------------------------------------------------------

    def _address(self, sha256: str, *, field: str = "sha256") -> Path:
        digest = parse_sha256(sha256, field=field)
        return self.blobs_dir / digest[:2] / digest

    def has(self, sha256: str) -> bool:
        return self._address(sha256).is_file()

    def blob_path(self, sha256: str) -> Path:
        """Where a stored blob lives (for engines that open files by path)."""
        path = self._address(sha256)
        if not path.is_file():
            raise NotFound(f"no blob with SHA-256 {sha256}", details={"sha256": sha256})
        return path

    def open_blob(self, sha256: str) -> BinaryIO:
        try:
            return self._address(sha256).open("rb")
        except FileNotFoundError as exc:
            raise NotFound(f"no blob with SHA-256 {sha256}", details={"sha256": sha256}) from exc

    def size(self, sha256: str) -> int:
        return self.blob_path(sha256).stat().st_size

    def iter_blobs(self) -> Iterator[Sha256]:
        for shard in sorted(self.blobs_dir.iterdir()):
            if not shard.is_dir():
                continue
            for entry in sorted(shard.iterdir()):
                if _SHA256_NAME.match(entry.name) and entry.is_file():
                    yield Sha256(entry.name)

    def verify(self, sha256: str) -> bool:
        """Rehash a stored blob: False means its bytes no longer match its address."""
        path = self.blob_path(sha256)
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            actual, _ = hash_fd(fd)
        finally:
            os.close(fd)
        return actual == sha256

    def remove(self, sha256: str) -> bool:
        """Delete a blob; False if there was none (removing twice is not an error)."""
        path = self._address(sha256)
        try:
            path.unlink()
        except FileNotFoundError:
            return False
        fsync_directory(path.parent)
        return True

    def _install(self, source: Path, sha256: Sha256) -> None:
        """Rename a complete, fsynced file onto its address; keep an existing blob."""
        target = self._address(sha256)
        if target.exists():
            source.unlink()
            return
        if not target.parent.is_dir():
            target.parent.mkdir(exist_ok=True)
            fsync_directory(self.blobs_dir)
        os.replace(source, target)
        fsync_directory(target.parent)
        fsync_directory(source.parent)

    # -- imports ---------------------------------------------------------------------------

    def begin(
        self,
        *,
        expected_sha256: str | None = None,
        max_bytes: int | None = None,
        field: str = "blob",
    ) -> BlobWriter:
        """Start an import written piece by piece; see :class:`BlobWriter`."""
        expected = (
            None
            if expected_sha256 is None
            else parse_sha256(expected_sha256, field="expected_sha256")
        )
        return BlobWriter(
            self.tmp_dir, self._install, expected_sha256=expected, max_bytes=max_bytes, field=field
        )

    def import_file(
        self, source: Path, expected_sha256: str | None = None, *, field: str = "source"
    ) -> tuple[Sha256, int]:
        """Copy a regular file into the store, verified against ``expected_sha256`` if given."""
        expected = (
            None
            if expected_sha256 is None
            else parse_sha256(expected_sha256, field="expected_sha256")
        )
        fd = open_regular_file(source, field=field)
        try:
            if expected is not None and self.has(expected):
                # Already stored: check the source is that content without copying it again.
                actual, size = hash_fd(fd)
                if actual != expected:
                    raise mismatch(field, expected, actual)
                return expected, size
            with self.begin(expected_sha256=expected, field=field) as writer:
                writer.copy_from(fd)
                return writer.commit()
        finally:
            os.close(fd)

    def import_chunks(
        self,
        chunks: Iterable[bytes],
        expected_sha256: str | None = None,
        *,
        max_bytes: int | None = None,
        field: str = "blob",
    ) -> tuple[Sha256, int]:
        """Import bytes from an iterator of chunks (a socket reader, a generator)."""
        with self.begin(expected_sha256=expected_sha256, max_bytes=max_bytes, field=field) as w:
            for chunk in chunks:
                w.write(chunk)
            return w.commit()

    async def import_stream(
        self,
        chunks: AsyncIterable[bytes],
        expected_sha256: str | None = None,
        *,
        max_bytes: int | None = None,
        field: str = "blob",
    ) -> tuple[Sha256, int]:
        """Import from an async source; disk writes and fsync run off the event loop."""
        writer = self.begin(expected_sha256=expected_sha256, max_bytes=max_bytes, field=field)
        with writer:
            async for chunk in chunks:
                await in_thread(writer.write, chunk)
            return await in_thread(writer.commit)

    def clean_stale_temporaries(self) -> int:
        """Remove temp files whose writer died (its lock is gone); return how many."""
        removed = 0
        for entry in self.tmp_dir.iterdir():
            if not entry.name.endswith(TEMP_SUFFIX):
                continue
            try:
                fd = os.open(entry, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            except FileNotFoundError:
                continue
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # a live import holds it
                with contextlib.suppress(FileNotFoundError):
                    entry.unlink()
                    removed += 1
            finally:
                os.close(fd)
        if removed:
            logger.info("removed %d stale temp file(s) from %s", removed, self.tmp_dir)
        return removed

    # -- partial files (resumable transfers) -----------------------------------------------

    def _partial_path(self, name: str) -> Path:
        if not _PARTIAL_NAME.match(name):
            raise InvalidInput(
                "partial name must be 1-128 letters, digits, '.', '_' or '-', starting with a "
                "letter or digit",
                field="partial",
            )
        return self.partial_dir / name

    def partial_size(self, name: str) -> int:
        """Bytes in a partial file so far; 0 if it does not exist."""
        try:
            return self._partial_path(name).stat().st_size
        except FileNotFoundError:
            return 0

    def partial_names(self) -> list[str]:
        return sorted(entry.name for entry in self.partial_dir.iterdir() if entry.is_file())

    def write_partial(self, name: str, offset: int, data: bytes | memoryview) -> None:
        """Write ``data`` at ``offset`` of the named partial file and make it durable."""
        path = self._partial_path(name)
        if offset < 0:
            raise InvalidInput("offset must be at least 0", field="offset")
        created = not path.exists()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            pwrite_all(fd, data, offset)
            os.fsync(fd)
        finally:
            os.close(fd)
        if created:
            fsync_directory(self.partial_dir)

    def truncate_partial(self, name: str, size: int) -> None:
        """Cut a partial file back to ``size`` bytes (drop a range that was not confirmed)."""
        path = self._partial_path(name)
        if size < 0:
            raise InvalidInput("size must be at least 0", field="size")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            os.ftruncate(fd, size)
            os.fsync(fd)
        finally:
            os.close(fd)

    def remove_partial(self, name: str) -> bool:
        try:
            self._partial_path(name).unlink()
        except FileNotFoundError:
            return False
        fsync_directory(self.partial_dir)
        return True

    def adopt_partial(self, name: str, verified_sha256: str, size: int) -> Sha256:
        """Move a partial file whose SHA-256 the caller computed while writing it into the store.

        For transfers that hash as they write: verifying again would read the file twice.
        The size is checked; the digest is the caller's responsibility.
        """
        digest = parse_sha256(verified_sha256, field="sha256")
        path = self._partial_path(name)
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            actual_size = os.fstat(fd).st_size
            if actual_size != size:
                raise InvalidInput(
                    f"partial {name} has {actual_size} bytes, not the expected {size}",
                    field="partial",
                )
            os.fsync(fd)
            os.fchmod(fd, BLOB_MODE)
        finally:
            os.close(fd)
        self._install(path, digest)
        return digest

    def read_blob(self, sha256: str, offset: int, size: int) -> bytes:
        """Up to ``size`` bytes of a blob from ``offset`` (blocking: call it in a thread)."""
        return pread_file(self.blob_path(sha256), offset, size)

    def write_partial_at(self, name: str, offset: int, data: bytes) -> None:
        """Write without fsync; :meth:`sync_partial` makes a whole range durable at once."""
        fd = os.open(self._partial_path(name), os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            pwrite_all(fd, data, offset)
        finally:
            os.close(fd)

    def sync_partial(self, name: str) -> None:
        fd = os.open(self._partial_path(name), os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def partial_writer(self, name: str, hasher: Hasher, queued_bytes: int) -> OrderedPartialWriter:
        """A writer of one range of ``name``, on a thread of its own (call it on the loop)."""
        self._partial_path(name)  # the name is checked now, not on the writer's thread
        return OrderedPartialWriter(
            lambda position, data: self.write_partial_at(name, position, data),
            lambda: self.sync_partial(name),
            hasher,
            queued_bytes,
        )

    def read_partial(self, name: str, offset: int, size: int) -> bytes:
        return pread_file(self._partial_path(name), offset, size)

    def finalize_partial(
        self, name: str, expected_sha256: str, *, expected_size: int | None = None
    ) -> tuple[Sha256, int]:
        """Verify a complete partial file and move it into the store.

        A digest or size mismatch removes the partial file (its bytes cannot be trusted, and a
        whole-file digest cannot tell which range was wrong) and raises InvalidInput.
        """
        expected = parse_sha256(expected_sha256, field="expected_sha256")
        path = self._partial_path(name)
        try:
            fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError as exc:
            raise NotFound(f"no partial file {name}", details={"partial": name}) from exc
        try:
            actual, size = hash_fd(fd)
            if expected_size is not None and size != expected_size:
                self.remove_partial(name)
                raise InvalidInput(
                    f"partial {name} has {size} bytes, not the expected {expected_size}",
                    field="partial",
                )
            if actual != expected:
                self.remove_partial(name)
                raise mismatch("partial", expected, actual)
            os.fsync(fd)
            os.fchmod(fd, BLOB_MODE)
        finally:
            os.close(fd)
        self._install(path, expected)
        return expected, size
