"""Fixed Ed25519 keys and helpers shared by the protocol tests (deterministic signatures)."""

from __future__ import annotations

from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from ficc.protocol.handshake import Handshake, KnownPeer, Role


@dataclass
class FixedSigner:
    """A cluster key made from a fixed seed."""

    seed: bytes

    @property
    def public_key(self) -> bytes:
        key = Ed25519PrivateKey.from_private_bytes(self.seed).public_key()
        return key.public_bytes(Encoding.Raw, PublicFormat.Raw)

    def sign(self, message: bytes) -> bytes:
        return Ed25519PrivateKey.from_private_bytes(self.seed).sign(message)


def verify(public_key: bytes, message: bytes, signature: bytes) -> bool:
    try:
        Ed25519PublicKey.from_public_bytes(public_key).verify(signature, message)
    except (InvalidSignature, ValueError):
        return False
    return True


INITIATOR_KEY = FixedSigner(bytes(range(32)))
RESPONDER_KEY = FixedSigner(bytes(range(32, 64)))
STRANGER_KEY = FixedSigner(bytes(range(64, 96)))
INITIATOR_ID = bytes([0xA1] * 32)
RESPONDER_ID = bytes([0xB2] * 32)
INITIATOR_NONCE = bytes([0x11] * 32)
RESPONDER_NONCE = bytes([0x22] * 32)


def initiator(known: KnownPeer | None = None, **overrides: object) -> Handshake:
    options: dict[str, object] = {
        "role": Role.INITIATOR,
        "local_hypernet_id": INITIATOR_ID,
        "remote_hypernet_id": RESPONDER_ID,
        "signer": INITIATOR_KEY,
        "verify": verify,
        "nonce": INITIATOR_NONCE,
        "known_peers": () if known is None else (known,),
        "generation": 0 if known is None else known.generation,
    }
    options.update(overrides)
    return Handshake(**options)  # type: ignore[arg-type]


def responder(known: KnownPeer | None = None, **overrides: object) -> Handshake:
    options: dict[str, object] = {
        "role": Role.RESPONDER,
        "local_hypernet_id": RESPONDER_ID,
        "remote_hypernet_id": INITIATOR_ID,
        "signer": RESPONDER_KEY,
        "verify": verify,
        "nonce": RESPONDER_NONCE,
        "known_peers": () if known is None else (known,),
    }
    options.update(overrides)
    return Handshake(**options)  # type: ignore[arg-type]


def run_handshake(left: Handshake, right: Handshake) -> None:
    """Drive an initiator and a responder to the end, raising what either raises."""
    pending = [(right, m) for m in left.begin()]
    while pending:
        target, message = pending.pop(0)
        other = left if target is right else right
        pending.extend((other, m) for m in target.receive(message))
