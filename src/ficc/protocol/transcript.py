"""The bytes a handshake binds: what each proof signs and what the session ID hashes.

Both are one layout (``docs/protocol.md``): a domain separator, then the two HyperNet IDs
(initiator first), the ALPN with its length, both nonces and the pairing generation, then what
each adds. Written once here, so a proof and the session ID cannot disagree on the order.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from typing import Final

PROOF_DOMAIN: Final = b"ficc.federation/1 handshake proof\x00"
SESSION_DOMAIN: Final = b"ficc.federation/1 session\x00"


@dataclass(frozen=True)
class Transcript:
    """What both sides know once the nonces are exchanged; both compute the same bytes."""

    initiator_id: bytes
    responder_id: bytes
    alpn: bytes
    initiator_nonce: bytes
    responder_nonce: bytes
    generation: int

    def _bound(self) -> bytes:
        return b"".join(
            [
                self.initiator_id,
                self.responder_id,
                bytes([len(self.alpn)]),
                self.alpn,
                self.initiator_nonce,
                self.responder_nonce,
                struct.pack(">Q", self.generation),
            ]
        )

    def proof_message(self, *, signer_role: bytes, cluster_key: bytes) -> bytes:
        """The exact bytes a proof signs; ``signer_role`` is the signer's role byte."""
        return b"".join([PROOF_DOMAIN, signer_role, self._bound(), cluster_key])

    def session_id(self, *, version: int, initiator_key: bytes, responder_key: bytes) -> bytes:
        """SHA-256 of the handshake transcript: the 32-byte ID of the session."""
        transcript = b"".join(
            [
                SESSION_DOMAIN,
                struct.pack(">H", version),
                self._bound(),
                initiator_key,
                responder_key,
            ]
        )
        return hashlib.sha256(transcript).digest()
