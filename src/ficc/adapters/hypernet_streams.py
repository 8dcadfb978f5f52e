"""One QUIC bi-stream carrying ficc.federation/1 frames.

Frames are written header and body in one ``write_all`` (thousands of tiny writes can kill a
connection in quinn); reads feed a :class:`FrameDecoder`, which refuses an oversized length
before buffering its payload. Every error path calls :meth:`FrameStream.reset`, because a
dropped stream looks like a clean end to the peer.

Every write has a progress deadline: a peer that stops reading blocks a write for ever under
QUIC flow control (heartbeats keep the connection up), so a write that makes no progress for
:data:`WRITE_STALL_SECONDS` resets the stream and fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
from collections import deque
from typing import Final

from iroh import BiStream, IrohError

from ficc.adapters.hypernet_errors import translate
from ficc.base.errors import (
    FiccError,
    GrantExpired,
    GrantRevoked,
    InvalidInput,
    ProtocolError,
    Unavailable,
)
from ficc.base.units import KiB
from ficc.protocol.frames import FrameDecoder, encode_frame
from ficc.protocol.messages import Message, decode_message_parts, encode_message

MIN_READ_BYTES: Final = 64 * KiB
FRAME_OVERHEAD: Final = 64
"""Read a little past a frame, so a read that completes one also takes the next header."""
CANCELLED_CODE: Final = 1
PROTOCOL_ERROR_CODE: Final = 2
FAILED_CODE: Final = 3
GRANT_REVOKED_CODE: Final = 4
GRANT_EXPIRED_CODE: Final = 5
RESET_CODES: Final = {"grant_revoked": GRANT_REVOKED_CODE, "grant_expired": GRANT_EXPIRED_CODE}
"""Reset codes that name why the serving side ended a request (no frame could say it)."""
WRITE_STALL_SECONDS: Final = 30.0
"""A write that makes no progress for this long resets the stream (the peer stopped reading)."""
WRITE_STALL_VARIABLE: Final = "FICC_HYPERNET_WRITE_STALL_SECONDS"
"""Overrides :data:`WRITE_STALL_SECONDS` (0.1 to 3600); tests set it to watch a stall end."""
RESET_LOOKUP_SECONDS: Final = 0.5
"""How long a failed read waits to learn the peer's reset code (it is normally known)."""
WRITE_PIECE_BYTES: Final = 256 * KiB
"""Progress is counted per piece: a frame larger than this is written in pieces this big."""


@functools.cache
def write_stall_seconds() -> float:
    """:data:`WRITE_STALL_SECONDS`, or the value of :data:`WRITE_STALL_VARIABLE` when set."""
    raw = os.environ.get(WRITE_STALL_VARIABLE, "").strip()
    if not raw:
        return WRITE_STALL_SECONDS
    try:
        seconds = float(raw)
    except ValueError:
        seconds = 0.0
    if not 0.1 <= seconds <= 3600:
        raise InvalidInput(
            f"{WRITE_STALL_VARIABLE} must be a number of seconds from 0.1 to 3600",
            field=WRITE_STALL_VARIABLE,
        )
    return seconds


def reset_code(reason: FiccError) -> int:
    """The reset code that tells the peer ``reason`` when no error frame can."""
    return RESET_CODES.get(reason.code, FAILED_CODE)


class FrameStream:
    """Typed messages over one bi-stream; one reader and one writer at a time."""

    def __init__(self, stream: BiStream) -> None:
        self._stream = stream
        self._send = stream.send()
        self._recv = stream.recv()
        self._decoder = FrameDecoder()
        self._payloads: deque[list[memoryview]] = deque()
        self._read_bytes = MIN_READ_BYTES
        self.finished = False
        self.torn = False
        """A write stopped in the middle of a frame: only a reset may follow."""

    async def send(self, *messages: Message) -> None:
        """Write ``messages`` as frames in a single write."""
        await self.write(b"".join(encode_frame(encode_message(m)) for m in messages))

    async def write(self, frames: bytes) -> None:
        """Write already-encoded frames; no progress for the stall deadline resets the stream.

        A frame is written in one call when it fits a piece (the usual case), so the peer does
        not see thousands of tiny writes.
        """
        stall = write_stall_seconds()
        self.torn = True  # until the last byte is accepted; a cancel may stop us anywhere
        try:
            for start in range(0, len(frames), WRITE_PIECE_BYTES):
                piece = (
                    frames
                    if len(frames) <= WRITE_PIECE_BYTES
                    else frames[start : start + WRITE_PIECE_BYTES]
                )
                async with asyncio.timeout(stall):
                    await self._send.write_all(piece)
        except TimeoutError:
            # Only our sending half: a read of this stream may be pending, and stopping the
            # receiving half would wait for it.
            await self.reset_sending()
            raise Unavailable(
                f"the peer read nothing for {stall:g} s; the stream was reset",
                details={"limit": "write_stall_seconds", "allowed": stall},
            ) from None
        except IrohError as exc:
            raise translate(exc, "writing to the peer") from exc
        self.torn = False

    async def receive(self) -> Message | None:
        """The next message, or ``None`` when the peer finished the stream cleanly."""
        while not self._payloads:
            try:
                data = await self._recv.read(max(self._read_bytes, self._decoder.wanted_bytes))
            except IrohError as exc:
                raise await self._read_failure(exc) from exc
            if not data:
                if self._decoder.buffered_bytes:
                    raise ProtocolError("the peer ended a stream in the middle of a frame")
                return None
            self._payloads.extend(self._decoder.feed_parts(data))
        parts = self._payloads.popleft()
        # Ask for about a frame at a time: as much as the last frame when it was large (a
        # stream of chunks), so each read may complete a frame; little for small messages
        # (iroh allocates what a read asks for).
        self._read_bytes = max(MIN_READ_BYTES, sum(len(part) for part in parts) + FRAME_OVERHEAD)
        return decode_message_parts(parts)

    async def _read_failure(self, exc: IrohError) -> FiccError:
        """The error for a failed read: the one a reset code names, if the peer gave one."""
        code = None
        with contextlib.suppress(IrohError, TimeoutError):
            async with asyncio.timeout(RESET_LOOKUP_SECONDS):
                code = await self._recv.received_reset()
        if code == GRANT_REVOKED_CODE:
            return GrantRevoked("the grant was revoked; the peer ended the request")
        if code == GRANT_EXPIRED_CODE:
            return GrantExpired("the grant expired; the peer ended the request")
        return translate(exc, "reading from the peer")

    async def finish(self) -> None:
        """End our side cleanly (best effort: the peer may already be gone)."""
        if self.finished:
            return
        self.finished = True
        with contextlib.suppress(IrohError):
            await self._send.finish()

    async def finish_and_wait(self) -> None:
        """Finish, then wait until the peer has acknowledged everything we wrote."""
        await self.finish()
        with contextlib.suppress(IrohError):
            await self._send.stopped()

    async def reset_sending(self, code: int = FAILED_CODE) -> None:
        """Abort our sending half: the peer's reads fail with ``code``."""
        if not self.finished:
            self.finished = True
            with contextlib.suppress(IrohError):
                await self._send.reset(code)

    async def reset(self, code: int = FAILED_CODE) -> None:
        """Abort both directions so the peer sees an error, never a clean end."""
        if not self.finished:
            self.finished = True
            with contextlib.suppress(IrohError):
                await self._send.reset(code)
        with contextlib.suppress(IrohError):
            await self._recv.stop(code)
