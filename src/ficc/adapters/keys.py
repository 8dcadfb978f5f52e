"""The FICC cluster key: an Ed25519 key in a 0600 file, made once by `ficc init`.

Signing and verifying go through libsodium (PyNaCl): per signature about half of OpenSSL's
CPU to verify and two thirds to sign on the development machine, and every usage receipt takes
one of each. Ed25519 signatures are deterministic, so the bytes are the same either way.
"""

from __future__ import annotations

import base64
import os
import stat
from pathlib import Path

from nacl.bindings import crypto_sign, crypto_sign_open, crypto_sign_seed_keypair
from nacl.exceptions import BadSignatureError, CryptoError

from ficc.base.errors import FiccError

SECRET_FILE_MODE = 0o600
PUBLIC_KEY_BYTES = 32
SIGNATURE_BYTES = 64


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

    SEED_BYTES = 32

    def __init__(self, seed: bytes) -> None:
        self._seed = seed
        public_key, self._secret = crypto_sign_seed_keypair(seed)
        self.public_key: bytes = public_key

    @classmethod
    def generate(cls) -> ClusterKey:
        return cls(os.urandom(cls.SEED_BYTES))

    @classmethod
    def load(cls, path: Path) -> ClusterKey:
        seed = read_secret_file(path)
        if len(seed) != cls.SEED_BYTES:
            raise KeyFileError(f"the key file {path.name} is corrupt (expected a 32-byte seed)")
        return cls(seed)

    def save(self, path: Path) -> None:
        write_secret_file(path, self._seed)

    def sign(self, message: bytes) -> bytes:
        # libsodium answers the signature followed by the message.
        return crypto_sign(message, self._secret)[:SIGNATURE_BYTES]

    @property
    def public_text(self) -> str:
        """The public key as unpadded base64url, as shown in the identity."""
        return encode_public_key(self.public_key)


def encode_public_key(public_key: bytes) -> str:
    return base64.urlsafe_b64encode(public_key).decode("ascii").rstrip("=")


def verify_signature(public_key: bytes, message: bytes, signature: bytes) -> bool:
    if len(public_key) != PUBLIC_KEY_BYTES or len(signature) != SIGNATURE_BYTES:
        return False
    try:
        crypto_sign_open(signature + message, public_key)
    except (BadSignatureError, CryptoError, ValueError, TypeError):
        return False
    return True
