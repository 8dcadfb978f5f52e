"""The cluster key signs through libsodium: the same Ed25519 bytes as RFC 8032 and OpenSSL
give, so receipts, handshakes and vectors signed before still verify, and what OpenSSL
refuses is refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from ficc.adapters.keys import ClusterKey, KeyFileError, verify_signature

# RFC 8032, section 7.1, TEST 3 (a two-byte message).
RFC_SEED = bytes.fromhex("c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7")
RFC_PUBLIC = bytes.fromhex("fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025")
RFC_MESSAGE = bytes.fromhex("af82")
RFC_SIGNATURE = bytes.fromhex(
    "6291d657deec24024827e69c3abe01a30ce548a284743a445e3680d7db5ac3ac"
    "18ff9b538d16f290ae67f760984dc6594a7c15e9716ed28dc027beceea1ec40a"
)


def test_a_seed_signs_as_rfc_8032_says() -> None:
    key = ClusterKey(RFC_SEED)
    assert key.public_key == RFC_PUBLIC
    assert key.sign(RFC_MESSAGE) == RFC_SIGNATURE
    assert verify_signature(RFC_PUBLIC, RFC_MESSAGE, RFC_SIGNATURE)


@pytest.mark.parametrize("size", [0, 1, 53, 4096])
def test_a_signature_is_the_one_openssl_makes_and_each_verifies_the_others(size: int) -> None:
    seed, message = os.urandom(32), os.urandom(size)
    ours = ClusterKey(seed)
    theirs = Ed25519PrivateKey.from_private_bytes(seed)
    public = theirs.public_key()
    assert ours.public_key == public.public_bytes(Encoding.Raw, PublicFormat.Raw)
    signature = ours.sign(message)
    assert signature == theirs.sign(message)
    public.verify(signature, message)
    assert verify_signature(ours.public_key, message, theirs.sign(message))


def test_what_does_not_verify_is_refused() -> None:
    key = ClusterKey.generate()
    signature = key.sign(b"usage")
    flipped = bytes([signature[0] ^ 1]) + signature[1:]
    other = ClusterKey.generate().public_key
    assert not verify_signature(key.public_key, b"usage!", signature)
    assert not verify_signature(key.public_key, b"usage", flipped)
    assert not verify_signature(other, b"usage", signature)
    assert not verify_signature(key.public_key, b"usage", signature[:63])
    assert not verify_signature(key.public_key, b"usage", signature + b"\x00")
    assert not verify_signature(key.public_key[:31], b"usage", signature)
    assert not verify_signature(b"\x00" * 32, b"usage", signature)
    with pytest.raises(InvalidSignature):
        Ed25519PublicKey.from_public_bytes(key.public_key).verify(flipped, b"usage")


def test_a_saved_key_loads_as_the_same_key_and_a_corrupt_one_is_refused(tmp_path: Path) -> None:
    key = ClusterKey.generate()
    key.save(tmp_path / "cluster.key")
    assert (tmp_path / "cluster.key").stat().st_mode & 0o777 == 0o600
    loaded = ClusterKey.load(tmp_path / "cluster.key")
    assert loaded.public_key == key.public_key
    assert loaded.sign(b"x") == key.sign(b"x")
    short = tmp_path / "short.key"
    short.write_bytes(b"\x01" * 31)
    short.chmod(0o600)
    with pytest.raises(KeyFileError, match="corrupt"):
        ClusterKey.load(short)
