"""One import into the blob store: bytes hashed as they are written to a locked temp file."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Final, Self

from ficc.adapters.blobstore.files import (
    BLOB_MODE,
    CHUNK_BYTES,
    create_locked_temp,
    mismatch,
)
from ficc.base.errors import TooLarge
from ficc.domain.manifests import Sha256

# copy_file_range refuses some pairs of files (another filesystem on old kernels, /proc, FUSE).
_NO_KERNEL_COPY: Final = frozenset({errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP})

Install = Callable[[Path, Sha256], None]
"""Moves a complete, fsynced file onto the address of its SHA-256 (the store's rename)."""


class BlobWriter:
    """One import in progress: bytes are hashed as they are written to a locked temp file.

    Use as a context manager: leaving it without :meth:`commit` removes the temp file.
    """

    def __init__(
        self,
        tmp_dir: Path,
        install: Install,
        *,
        expected_sha256: Sha256 | None,
        max_bytes: int | None,
        field: str,
    ) -> None:
        self._install = install
        self._expected = expected_sha256
        self._max_bytes = max_bytes
        self._field = field
        self._digest = hashlib.sha256()
        self.size = 0
        self._path, fd = create_locked_temp(tmp_dir)
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
            raise mismatch(self._field, self._expected, actual)
        os.fsync(fd)
        os.fchmod(fd, BLOB_MODE)
        self._install(self._path, actual)
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
