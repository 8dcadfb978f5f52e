"""One QUIC bi-stream carrying ficc.federation/1 frames.

Frames are written header and body in one ``write_all`` (thousands of tiny writes can kill a
connection in quinn); reads feed a :class:`FrameDecoder`, which refuses an oversized length
before buffering its payload. Every error path calls :meth:`FrameStream.reset`, because a
dropped stream looks like a clean end to the peer.
"""

from __future__ import annotations

import contextlib
from collections import deque
from typing import Final

from iroh import BiStream, IrohError

from ficc.adapters.hypernet_errors import translate
from ficc.base.errors import ProtocolError
from ficc.base.units import KiB
from ficc.protocol.frames import FrameDecoder, encode_frame
from ficc.protocol.messages import Message, decode_message_parts, encode_message

MIN_READ_BYTES: Final = 64 * KiB
FRAME_OVERHEAD: Final = 64
"""Read a little past a frame, so a read that completes one also takes the next header."""
CANCELLED_CODE: Final = 1
PROTOCOL_ERROR_CODE: Final = 2
FAILED_CODE: Final = 3


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

    async def send(self, *messages: Message) -> None:
        """Write ``messages`` as frames in a single write."""
        await self.write(b"".join(encode_frame(encode_message(m)) for m in messages))

    async def write(self, frames: bytes) -> None:
        """Write already-encoded frames."""
        try:
            await self._send.write_all(frames)
        except IrohError as exc:
            raise translate(exc, "writing to the peer") from exc

    async def receive(self) -> Message | None:
        """The next message, or ``None`` when the peer finished the stream cleanly."""
        while not self._payloads:
            try:
                data = await self._recv.read(max(self._read_bytes, self._decoder.wanted_bytes))
            except IrohError as exc:
                raise translate(exc, "reading from the peer") from exc
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

    async def reset(self, code: int = FAILED_CODE) -> None:
        """Abort both directions so the peer sees an error, never a clean end."""
        if not self.finished:
            self.finished = True
            with contextlib.suppress(IrohError):
                await self._send.reset(code)
        with contextlib.suppress(IrohError):
            await self._recv.stop(code)
