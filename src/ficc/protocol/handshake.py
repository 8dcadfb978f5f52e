"""The ficc.federation/1 handshake, as a state machine written as a table.

Both sides send a fresh challenge nonce; each answers with an Ed25519 signature by its FICC
cluster key over both HyperNet IDs (initiator first), the ALPN, both nonces and the pairing
generation. The machine knows the SDK-verified remote HyperNet ID and the pairings recorded
for it (a cluster key and a generation each: one cluster may pair with several projects of
another). The initiator proves the generation of the pairing its session is for (0: none);
the responder accepts 0 or a generation it recorded, and answers with the same. Any error is
terminal: the machine moves to ``FAILED`` and raises :class:`ProtocolError`, which the caller
sends as an error frame.

Flight order (see ``docs/protocol.md``)::

    initiator                              responder
      Hello(versions), Challenge(n_i)  -->
                                       <--  Hello(chosen), Challenge(n_r)
      Proof(initiator)                 -->
                                       <--  Proof(responder)
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from ficc.base.errors import ProtocolError
from ficc.protocol import ALPN
from ficc.protocol.messages import (
    KEY_BYTES,
    SUPPORTED_VERSIONS,
    Challenge,
    Error,
    Hello,
    Message,
    Proof,
)
from ficc.protocol.signing import Signer, Verify
from ficc.protocol.transcript import Transcript


class Role(enum.Enum):
    """Who opened the connection; the byte goes into every signed message."""

    INITIATOR = b"I"
    RESPONDER = b"R"

    @property
    def other(self) -> Role:
        """The peer's role."""
        return Role.RESPONDER if self is Role.INITIATOR else Role.INITIATOR


class State(enum.Enum):
    """Where a handshake stands."""

    START = "start"
    AWAIT_HELLO = "await_hello"
    AWAIT_CHALLENGE = "await_challenge"
    AWAIT_PROOF = "await_proof"
    ESTABLISHED = "established"
    FAILED = "failed"


class Event(enum.Enum):
    """What happened: the local start, or the kind of message received."""

    BEGIN = "begin"
    HELLO = "hello"
    CHALLENGE = "challenge"
    PROOF = "proof"
    ERROR = "error"
    OTHER = "other message"


def event_of(message: Message) -> Event:
    """The event a received message is."""
    if isinstance(message, Hello):
        return Event.HELLO
    if isinstance(message, Challenge):
        return Event.CHALLENGE
    if isinstance(message, Proof):
        return Event.PROOF
    if isinstance(message, Error):
        return Event.ERROR
    return Event.OTHER


@dataclass(frozen=True)
class KnownPeer:
    """What this side recorded for the remote HyperNet ID when they paired (one per pairing)."""

    cluster_key: bytes
    generation: int


@dataclass(frozen=True)
class Session:
    """An established session: the proven remote identity and the keys of the request layer."""

    session_id: bytes
    role: Role
    version: int
    local_hypernet_id: bytes
    remote_hypernet_id: bytes
    remote_cluster_key: bytes
    generation: int


Action = Callable[["Handshake", "Message | None"], list[Message]]


