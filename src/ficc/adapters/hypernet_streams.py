"""One QUIC bi-stream carrying ficc.federation/1 frames.

Frames are written header and body in one ``write_all`` (thousands of tiny writes can kill a
connection in quinn); reads feed a :class:`FrameDecoder`, which refuses an oversized length
before buffering its payload. Every error path calls :meth:`FrameStream.reset`, because a
dropped stream looks like a clean end to the peer.

A frame whose first bytes have arrived must complete within the stream's frame deadline, and
the bytes of unfinished frames count against their connection's :class:`ReadBudget`: a peer
that sends half frames and falls silent holds little memory, and not for long.

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
    LimitExceeded,
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


class ReadBudget:
    """The bytes of unfinished frames one connection may hold, summed over its streams.

    A stream that takes the sum past the limit is refused (its caller resets it), which frees
    its bytes; so a connection holds at most the limit plus one read.
    """

    def __init__(self, limit_bytes: int) -> None:
        self.limit_bytes = limit_bytes
        self.held_bytes = 0
        self._by_stream: dict[int, int] = {}

    def hold(self, stream: object, held_bytes: int) -> None:
        """Record what ``stream`` holds now; LimitExceeded when the sum passes the limit."""
        key = id(stream)
        self.held_bytes += held_bytes - self._by_stream.get(key, 0)
        if held_bytes:
            self._by_stream[key] = held_bytes
        else:
            self._by_stream.pop(key, None)
        if self.held_bytes > self.limit_bytes:
            raise LimitExceeded(
                f"unfinished frames on this connection exceed {self.limit_bytes} bytes",
                details={"limit": "buffered_bytes", "max": self.limit_bytes},
            )

    def release(self, stream: object) -> None:
        """``stream`` holds nothing any more (it ended or was reset)."""
        self.held_bytes -= self._by_stream.pop(id(stream), 0)


class FrameStream:
    """Typed messages over one bi-stream; one reader and one writer at a time."""

    def __init__(
        self,
        stream: BiStream,
        *,
        budget: ReadBudget | None = None,
        frame_deadline_seconds: float | None = None,
    ) -> None:
        self._stream = stream
        self._send = stream.send()
        self._recv = stream.recv()
        self._decoder = FrameDecoder()
        self._payloads: deque[list[memoryview]] = deque()
        self._read_bytes = MIN_READ_BYTES
        self._budget = budget
        self._frame_deadline_seconds = frame_deadline_seconds
        self._frame_started_at: float | None = None
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
            data = await self._read(max(self._read_bytes, self._decoder.wanted_bytes))
            if not data:
                if self._decoder.buffered_bytes:
                    raise ProtocolError("the peer ended a stream in the middle of a frame")
                return None
            completed = self._decoder.feed_parts(data)
            self._payloads.extend(completed)
            self._track_unfinished_frame(started_another=bool(completed))
        parts = self._payloads.popleft()
        # Ask for about a frame at a time: as much as the last frame when it was large (a
        # stream of chunks), so each read may complete a frame; little for small messages
        # (iroh allocates what a read asks for).
        self._read_bytes = max(MIN_READ_BYTES, sum(len(part) for part in parts) + FRAME_OVERHEAD)
        return decode_message_parts(parts)

    async def _read(self, size: int) -> bytes:
        """One read, within the frame deadline when a frame is under way."""
        started = self._frame_started_at
        limit = self._frame_deadline_seconds
        try:
            if started is None or limit is None:
                return await self._recv.read(size)
            async with asyncio.timeout_at(started + limit):
                return await self._recv.read(size)
        except IrohError as exc:
            raise await self._read_failure(exc) from exc
        except TimeoutError as exc:
            raise Unavailable(
                f"the peer began a frame and did not complete it within {limit:g} s",
                details={"limit": "frame_read_seconds", "max": limit},
            ) from exc

    def _track_unfinished_frame(self, *, started_another: bool) -> None:
        """Start the frame clock at a frame's first bytes; charge its bytes to the budget."""
        buffered = self._decoder.buffered_bytes
        if not buffered:
            self._frame_started_at = None
        elif started_another or self._frame_started_at is None:
            self._frame_started_at = asyncio.get_running_loop().time()
        if self._budget is not None:
            self._budget.hold(self, buffered)

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
        if self._budget is not None:
            self._budget.release(self)
        if not self.finished:
            self.finished = True
            with contextlib.suppress(IrohError):
                await self._send.reset(code)
        with contextlib.suppress(IrohError):
            await self._recv.stop(code)
