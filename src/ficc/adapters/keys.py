"""The FICC cluster key: an Ed25519 key in a 0600 file, made once by `ficc init`."""

from __future__ import annotations

import base64
import os
import stat
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
)

from ficc.base.errors import FiccError

SECRET_FILE_MODE = 0o600


class KeyFileError(FiccError):
    """A key file is missing, unreadable, corrupt or readable by others."""


def write_secret_file(path: Path, data: bytes) -> None:
    """Create ``path`` with mode 0600 from the start (never briefly world-readable)."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, SECRET_FILE_MODE)
    try:
        os.write(descriptor, data)
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def read_secret_file(path: Path) -> bytes:
    """Read a secret, refusing a file that group or others may access."""
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        raise KeyFileError(f"cannot read the key file {path.name}") from exc
    if stat.S_IMODE(mode) & 0o077:
        raise KeyFileError(
            f"the key file {path.name} is accessible by group or others; chmod 600 it"
        )
    return path.read_bytes()


class ClusterKey:
    """Signs as this cluster; its public half is the cluster's identity to peers."""

    def __init__(self, private_key: Ed25519PrivateKey) -> None:
        self._private = private_key
        self.public_key: bytes = private_key.public_key().public_bytes(
            Encoding.Raw, PublicFormat.Raw
        )

    @classmethod
    def generate(cls) -> ClusterKey:
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def load(cls, path: Path) -> ClusterKey:
        seed = read_secret_file(path)
        if len(seed) != 32:
            raise KeyFileError(f"the key file {path.name} is corrupt (expected a 32-byte seed)")
        return cls(Ed25519PrivateKey.from_private_bytes(seed))

    def save(self, path: Path) -> None:
        seed = self._private.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
        write_secret_file(path, seed)

    def sign(self, message: bytes) -> bytes:
        return self._private.sign(message)

    @property
    def public_text(self) -> str:
        """The public key as unpadded base64url, as shown in the identity."""
        return encode_public_key(self.public_key)


def encode_public_key(public_key: bytes) -> str:
    return base64.urlsafe_b64encode(public_key).decode("ascii").rstrip("=")


def verify_signature(public_key: bytes, message: bytes, signature: bytes) -> bool:
    try:
        Ed25519PublicKey.from_public_bytes(public_key).verify(signature, message)
    except (InvalidSignature, ValueError):
        return False
    return True