class Handshake:
    """One side of one handshake. Feed it received messages; send what it returns.

    ``nonce`` must be fresh randomness (32 bytes); ``nonce_is_fresh`` may refuse a remote
    nonce seen before. ``known_peers`` are the pairings recorded for the remote HyperNet ID
    (none: any cluster key is accepted at generation 0 and the caller decides what the peer
    may do; some: the peer must prove their cluster key). ``generation`` is the pairing the
    initiator binds the session to, one of ``known_peers`` or 0; the responder takes it from
    the initiator's proof.
    """

    def __init__(
        self,
        *,
        role: Role,
        local_hypernet_id: bytes,
        remote_hypernet_id: bytes,
        signer: Signer,
        verify: Verify,
        nonce: bytes,
        known_peers: Sequence[KnownPeer] = (),
        generation: int = 0,
        nonce_is_fresh: Callable[[bytes], bool] | None = None,
        alpn: bytes = ALPN,
        versions: tuple[int, ...] = SUPPORTED_VERSIONS,
    ) -> None:
        for value, name in (
            (local_hypernet_id, "local_hypernet_id"),
            (remote_hypernet_id, "remote_hypernet_id"),
            (nonce, "nonce"),
        ):
            if len(value) != KEY_BYTES:
                raise ValueError(f"{name} must be 32 bytes")
        self.role = role
        self.state = State.START if role is Role.INITIATOR else State.AWAIT_HELLO
        self._local_id = local_hypernet_id
        self._remote_id = remote_hypernet_id
        self._signer = signer
        self._verify = verify
        self._nonce = nonce
        self._known = tuple(known_peers)
        self._nonce_is_fresh = nonce_is_fresh
        self._alpn = alpn
        self._versions = versions
        if role is Role.INITIATOR and generation and self._recorded_key(generation) is None:
            raise ValueError(f"no pairing is recorded at generation {generation}")
        self._generation = generation if role is Role.INITIATOR else 0
        self._version: int | None = None
        self._remote_nonce: bytes | None = None
        self._session: Session | None = None
        self._table = INITIATOR_TABLE if role is Role.INITIATOR else RESPONDER_TABLE

    @property
    def session(self) -> Session:
        """The established session; asking earlier is a programming error."""
        if self._session is None:
            raise RuntimeError("the handshake is not established")
        return self._session

    def begin(self) -> list[Message]:
        """The initiator's first flight."""
        return self._dispatch(Event.BEGIN, None)

    def receive(self, message: Message) -> list[Message]:
        """Advance on a received message; return the messages to send, in order."""
        return self._dispatch(event_of(message), message)

    def _dispatch(self, event: Event, message: Message | None) -> list[Message]:
        if self.state is State.FAILED:
            raise ProtocolError("the handshake already failed")
        entry = self._table.get((self.state, event))
        if entry is None:
            reason = f"unexpected {event.value} during the handshake ({self._where(event)})"
            self.state = State.FAILED
            raise ProtocolError(reason)
        next_state, action = entry
        try:
            outgoing = action(self, message)
        except ProtocolError:
            self.state = State.FAILED
            raise
        self.state = next_state
        return outgoing

    def _where(self, event: Event) -> str:
        return f"{self.role.name.lower()} in state {self.state.value}"

    # -- actions -------------------------------------------------------------------------

    def _ids(self) -> tuple[bytes, bytes]:
        if self.role is Role.INITIATOR:
            return self._local_id, self._remote_id
        return self._remote_id, self._local_id

    def _nonces(self) -> tuple[bytes, bytes]:
        assert self._remote_nonce is not None
        if self.role is Role.INITIATOR:
            return self._nonce, self._remote_nonce
        return self._remote_nonce, self._nonce

    def _open(self, _: Message | None) -> list[Message]:
        return [Hello(self._local_id, self._versions), Challenge(self._nonce)]

    def _check_claimed_id(self, hello: Hello) -> None:
        if hello.hypernet_id != self._remote_id:
            raise ProtocolError(
                "the hello claims another HyperNet ID than the transport verified",
                details={"claimed": hello.hypernet_id.hex(), "verified": self._remote_id.hex()},
            )

    def _answer_hello(self, message: Message | None) -> list[Message]:
        assert isinstance(message, Hello)
        self._check_claimed_id(message)
        common = set(message.versions) & set(self._versions)
        if not common:
            raise ProtocolError(
                f"unsupported protocol version: the peer offers {list(message.versions)}, "
                f"this side speaks {list(self._versions)}",
                details={"supported": list(self._versions)},
            )
        self._version = max(common)
        return [Hello(self._local_id, (self._version,)), Challenge(self._nonce)]

    def _accept_hello(self, message: Message | None) -> list[Message]:
        assert isinstance(message, Hello)
        self._check_claimed_id(message)
        if len(message.versions) != 1 or message.versions[0] not in self._versions:
            raise ProtocolError(
                f"the responder chose version {list(message.versions)}, "
                f"this side offered {list(self._versions)}"
            )
        self._version = message.versions[0]
        return []

    def _take_nonce(self, message: Message | None) -> list[Message]:
        assert isinstance(message, Challenge)
        if message.nonce == self._nonce:
            raise ProtocolError("the peer reflected this side's challenge nonce")
        if self._nonce_is_fresh is not None and not self._nonce_is_fresh(message.nonce):
            raise ProtocolError("the peer's challenge nonce was seen before (a replay)")
        self._remote_nonce = message.nonce
        return []

    def _transcript(self) -> Transcript:
        initiator_id, responder_id = self._ids()
        initiator_nonce, responder_nonce = self._nonces()
        return Transcript(
            initiator_id,
            responder_id,
            self._alpn,
            initiator_nonce,
            responder_nonce,
            self._generation,
        )

    def _prove(self) -> Proof:
        key = self._signer.public_key
        signed = self._transcript().proof_message(signer_role=self.role.value, cluster_key=key)
        signature = self._signer.sign(signed)
        return Proof(generation=self._generation, cluster_key=key, signature=signature)

    def _take_nonce_and_prove(self, message: Message | None) -> list[Message]:
        self._take_nonce(message)
        return [self._prove()]

    def _recorded_key(self, generation: int) -> bytes | None:
        """The cluster key recorded with the pairing at ``generation``."""
        for known in self._known:
            if known.generation == generation:
                return known.cluster_key
        return None

    def _check_generation_and_key(self, proof: Proof) -> None:
        """The proven generation is this session's (a responder adopts the initiator's if it
        recorded that pairing), and the key is the one recorded for the HyperNet ID."""
        if self.role is Role.RESPONDER:
            if proof.generation and self._recorded_key(proof.generation) is None:
                raise ProtocolError(
                    f"pairing generation mismatch: the peer is at {proof.generation}, "
                    "this side has no pairing with it at that generation"
                )
            self._generation = proof.generation
        elif proof.generation != self._generation:
            raise ProtocolError(
                f"pairing generation mismatch: the peer is at {proof.generation}, "
                f"this side at {self._generation}"
            )
        recorded = (
            {key}
            if (key := self._recorded_key(self._generation)) is not None
            else {known.cluster_key for known in self._known}
        )
        if recorded and proof.cluster_key not in recorded:
            raise ProtocolError(
                "the peer proved another cluster key than the one recorded for its HyperNet ID",
                details={"hypernet_id": self._remote_id.hex()},
            )

    def _check_proof(self, message: Message | None) -> None:
        assert isinstance(message, Proof)
        # From here on the proven generation is this session's: the transcript binds it.
        self._check_generation_and_key(message)
        transcript = self._transcript()
        signed = transcript.proof_message(
            signer_role=self.role.other.value, cluster_key=message.cluster_key
        )
        if not self._verify(message.cluster_key, signed, message.signature):
            raise ProtocolError("the handshake proof's signature does not verify")
        assert self._version is not None
        keys = (self._signer.public_key, message.cluster_key)
        initiator_key, responder_key = keys if self.role is Role.INITIATOR else keys[::-1]
        self._session = Session(
            session_id=transcript.session_id(
                version=self._version, initiator_key=initiator_key, responder_key=responder_key
            ),
            role=self.role,
            version=self._version,
            local_hypernet_id=self._local_id,
            remote_hypernet_id=self._remote_id,
            remote_cluster_key=message.cluster_key,
            generation=self._generation,
        )

    def _finish(self, message: Message | None) -> list[Message]:
        self._check_proof(message)
        return []

    def _finish_and_prove(self, message: Message | None) -> list[Message]:
        self._check_proof(message)
        return [self._prove()]

    def _peer_refused(self, message: Message | None) -> list[Message]:
        assert isinstance(message, Error)
        raise ProtocolError(
            f"the peer refused the handshake: {message.message}",
            details={"peer_code": message.code},
        )


