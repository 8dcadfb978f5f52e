"""Per-request signatures bound to a session, a direction and a sequence number.

Each side numbers the requests it sends 1, 2, 3… and signs ``domain ‖ session_id ‖ sender
role ‖ seq ‖ content``. Requests travel on several streams at once, so the receiver keeps an
anti-replay window: a sequence number seen before, or more than :data:`REPLAY_WINDOW` below
the highest seen, is refused, and so is one not above the previous request on the same stream.
"""

from __future__ import annotations

import hashlib
import struct
from typing import Any, Final

from ficc.base.canonical import canonical_json
from ficc.base.errors import ProtocolError
from ficc.protocol.frames import MAX_FRAME_BYTES
from ficc.protocol.handshake import Role, Session
from ficc.protocol.messages import (
    MAX_FOLLOWING_BODY_BYTES,
    MAX_U64,
    REQUEST_HEAD_BYTES,
    BodyFollows,
    Request,
    request_content,
)
from ficc.protocol.signing import Signer, Verify

REQUEST_DOMAIN: Final = b"ficc.federation/1 request\x00"
REPLAY_WINDOW: Final = 1024
_SEQ: Final = struct.Struct(">Q")


def request_signing_message(
    *, session_id: bytes, sender: Role, seq: int, operation: str, body: dict[str, Any]
) -> bytes:
    """The exact bytes a request signature covers."""
    prefix = _signing_prefix(session_id, sender)
    return _signing_message(prefix, seq, request_content(operation, body))


def _signing_prefix(session_id: bytes, sender: Role) -> bytes:
    """What every request signature of one session and direction starts with."""
    return REQUEST_DOMAIN + session_id + sender.value


def _signing_message(prefix: bytes, seq: int, content: bytes) -> bytes:
    return b"".join([prefix, _SEQ.pack(seq), content])


def _content_of(request: Request) -> bytes:
    return request.content or request_content(
        request.operation, request.body, request.request_id, request.following
    )


class RequestSigner:
    """The sending direction of one session: numbers and signs outgoing requests."""

    def __init__(self, session: Session, signer: Signer) -> None:
        self._session = session
        self._signer = signer
        self._prefix = _signing_prefix(session.session_id, session.role)
        self._next_seq = 1

    def sign(self, operation: str, body: dict[str, Any], request_id: str | None = None) -> Request:
        """The next request of this direction, signed (its content encoded once, here)."""
        content = request_content(operation, body, request_id)
        return self._signed(operation, body, request_id, content, None)

    def sign_fitting(
        self, operation: str, body: dict[str, Any], request_id: str | None = None
    ) -> tuple[Request, bytes | None]:
        """The next request, signed to fit one frame, and the body to send after it as chunks
        when it does not fit (then announced in the request by size and SHA-256)."""
        content = request_content(operation, body, request_id)
        if REQUEST_HEAD_BYTES + len(content) <= MAX_FRAME_BYTES:
            return self._signed(operation, body, request_id, content, None), None
        body_json = canonical_json(body)
        if len(body_json) > MAX_FOLLOWING_BODY_BYTES:
            raise ProtocolError(
                f"a request body carries at most {MAX_FOLLOWING_BODY_BYTES} bytes; "
                f"this one is {len(body_json)}"
            )
        following = BodyFollows(len(body_json), hashlib.sha256(body_json).hexdigest())
        content = request_content(operation, {}, request_id, following)
        return self._signed(operation, {}, request_id, content, following), body_json

    def _signed(
        self,
        operation: str,
        body: dict[str, Any],
        request_id: str | None,
        content: bytes,
        following: BodyFollows | None,
    ) -> Request:
        seq = self._next_seq
        if seq > MAX_U64:
            raise ProtocolError("the session ran out of sequence numbers")
        self._next_seq += 1
        signature = self._signer.sign(_signing_message(self._prefix, seq, content))
        return Request(
            seq=seq,
            signature=signature,
            operation=operation,
            body=body,
            content=content,
            request_id=request_id,
            following=following,
        )


class ReplayWindow:
    """Sequence numbers accepted so far: the highest, and which of the last ``size`` were seen."""

    def __init__(self, size: int = REPLAY_WINDOW) -> None:
        self._size = size
        self._highest = 0
        self._seen = 0  # bit i set: highest - i was accepted

    def check(self, seq: int) -> None:
        """Refuse ``seq`` if it is zero, too old, or seen before; do not record it."""
        if seq == 0:
            raise ProtocolError("sequence numbers start at 1")
        if seq > self._highest:
            return
        offset = self._highest - seq
        if offset >= self._size:
            raise ProtocolError(
                f"sequence number {seq} is out of order: "
                f"more than {self._size} below {self._highest}"
            )
        if self._seen >> offset & 1:
            raise ProtocolError(f"sequence number {seq} was already used (a replay)")

    def record(self, seq: int) -> None:
        """Mark a checked ``seq`` as used."""
        if seq > self._highest:
            shift = seq - self._highest
            self._seen = ((self._seen << shift) | 1) & ((1 << self._size) - 1)
            self._highest = seq
        else:
            self._seen |= 1 << (self._highest - seq)


class RequestVerifier:
    """The receiving direction of one session: checks signature, session and order."""

    def __init__(self, session: Session, verify: Verify, window: int = REPLAY_WINDOW) -> None:
        self._session = session
        self._verify = verify
        self._prefix = _signing_prefix(session.session_id, session.role.other)
        self._window = ReplayWindow(window)

    def verify(self, request: Request, *, previous_on_stream: int = 0) -> None:
        """Accept ``request`` or raise :class:`ProtocolError`; acceptance is recorded."""
        if request.seq <= previous_on_stream:
            raise ProtocolError(
                f"sequence number {request.seq} is out of order on its stream "
                f"(previous {previous_on_stream})"
            )
        self._window.check(request.seq)
        message = _signing_message(self._prefix, request.seq, _content_of(request))
        if not self._verify(self._session.remote_cluster_key, message, request.signature):
            raise ProtocolError(
                "the request's signature does not verify for this session and sequence number"
            )
        self._window.record(request.seq)
