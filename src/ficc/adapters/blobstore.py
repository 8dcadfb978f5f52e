"""Content-addressed blob store: model files kept under their SHA-256 in one directory.

Layout under the store's root::

    blobs/ab/abcdef…    one read-only file per SHA-256, named by it
    tmp/                 imports in progress (each holds an exclusive lock while it writes)
    partial/NAME         resumable downloads, written at offsets, kept across restarts

A blob appears at its address only complete and verified: bytes go to a temp file in the same
filesystem while they are hashed, the file is fsynced, renamed onto its address (atomic), and
the directory is fsynced. A crash leaves at worst a temp file, which no reader ever sees and
which the next store opened on the directory removes. Files are read in 1 MiB chunks, so memory
does not grow with the size of a model.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import hashlib
import logging
import os
import re
import stat
import uuid
from collections.abc import AsyncIterable, Callable, Iterable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO, Final, Self, TypeVar

from ficc.adapters.partial_writer import OrderedPartialWriter
from ficc.base.errors import InvalidInput, NotFound, TooLarge
from ficc.base.units import MiB
from ficc.domain.manifests import Sha256, parse_sha256
from ficc.services.ports import Hasher

logger = logging.getLogger(__name__)

T = TypeVar("T")

CHUNK_BYTES: Final = 1 * MiB
BLOB_MODE: Final = 0o444
_TEMP_SUFFIX: Final = ".tmp"
# copy_file_range refuses some pairs of files (another filesystem on old kernels, /proc, FUSE).
_NO_KERNEL_COPY: Final = frozenset({errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP})
_SHA256_NAME = re.compile(r"^[0-9a-f]{64}$")
_PARTIAL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def _fsync_directory(directory: Path) -> None:
    """Make a rename or unlink in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _open_regular_file(path: Path, *, field: str) -> int:
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


def _hash_fd(fd: int) -> tuple[str, int]:
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


def _create_locked_temp(directory: Path) -> tuple[Path, int]:
    """Create a temp file holding an exclusive lock, which tells cleaners it is alive.

    A cleaner may lock and unlink a file in the instant between its creation and our lock; the
    blocking lock then returns only after that unlink, so a file with no link left is retried.
    """
    while True:
        path = directory / f"{uuid.uuid4().hex}{_TEMP_SUFFIX}"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        if os.fstat(fd).st_nlink > 0:
            return path, fd
        os.close(fd)


async def _in_thread(func: Callable[..., T], *args: Any) -> T:
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


def _mismatch(field: str, expected: str, actual: str) -> InvalidInput:
    return InvalidInput(
        f"{field} has SHA-256 {actual}, not the expected {expected}",
        field=field,
        details={"expected_sha256": expected, "actual_sha256": actual},
    )


