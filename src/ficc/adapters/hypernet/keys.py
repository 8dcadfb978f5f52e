"""The agent directory and the HyperNet secret key inside it.

``hypernet.key`` holds the 32-byte Ed25519 seed of the endpoint; the HyperNet ID derives from
it, so reusing the file keeps the ID across restarts. The directory is created 0700 and the
file 0600; a key that group or others can read, or that is not 32 bytes, is refused with a
message the companion shows as its error.
"""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Final

from ficc.adapters.keys import write_secret_file
from ficc.base.errors import InvalidInput

KEY_FILE_NAME: Final = "hypernet.key"
SEED_BYTES: Final = 32
DIRECTORY_MODE: Final = 0o700


class AgentDirectoryError(InvalidInput):
    """The agent directory or its ``hypernet.key`` cannot be used as they are."""

    def __init__(self, message: str) -> None:
        super().__init__(message, field="agent_directory")


def _prepare_directory(directory: Path) -> None:
    try:
        directory.mkdir(mode=DIRECTORY_MODE, parents=True, exist_ok=True)
        info = directory.stat()
    except OSError as exc:
        raise AgentDirectoryError(
            f"cannot create the agent directory {directory}: {exc.strerror}"
        ) from exc
    if not stat.S_ISDIR(info.st_mode):
        raise AgentDirectoryError(f"the agent directory {directory} is not a directory")
    if stat.S_IMODE(info.st_mode) & 0o022:
        raise AgentDirectoryError(
            f"the agent directory {directory} is writable by group or others; chmod 700 it"
        )


def _read_seed(path: Path) -> bytes:
    try:
        info = path.lstat()
        if not stat.S_ISREG(info.st_mode):
            raise AgentDirectoryError(f"{path} is not a regular file")
        if stat.S_IMODE(info.st_mode) & 0o077:
            raise AgentDirectoryError(
                f"{path} is accessible by group or others (mode "
                f"{stat.S_IMODE(info.st_mode):04o}); chmod 600 it"
            )
        seed = path.read_bytes()
    except OSError as exc:
        raise AgentDirectoryError(f"cannot read {path}: {exc.strerror}") from exc
    if len(seed) != SEED_BYTES:
        raise AgentDirectoryError(
            f"{path} is corrupt: it holds {len(seed)} bytes, a HyperNet key is {SEED_BYTES}"
        )
    return seed


def _write_seed(path: Path, seed: bytes) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    write_secret_file(temporary, seed)
    os.replace(temporary, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def load_or_create_secret_key(
    agent_directory: Path, *, new_seed: Callable[[], bytes] = lambda: secrets.token_bytes(32)
) -> bytes:
    """The endpoint's 32-byte seed: read from ``hypernet.key``, or made and saved once."""
    _prepare_directory(agent_directory)
    path = agent_directory / KEY_FILE_NAME
    if path.exists() or path.is_symlink():
        return _read_seed(path)
    seed = new_seed()
    try:
        _write_seed(path, seed)
    except OSError as exc:
        raise AgentDirectoryError(f"cannot write {path}: {exc.strerror}") from exc
    return seed
