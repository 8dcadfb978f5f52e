"""The messages of ficc.federation/1 and their byte encoding inside a frame payload.

Every payload starts with a one-byte tag. Fixed-size cryptographic messages and stream chunks
use fixed binary headers (a chunk is its tag then the raw bytes, so bulk data is never
re-encoded); the other control messages carry canonical JSON. ``docs/protocol.md`` lists every
layout byte for byte. :func:`decode_message` raises only :class:`ProtocolError`. Chunk frames,
built and read with one copy of their bytes, are :mod:`ficc.protocol.chunk_frames`.
"""

from __future__ import annotations

import enum
import re
import struct
from dataclasses import dataclass, field
from typing import Any, Final

from ficc.base.canonical import canonical_json
from ficc.base.errors import FiccError, ProtocolError
from ficc.protocol.canonical import first_member_bytes, parse_json_object
from ficc.protocol.frames import LENGTH_BYTES

PROTOCOL_VERSION: Final = 1
SUPPORTED_VERSIONS: Final = (PROTOCOL_VERSION,)
NONCE_BYTES: Final = 32
KEY_BYTES: Final = 32
SIGNATURE_BYTES: Final = 64
MAX_VERSIONS: Final = 16
REQUEST_ID_PATTERN: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
"""A request ID a request may carry: no spaces, quotes or control characters."""
SHA256_HEX: Final = re.compile(r"[0-9a-f]{64}")
MAX_FOLLOWING_BODY_BYTES: Final = 65 * 1024 * 1024
"""The largest request body sent in chunks after its request: a grant's ``request_bytes`` is
at most 64 MiB, and the request's envelope around it fits in the rest."""
MAX_U64: Final = 2**64 - 1

_ERROR_CODE = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
_U64 = struct.Struct(">Q")
_PROOF = struct.Struct(f">Q{KEY_BYTES}s{SIGNATURE_BYTES}s")
_REQUEST_HEAD = struct.Struct(f">Q{SIGNATURE_BYTES}s")
REQUEST_HEAD_BYTES: Final = 1 + _REQUEST_HEAD.size
"""A request's tag, sequence number and signature, before its JSON content."""


class Tag(enum.IntEnum):
    """The first byte of every frame payload."""

    HELLO = 0x01
    CHALLENGE = 0x02
    PROOF = 0x03
    REQUEST = 0x10
    RESPONSE = 0x11
    ERROR = 0x12
    CHUNK = 0x13
    END = 0x14
    CANCEL = 0x15
    HEARTBEAT = 0x20


@dataclass(frozen=True)
class Hello:
    """Opens the handshake: who the sender claims to be and which versions it speaks."""

    hypernet_id: bytes
    versions: tuple[int, ...]


@dataclass(frozen=True)
class Challenge:
    """A fresh nonce the other side must sign over."""

    nonce: bytes


@dataclass(frozen=True)
class Proof:
    """The sender's cluster key and its signature over the handshake transcript."""

    generation: int
    cluster_key: bytes
    signature: bytes


@dataclass(frozen=True)
class Request:
    """A remote operation, signed for one session, direction and sequence number.

    ``content`` is :func:`request_content` of ``operation`` and ``body`` once known (signing
    and decoding set it), so those exact bytes are neither encoded nor parsed again.
    """

    seq: int
    signature: bytes
    operation: str
    body: dict[str, Any]
    content: bytes = field(default=b"", compare=False, repr=False)
    request_id: str | None = None
    """The requester's request ID, so both clusters' logs name the same request (optional)."""
    following: BodyFollows | None = None
    """Set when the body is too large for this frame: ``body`` is then ``{}`` and the body's
    canonical JSON follows as chunks and an end on the same stream, its size and SHA-256
    signed here."""
    body_bytes: int = field(default=0, compare=False)
    """A received request's body size in canonical JSON, as it travelled (in ``content`` or
    following it): what the serving side counts against a limit without encoding it again."""


@dataclass(frozen=True)
class BodyFollows:
    """The size and SHA-256 (hex) of a request body sent as chunks after its request."""

    size: int
    sha256: str


@dataclass(frozen=True)
class Response:
    """The JSON result of a request."""

    body: dict[str, Any]


@dataclass(frozen=True)
class Error:
    """A refusal or failure with a stable ``code`` from :mod:`ficc.base.errors`."""

    code: str
    message: str
    details: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_exception(cls, exc: FiccError) -> Error:
        """The frame that tells a peer about ``exc`` (its message is meant for callers)."""
        return cls(code=exc.code, message=exc.message, details=_jsonable(exc.details))


@dataclass(frozen=True)
class Chunk:
    """A piece of a streamed result: raw bytes behind a one-byte tag."""

    data: bytes


@dataclass(frozen=True)
class End:
    """Closes a streamed result; ``total_bytes`` lets the receiver check nothing was lost."""

    total_bytes: int


