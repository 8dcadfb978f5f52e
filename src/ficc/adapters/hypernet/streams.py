"""One QUIC bi-stream: bytes in and out, each write with a progress deadline.

Frames are written header and body in one ``write_all`` (thousands of tiny writes can kill a
connection in quinn). A write that makes no progress for the stall deadline resets the stream.
Every error path resets, because a dropped stream looks like a clean end to the peer. What the
bytes mean is :class:`~ficc.protocol.connection.PeerConnection`'s business; :meth:`receive`
decodes whole messages only for the handshake and for tools that speak the protocol by hand.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
from collections import deque
from typing import Final

from iroh import BiStream, IrohError

from ficc.adapters.hypernet.deadlines import Deadline
from ficc.adapters.hypernet.errors import translate
from ficc.base.errors import (
    FiccError,
    GrantExpired,
    GrantRevoked,
    PeerUnreachable,
    ProtocolError,
)
from ficc.base.units import seconds_setting
from ficc.protocol.chunk_frames import decode_message_parts
from ficc.protocol.frames import FrameDecoder, encode_frame, join_parts
from ficc.protocol.limits import MIN_READ_BYTES, WRITE_PIECE_BYTES, WRITE_STALL_SECONDS
from ficc.protocol.messages import Message, encode_message
from ficc.protocol.stream_states import FAILED_CODE, GRANT_EXPIRED_CODE, GRANT_REVOKED_CODE

WRITE_STALL_VARIABLE: Final = "FICC_HYPERNET_WRITE_STALL_SECONDS"
"""Overrides :data:`WRITE_STALL_SECONDS` (0.1 to 3600); tests set it to watch a stall end."""
ABANDON_SECONDS: Final = 1.0
"""How long a goodbye (an error frame, a cancel) may take before the stream is just reset."""
RESET_LOOKUP_SECONDS: Final = 0.5
"""How long a failed read waits to learn the peer's reset code (it is normally known)."""


@functools.cache
def write_stall_seconds() -> float:
    """:data:`WRITE_STALL_SECONDS`, or the value of :data:`WRITE_STALL_VARIABLE` when set."""
    return seconds_setting(os.environ, WRITE_STALL_VARIABLE, WRITE_STALL_SECONDS)


class FrameStream:
    """One bi-stream; one reader and one writer at a time."""

    def __init__(self, stream: BiStream) -> None:
        self._stream = stream
        self._send = stream.send()
        self._recv = stream.recv()
        self._decoder = FrameDecoder()
        self._payloads: deque[list[memoryview]] = deque()
        self.finished = False
        self.torn = False
        """A write stopped in the middle of a frame: only a reset may follow."""

    async def send(self, *messages: Message) -> None:
        """Write ``messages`` as frames in a single write."""
        await self.write(b"".join(encode_frame(encode_message(m)) for m in messages))

    async def write(self, frames: bytes) -> None:
        """Write already-encoded frames; a piece (at most a whole frame) the peer does not
        take within the stall deadline resets the stream.

        A frame is written in one call (more only when several frames went together), so
        neither side pays for many small writes.
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
                with Deadline.after(stall):
                    await self._send.write_all(piece)
        except TimeoutError:
            # Only our sending half: a read of this stream may be pending, and stopping the
            # receiving half would wait for it.
            await self.reset_sending()
            raise PeerUnreachable(
                f"the peer read nothing for {stall:g} s; the stream was reset",
                details={"limit": "write_stall_seconds", "allowed": stall},
            ) from None
        except IrohError as exc:
            raise translate(exc, "writing to the peer") from exc
        self.torn = False

    async def read(self, size: int) -> bytes:
        """Up to ``size`` received bytes; ``b""`` once the peer finished the stream cleanly."""
        try:
            return await self._recv.read(size)
        except IrohError as exc:
            raise await self._read_failure(exc) from exc

    async def receive(self) -> Message | None:
        """The next whole message, or ``None`` when the peer finished the stream cleanly."""
        while not self._payloads:
            data = await self.read(max(MIN_READ_BYTES, self._decoder.wanted_bytes))
            if not data:
                if self._decoder.buffered_bytes:
                    raise ProtocolError("the peer ended a stream in the middle of a frame")
                return None
            self._payloads.extend(self._decoder.feed_parts(data))
        return decode_message_parts(self._payloads.popleft())

    def unconsumed(self) -> bytes:
        """What :meth:`receive` read but did not hand out, as it arrived: the bytes another
        reader of this stream must begin with."""
        payloads = b"".join(encode_frame(join_parts(parts)) for parts in self._payloads)
        self._payloads.clear()
        rest = self._decoder.unconsumed()
        self._decoder = FrameDecoder()
        return payloads + rest

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
        await self.reset_sending(code)
        with contextlib.suppress(IrohError):
            await self._recv.stop(code)
