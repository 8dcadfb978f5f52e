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

from ficc.adapters.blobstore.files import CHUNK_BYTES
from ficc.adapters.blobstore.store import BlobStore
from ficc.adapters.blobstore.user_paths import resolve_user_path
from ficc.adapters.blobstore.writer import BlobWriter

__all__ = ["CHUNK_BYTES", "BlobStore", "BlobWriter", "resolve_user_path"]