S, E = State, Event
_PEER_REFUSALS: Final[dict[tuple[State, Event], tuple[State, Action]]] = {
    (waiting, E.ERROR): (S.FAILED, Handshake._peer_refused)
    for waiting in (S.AWAIT_HELLO, S.AWAIT_CHALLENGE, S.AWAIT_PROOF)
}
"""On either side, an error frame in any state that waits for the peer ends the handshake."""

INITIATOR_TABLE: Final[dict[tuple[State, Event], tuple[State, Action]]] = {
    (S.START, E.BEGIN): (S.AWAIT_HELLO, Handshake._open),
    (S.AWAIT_HELLO, E.HELLO): (S.AWAIT_CHALLENGE, Handshake._accept_hello),
    (S.AWAIT_CHALLENGE, E.CHALLENGE): (S.AWAIT_PROOF, Handshake._take_nonce_and_prove),
    (S.AWAIT_PROOF, E.PROOF): (S.ESTABLISHED, Handshake._finish),
    **_PEER_REFUSALS,
}
"""Initiator: state × event → (next state, action). A missing pair is a protocol error."""

RESPONDER_TABLE: Final[dict[tuple[State, Event], tuple[State, Action]]] = {
    (S.AWAIT_HELLO, E.HELLO): (S.AWAIT_CHALLENGE, Handshake._answer_hello),
    (S.AWAIT_CHALLENGE, E.CHALLENGE): (S.AWAIT_PROOF, Handshake._take_nonce),
    (S.AWAIT_PROOF, E.PROOF): (S.ESTABLISHED, Handshake._finish_and_prove),
    **_PEER_REFUSALS,
}
"""Responder: state × event → (next state, action). A missing pair is a protocol error."""
del S, E