@dataclass(frozen=True)
class Cancel:
    """The requester abandoned the request in flight on this stream."""


@dataclass(frozen=True)
class Heartbeat:
    """Proof of life on the control stream; ``counter`` increases by one each time."""

    counter: int


Message = Hello | Challenge | Proof | Request | Response | Error | Chunk | End | Cancel | Heartbeat


def _jsonable(details: dict[str, Any]) -> dict[str, Any]:
    try:
        canonical_json(details)
    except (TypeError, ValueError):
        return {}
    return details


def _check_u64(value: int, name: str) -> None:
    if not 0 <= value <= MAX_U64:
        raise ProtocolError(f"{name} must be an unsigned 64-bit integer")


def _check_len(value: bytes, size: int, name: str) -> None:
    if len(value) != size:
        raise ProtocolError(f"{name} must be exactly {size} bytes")


def encode_message(message: Message) -> bytes:
    """The frame payload of ``message`` (wrap it with :func:`encode_frame` to send it)."""
    match message:
        case Hello(hypernet_id, versions):
            _check_len(hypernet_id, KEY_BYTES, "hello hypernet_id")
            body = {"hypernet_id": hypernet_id.hex(), "versions": list(versions)}
            return bytes([Tag.HELLO]) + canonical_json(body)
        case Challenge(nonce):
            _check_len(nonce, NONCE_BYTES, "challenge nonce")
            return bytes([Tag.CHALLENGE]) + nonce
        case Proof(generation, cluster_key, signature):
            _check_u64(generation, "proof generation")
            _check_len(cluster_key, KEY_BYTES, "proof cluster_key")
            _check_len(signature, SIGNATURE_BYTES, "proof signature")
            return bytes([Tag.PROOF]) + _PROOF.pack(generation, cluster_key, signature)
        case Request(seq, signature, operation, body, content, request_id, following):
            _check_u64(seq, "request seq")
            _check_len(signature, SIGNATURE_BYTES, "request signature")
            head = bytes([Tag.REQUEST]) + _REQUEST_HEAD.pack(seq, signature)
            return head + (content or request_content(operation, body, request_id, following))
        case Response(body):
            return bytes([Tag.RESPONSE]) + canonical_json(body)
        case Error(code, text, details):
            doc = {"code": code, "details": details, "message": text}
            return bytes([Tag.ERROR]) + canonical_json(doc)
        case Chunk(data):
            return bytes([Tag.CHUNK]) + data
        case End(total_bytes):
            _check_u64(total_bytes, "end total_bytes")
            return bytes([Tag.END]) + _U64.pack(total_bytes)
        case Cancel():
            return bytes([Tag.CANCEL])
        case Heartbeat(counter):
            _check_u64(counter, "heartbeat counter")
            return bytes([Tag.HEARTBEAT]) + _U64.pack(counter)
    raise TypeError(f"not a ficc.federation/1 message: {message!r}")


def request_content(
    operation: str,
    body: dict[str, Any],
    request_id: str | None = None,
    following: BodyFollows | None = None,
) -> bytes:
    """The canonical JSON a request carries and its signature covers.

    ``request_id`` and ``following`` are written only when there are some, so a request
    without them is byte for byte what it was before those fields existed.
    """
    content: dict[str, Any] = {"body": body, "operation": operation}
    if request_id is not None:
        content["request_id"] = request_id
    if following is not None:
        content["body_bytes"] = following.size
        content["body_sha256"] = following.sha256
    return canonical_json(content)


def _fixed(rest: bytes, size: int, name: str) -> bytes:
    if len(rest) != size:
        raise ProtocolError(f"{name} payload must be exactly {size} bytes after its tag")
    return rest


def _decode_hello(rest: bytes) -> Hello:
    doc = parse_json_object(rest, what="hello")
    if set(doc) != {"hypernet_id", "versions"}:
        raise ProtocolError("hello must have exactly the fields hypernet_id and versions")
    hex_id, versions = doc["hypernet_id"], doc["versions"]
    if not isinstance(hex_id, str) or not re.fullmatch(r"[0-9a-f]{64}", hex_id):
        raise ProtocolError("hello hypernet_id must be 64 lowercase hexadecimal characters")
    if (
        not isinstance(versions, list)
        or not 1 <= len(versions) <= MAX_VERSIONS
        or not all(type(v) is int and 1 <= v <= 65535 for v in versions)
    ):
        raise ProtocolError("hello versions must be 1 to 16 integers between 1 and 65535")
    return Hello(hypernet_id=bytes.fromhex(hex_id), versions=tuple(versions))


