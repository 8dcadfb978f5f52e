"""Drives the protocol core's handshake over a fresh connection's first bi-stream."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from typing import Final

from iroh import Connection, IrohError

from ficc.adapters.hypernet.errors import peer_close, translate
from ficc.adapters.hypernet.streams import FrameStream
from ficc.base.errors import FiccError, PeerUnreachable, ProtocolError
from ficc.protocol.handshake import Handshake, Role, Session, State
from ficc.protocol.messages import NONCE_BYTES, Error, Message
from ficc.protocol.sessions import NonceMemory
from ficc.protocol.signing import Signer, Verify
from ficc.protocol.stream_states import PROTOCOL_ERROR_CODE
from ficc.services.ports.peers import PeerLookup

log = logging.getLogger(__name__)

GOODBYE_SECONDS: Final = 1.0


async def refuse(connection: Connection, stream: FrameStream | None, error: FiccError) -> None:
    """Tell the peer why (an error frame it can read), then close the connection."""
    if stream is not None:
        with contextlib.suppress(FiccError, TimeoutError):
            async with asyncio.timeout(GOODBYE_SECONDS):
                await stream.send(Error.from_exception(error))
                await stream.finish_and_wait()
    reason = error.message.encode("utf-8", "replace")[:200]
    with contextlib.suppress(IrohError, ValueError):
        connection.close(PROTOCOL_ERROR_CODE, reason)


def _refusal(failure: PeerUnreachable) -> ProtocolError | None:
    """The peer's refusal, when it closed the connection for one while we were still writing
    (its error frame unread): the same refusal a read of that frame gives."""
    closed = peer_close(failure)
    if closed is None or closed[0] != PROTOCOL_ERROR_CODE:
        return None
    return ProtocolError(
        f"the peer refused the handshake: {closed[1]}", details={"peer_code": ProtocolError.code}
    )


async def run_handshake(
    connection: Connection,
    role: Role,
    *,
    local_hypernet_id: bytes,
    signer: Signer,
    verify: Verify,
    lookup: PeerLookup,
    nonces: NonceMemory,
    generation: int = 0,
    nonce: bytes | None = None,
    first_message_seconds: float | None = None,
) -> tuple[Session, FrameStream]:
    """Run the handshake; on success return the session and its control stream.

    ``generation`` is the pairing an initiator binds the session to (0: none). On a protocol
    error the peer receives an error frame and the connection is closed. ``nonce`` is fresh
    randomness unless a test fixes it. A responder given ``first_message_seconds`` raises
    TimeoutError unless the peer's whole first message arrives within it: a silent
    connection must not hold a handshake place.
    """
    remote_id = connection.remote_id().to_bytes()
    known = await lookup(remote_id.hex())
    machine = Handshake(
        role=role,
        local_hypernet_id=local_hypernet_id,
        remote_hypernet_id=remote_id,
        signer=signer,
        verify=verify,
        nonce=nonce if nonce is not None else secrets.token_bytes(NONCE_BYTES),
        known_peers=known,
        generation=generation,
        nonce_is_fresh=nonces.fresh,
    )
    stream: FrameStream | None = None
    received: list[Message | None] = []
    try:
        try:
            if role is Role.INITIATOR:
                stream = FrameStream(await connection.open_bi())
                await stream.send(*machine.begin())
            else:
                async with asyncio.timeout(first_message_seconds):
                    stream = FrameStream(await connection.accept_bi())
                    received.append(await stream.receive())
        except IrohError as exc:
            raise translate(exc, "opening the handshake stream") from exc
        while machine.state is not State.ESTABLISHED:
            message = received.pop() if received else await stream.receive()
            if message is None:
                raise PeerUnreachable("the peer ended the handshake without an answer")
            outgoing = machine.receive(message)
            if outgoing:
                try:
                    await stream.send(*outgoing)
                except PeerUnreachable as exc:
                    raise _refusal(exc) or exc from exc
    except ProtocolError as exc:
        log.info("handshake with %s refused: %s", remote_id.hex(), exc.message)
        refused_by_peer = "peer_code" in exc.details
        await refuse(connection, None if refused_by_peer else stream, exc)
        raise
    except BaseException:
        if stream is not None:
            await asyncio.shield(stream.reset())
        raise
    return machine.session, stream