class BlobWriter:
    """One import in progress: bytes are hashed as they are written to a locked temp file.

    Use as a context manager: leaving it without :meth:`commit` removes the temp file.
    """

    def __init__(
        self,
        store: BlobStore,
        *,
        expected_sha256: Sha256 | None,
        max_bytes: int | None,
        field: str,
    ) -> None:
        self._store = store
        self._expected = expected_sha256
        self._max_bytes = max_bytes
        self._field = field
        self._digest = hashlib.sha256()
        self.size = 0
        self._path, fd = _create_locked_temp(store.tmp_dir)
        self._fd: int | None = fd

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.abort()

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Hash and append ``data``; refuse it whole if it would pass ``max_bytes``."""
        fd = self._open_fd()
        self._check_limit(len(data))
        self._digest.update(data)
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        self.size += len(data)

    def _open_fd(self) -> int:
        if self._fd is None:
            raise RuntimeError("the blob writer is closed")
        return self._fd

    def _check_limit(self, more_bytes: int) -> None:
        if self._max_bytes is not None and self.size + more_bytes > self._max_bytes:
            self.abort()
            raise TooLarge(
                f"{self._field} is larger than {self._max_bytes} bytes",
                field=self._field,
                details={"limit": "max_bytes", "max_bytes": self._max_bytes},
            )

    def copy_from(self, source_fd: int) -> None:
        """Append everything ``source_fd`` holds from its offset, copied inside the kernel.

        The digest is taken from the bytes read back from the temp file, so it describes what
        was stored even if the source changes meanwhile. Where the kernel cannot copy between
        these files, the bytes go through a buffer instead.
        """
        fd = self._open_fd()
        buffer = bytearray(CHUNK_BYTES)
        view = memoryview(buffer)
        while True:
            try:
                count = os.copy_file_range(source_fd, fd, CHUNK_BYTES)
            except OSError as exc:
                if exc.errno not in _NO_KERNEL_COPY:
                    raise
                count = 0
            if count == 0:
                # End of file, or a kernel that copies nothing from files like those of /proc:
                # only a read can tell, and what it returns goes through the buffer.
                while count := os.readv(source_fd, [buffer]):
                    self.write(view[:count])
                return
            self._check_limit(count)
            done = 0
            while done < count:
                got = os.preadv(fd, [view[done:count]], self.size + done)
                if got == 0:
                    raise OSError(f"temp file {self._path} is shorter than what was copied")
                done += got
            self._digest.update(view[:count])
            self.size += count

    def commit(self) -> tuple[Sha256, int]:
        """Verify the digest, make the bytes durable and move them to their address."""
        fd = self._open_fd()
        actual = Sha256(self._digest.hexdigest())
        if self._expected is not None and actual != self._expected:
            self.abort()
            raise _mismatch(self._field, self._expected, actual)
        os.fsync(fd)
        os.fchmod(fd, BLOB_MODE)
        self._store._install(self._path, actual)
        self._close()
        return actual, self.size

    def abort(self) -> None:
        """Remove the temp file; harmless after commit or a previous abort."""
        if self._fd is None:
            return
        with contextlib.suppress(FileNotFoundError):
            self._path.unlink()
        self._close()

    def _close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


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
            actual, _ = _hash_fd(fd)
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
        _fsync_directory(path.parent)
        return True

    def _install(self, source: Path, sha256: Sha256) -> None:
        """Rename a complete, fsynced file onto its address; keep an existing blob."""
        target = self._address(sha256)
        if target.exists():
            source.unlink()
            return
        if not target.parent.is_dir():
            target.parent.mkdir(exist_ok=True)
            _fsync_directory(self.blobs_dir)
        os.replace(source, target)
        _fsync_directory(target.parent)
        _fsync_directory(source.parent)

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
        return BlobWriter(self, expected_sha256=expected, max_bytes=max_bytes, field=field)

    def import_file(
        self, source: Path, expected_sha256: str | None = None, *, field: str = "source"
    ) -> tuple[Sha256, int]:
        """Copy a regular file into the store, verified against ``expected_sha256`` if given."""
        expected = (
            None
            if expected_sha256 is None
            else parse_sha256(expected_sha256, field="expected_sha256")
        )
        fd = _open_regular_file(source, field=field)
        try:
            if expected is not None and self.has(expected):
                # Already stored: check the source is that content without copying it again.
                actual, size = _hash_fd(fd)
                if actual != expected:
                    raise _mismatch(field, expected, actual)
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
                await _in_thread(writer.write, chunk)
            return await _in_thread(writer.commit)

    def clean_stale_temporaries(self) -> int:
        """Remove temp files whose writer died (its lock is gone); return how many."""
        removed = 0
        for entry in self.tmp_dir.iterdir():
            if not entry.name.endswith(_TEMP_SUFFIX):
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
            view = memoryview(data)
            position = offset
            while view:
                written = os.pwrite(fd, view, position)
                view = view[written:]
                position += written
            os.fsync(fd)
        finally:
            os.close(fd)
        if created:
            _fsync_directory(self.partial_dir)

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
        _fsync_directory(self.partial_dir)
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
        fd = os.open(self.blob_path(sha256), os.O_RDONLY | os.O_CLOEXEC)
        try:
            return os.pread(fd, size, offset)
        finally:
            os.close(fd)

    def write_partial_at(self, name: str, offset: int, data: bytes) -> None:
        """Write without fsync; :meth:`sync_partial` makes a whole range durable at once."""
        fd = os.open(self._partial_path(name), os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            view = memoryview(data)
            position = offset
            while view:
                written = os.pwrite(fd, view, position)
                view = view[written:]
                position += written
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
        fd = os.open(self._partial_path(name), os.O_RDONLY | os.O_CLOEXEC)
        try:
            return os.pread(fd, size, offset)
        finally:
            os.close(fd)

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
            actual, size = _hash_fd(fd)
            if expected_size is not None and size != expected_size:
                self.remove_partial(name)
                raise InvalidInput(
                    f"partial {name} has {size} bytes, not the expected {expected_size}",
                    field="partial",
                )
            if actual != expected:
                self.remove_partial(name)
                raise _mismatch("partial", expected, actual)
            os.fsync(fd)
            os.fchmod(fd, BLOB_MODE)
        finally:
            os.close(fd)
        self._install(path, expected)
        return expected, size


def resolve_user_path(
    path: str | os.PathLike[str],
    allowed_roots: Sequence[Path] | None = None,
    *,
    field: str = "path",
) -> Path:
    """Check a local path a user named for import and return the real file it designates.

    Refused, naming ``field``: a NUL byte, any ``..`` component (even one that would resolve
    harmlessly), a path that does not exist, a file (or symlink target) outside every allowed
    root when roots are given, and anything but a regular file (directories, FIFOs, devices).
    """
    text = os.fspath(path)
    if not text:
        raise InvalidInput(f"{field} must not be empty", field=field)
    if "\x00" in text:
        raise InvalidInput(f"{field} must not contain NUL", field=field)
    if ".." in Path(text).parts:
        raise InvalidInput(f"{field} must not contain a '..' component", field=field)
    try:
        real = Path(text).resolve(strict=True)
    except FileNotFoundError as exc:
        raise InvalidInput(f"{field} does not exist: {text}", field=field) from exc
    except (OSError, RuntimeError) as exc:
        raise InvalidInput(f"{field} cannot be resolved: {text}", field=field) from exc
    if allowed_roots is not None:
        roots = [Path(root).resolve() for root in allowed_roots]
        if not any(real.is_relative_to(root) for root in roots):
            raise InvalidInput(
                f"{field} resolves to {real}, outside the allowed directories",
                field=field,
                details={"allowed_roots": [str(root) for root in roots]},
            )
    try:
        mode = real.stat().st_mode
    except OSError as exc:
        raise InvalidInput(f"{field} cannot be read: {text}", field=field) from exc
    if not stat.S_ISREG(mode):
        raise InvalidInput(f"{field} is not a regular file: {text}", field=field)
    return real