def _decode_request(rest: bytes) -> Request:
    if len(rest) < _REQUEST_HEAD.size:
        raise ProtocolError("request payload is shorter than its fixed header")
    seq, signature = _REQUEST_HEAD.unpack_from(rest)
    content = rest[_REQUEST_HEAD.size :]
    doc = parse_json_object(content, what="request")
    if set(doc) - {"request_id", "body_bytes", "body_sha256"} != {"body", "operation"}:
        raise ProtocolError(
            "request must have exactly the fields body and operation, and optionally "
            "request_id, and body_bytes with body_sha256"
        )
    operation, body, request_id = doc["operation"], doc["body"], doc.get("request_id")
    following = _following(doc)
    if following is not None and body != {}:
        raise ProtocolError("a request whose body follows in chunks carries the body {}")
    if "request_id" in doc and (
        not isinstance(request_id, str) or REQUEST_ID_PATTERN.fullmatch(request_id) is None
    ):
        raise ProtocolError("request request_id must be 1 to 128 letters, digits or ._:-")
    if not isinstance(operation, str) or not operation:
        raise ProtocolError("request operation must be a non-empty string")
    if not isinstance(body, dict):
        raise ProtocolError("request body must be a JSON object")
    # ``content`` parsed as canonical JSON with exactly these fields: it is the encoding of
    # ``{"body": body, "operation": operation[, "request_id": request_id]}``, byte for byte.
    return Request(
        seq=seq,
        signature=signature,
        operation=operation,
        body=body,
        content=content,
        request_id=request_id,
        following=following,
        body_bytes=(
            first_member_bytes(len(content), doc, "body") if following is None else following.size
        ),
    )


def _following(doc: dict[str, Any]) -> BodyFollows | None:
    """The announced body that follows the request, checked; None when none does."""
    if "body_bytes" not in doc and "body_sha256" not in doc:
        return None
    size, sha256 = doc.get("body_bytes"), doc.get("body_sha256")
    if (
        isinstance(size, bool)
        or not isinstance(size, int)
        or not 1 <= size <= MAX_FOLLOWING_BODY_BYTES
    ):
        raise ProtocolError(
            f"request body_bytes must be an integer from 1 to {MAX_FOLLOWING_BODY_BYTES}"
        )
    if not isinstance(sha256, str) or SHA256_HEX.fullmatch(sha256) is None:
        raise ProtocolError("request body_sha256 must be 64 lowercase hex characters")
    return BodyFollows(size, sha256)


def _decode_response(rest: bytes) -> Response:
    return Response(body=parse_json_object(rest, what="response"))


def _decode_error(rest: bytes) -> Error:
    doc = parse_json_object(rest, what="error")
    if set(doc) != {"code", "details", "message"}:
        raise ProtocolError("error must have exactly the fields code, details and message")
    code, text, details = doc["code"], doc["message"], doc["details"]
    if not isinstance(code, str) or not _ERROR_CODE.match(code):
        raise ProtocolError("error code must be snake_case")
    if not isinstance(text, str) or not isinstance(details, dict):
        raise ProtocolError("error message must be a string and details an object")
    return Error(code=code, message=text, details=details)


def decode_message(payload: bytes) -> Message:
    """The message a frame payload holds; anything malformed raises :class:`ProtocolError`."""
    if not payload:
        raise ProtocolError("an empty frame payload carries no message")
    tag, rest = payload[0], payload[1:]
    if tag == Tag.CHUNK:
        return Chunk(data=rest)
    if tag == Tag.REQUEST:
        return _decode_request(rest)
    if tag == Tag.RESPONSE:
        return _decode_response(rest)
    if tag == Tag.HEARTBEAT:
        return Heartbeat(counter=_U64.unpack(_fixed(rest, _U64.size, "heartbeat"))[0])
    if tag == Tag.END:
        return End(total_bytes=_U64.unpack(_fixed(rest, _U64.size, "end"))[0])
    if tag == Tag.CANCEL:
        _fixed(rest, 0, "cancel")
        return Cancel()
    if tag == Tag.ERROR:
        return _decode_error(rest)
    if tag == Tag.HELLO:
        return _decode_hello(rest)
    if tag == Tag.CHALLENGE:
        return Challenge(nonce=_fixed(rest, NONCE_BYTES, "challenge"))
    if tag == Tag.PROOF:
        generation, key, signature = _PROOF.unpack(_fixed(rest, _PROOF.size, "proof"))
        return Proof(generation=generation, cluster_key=key, signature=signature)
    raise ProtocolError(f"unknown message tag 0x{tag:02x}")


__all__ = [
    "KEY_BYTES",
    "LENGTH_BYTES",
    "MAX_FOLLOWING_BODY_BYTES",
    "NONCE_BYTES",
    "PROTOCOL_VERSION",
    "REQUEST_HEAD_BYTES",
    "REQUEST_ID_PATTERN",
    "SIGNATURE_BYTES",
    "SUPPORTED_VERSIONS",
    "BodyFollows",
    "Cancel",
    "Challenge",
    "Chunk",
    "End",
    "Error",
    "Heartbeat",
    "Hello",
    "Message",
    "Proof",
    "Request",
    "Response",
    "Tag",
    "decode_message",
    "encode_message",
    "request_content",
]
