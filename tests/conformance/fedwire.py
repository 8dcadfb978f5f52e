"""The wire of ficc.federation/1 without I/O, from docs/protocol.md: canonical JSON (RFC 8785),
frames, the ten messages, the handshake proof, the session ID, request signatures and the
acceptance receipt."""

from __future__ import annotations

import base64
import hashlib
import json
import struct
from dataclasses import dataclass
from typing import Any

import rfc8785
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

ALPN = b"ficc.federation/1"
MAX_FRAME = 1 << 20
HELLO, CHALLENGE, PROOF = 0x01, 0x02, 0x03
REQUEST, RESPONSE, ERROR, CHUNK, END, CANCEL = 0x10, 0x11, 0x12, 0x13, 0x14, 0x15
HEARTBEAT = 0x20
PROOF_DOMAIN = b"ficc.federation/1 handshake proof\x00"
SESSION_DOMAIN = b"ficc.federation/1 session\x00"
REQUEST_DOMAIN = b"ficc.federation/1 request\x00"
RECEIPT_DOMAIN = b"ficc.federation/1 acceptance receipt\x00"


class WireError(Exception):
    """Something the document calls a protocol error."""


def jcs(value: Any) -> bytes:
    return bytes(rfc8785.dumps(value))


def parse_jcs(data: bytes) -> Any:
    """Strict: the bytes must be exactly the RFC 8785 encoding of what they decode to."""
    try:
        value = json.loads(data.decode("utf-8"))
        if jcs(value) == data:
            return value
    except ValueError:
        pass
    raise WireError("not canonical JSON")


def frame(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass(frozen=True)
class Key:
    """A FICC cluster key (Ed25519) made from a 32-byte seed."""

    seed: bytes

    @property
    def public(self) -> bytes:
        key = Ed25519PrivateKey.from_private_bytes(self.seed).public_key()
        return key.public_bytes(Encoding.Raw, PublicFormat.Raw)

    def sign(self, message: bytes) -> bytes:
        return Ed25519PrivateKey.from_private_bytes(self.seed).sign(message)


def verifies(public: bytes, message: bytes, signature: bytes) -> bool:
    try:
        Ed25519PublicKey.from_public_bytes(public).verify(signature, message)
    except (InvalidSignature, ValueError):
        return False
    return True


# --- messages -------------------------------------------------------------------------------


def hello(hypernet_id: bytes, versions: list[int]) -> bytes:
    return bytes([HELLO]) + jcs({"hypernet_id": hypernet_id.hex(), "versions": versions})


def challenge(nonce: bytes) -> bytes:
    return bytes([CHALLENGE]) + nonce


def proof(generation: int, cluster_key: bytes, signature: bytes) -> bytes:
    return bytes([PROOF]) + struct.pack(">Q", generation) + cluster_key + signature


def heartbeat(counter: int) -> bytes:
    return bytes([HEARTBEAT]) + struct.pack(">Q", counter)


def request_content(operation: str, body: dict[str, Any]) -> bytes:
    return jcs({"body": body, "operation": operation})


def request(seq: int, signature: bytes, content: bytes) -> bytes:
    return bytes([REQUEST]) + struct.pack(">Q", seq) + signature + content


def proof_message(
    role: bytes,
    initiator: bytes,
    responder: bytes,
    n_i: bytes,
    n_r: bytes,
    generation: int,
    cluster_key: bytes,
) -> bytes:
    return b"".join(
        [
            *(PROOF_DOMAIN, role, initiator, responder, bytes([len(ALPN)]), ALPN),
            *(n_i, n_r, struct.pack(">Q", generation), cluster_key),
        ]
    )


def session_id(
    version: int,
    initiator: bytes,
    responder: bytes,
    n_i: bytes,
    n_r: bytes,
    generation: int,
    k_i: bytes,
    k_r: bytes,
) -> bytes:
    transcript = b"".join(
        [
            *(SESSION_DOMAIN, struct.pack(">H", version), initiator, responder),
            *(bytes([len(ALPN)]), ALPN, n_i, n_r, struct.pack(">Q", generation), k_i, k_r),
        ]
    )
    return hashlib.sha256(transcript).digest()


def request_message(session: bytes, role: bytes, seq: int, content: bytes) -> bytes:
    return REQUEST_DOMAIN + session + role + struct.pack(">Q", seq) + content


@dataclass(frozen=True)
class Decoded:
    """One message: its tag and its fields."""

    tag: int
    fields: dict[str, Any]


_FIXED = {CHALLENGE: 32, PROOF: 104, END: 8, CANCEL: 0, HEARTBEAT: 8}


def decode(payload: bytes) -> Decoded:
    """A frame payload as the document's table reads it; WireError for anything else."""
    if not payload:
        raise WireError("empty payload")
    tag, rest = payload[0], payload[1:]
    if tag in _FIXED and len(rest) != _FIXED[tag]:
        raise WireError(f"tag {tag:#x} has a fixed size")
    if tag == HELLO:
        doc = parse_jcs(rest)
        if not isinstance(doc, dict) or set(doc) != {"hypernet_id", "versions"}:
            raise WireError("hello fields")
        return Decoded(tag, doc)
    if tag == CHALLENGE:
        return Decoded(tag, {"nonce": rest})
    if tag == PROOF:
        (generation,) = struct.unpack(">Q", rest[:8])
        return Decoded(tag, {"generation": generation, "key": rest[8:40], "sig": rest[40:]})
    if tag == REQUEST:
        if len(rest) < 72:
            raise WireError("short request")
        (seq,) = struct.unpack(">Q", rest[:8])
        doc = parse_jcs(rest[72:])
        return Decoded(tag, {"seq": seq, "sig": rest[8:72], "content": rest[72:], **doc})
    if tag in (RESPONSE, ERROR):
        doc = parse_jcs(rest)
        if not isinstance(doc, dict):
            raise WireError("not an object")
        if tag == ERROR and set(doc) != {"code", "details", "message"}:
            raise WireError("error fields")
        return Decoded(tag, doc)
    if tag == CHUNK:
        return Decoded(tag, {"data": rest})
    if tag in (END, HEARTBEAT):
        return Decoded(tag, {"value": struct.unpack(">Q", rest)[0]})
    if tag == CANCEL:
        return Decoded(tag, {})
    raise WireError(f"unknown tag {tag:#x}")


# --- receipts -------------------------------------------------------------------------------


def check_receipt(receipt: dict[str, Any], service_cluster_key: bytes) -> dict[str, Any]:
    """The receipt's body if its digest and the service's signature hold (document §6)."""
    body = receipt["body"]
    digest = hashlib.sha256(jcs(body)).hexdigest()
    if receipt["digest"] != digest or body["kind"] != "ficc.acceptance/1":
        raise WireError("the receipt's digest does not match its body")
    message = RECEIPT_DOMAIN + bytes.fromhex(digest)
    if not verifies(service_cluster_key, message, unb64(receipt["signature"])):
        raise WireError("the receipt's signature does not verify")
    return dict(body)
