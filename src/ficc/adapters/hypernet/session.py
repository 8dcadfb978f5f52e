"""One established peer connection: the shovel between iroh streams and a PeerConnection.

Every rule lives in :class:`~ficc.protocol.connection.PeerConnection`; this glue reads bytes
and hands them over, writes the bytes it returns, runs its timers (heartbeats, idle, read
deadlines) on the loop's clock, and runs handlers in tasks of their own. Each request travels
on its own bi-stream (idle ones are reused); any protocol error closes the whole connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any

from iroh import Connection, IrohError

from ficc.adapters.hypernet.errors import describe
from ficc.adapters.hypernet.requesting import Exchange, stream_answer
from ficc.adapters.hypernet.serving import serve_stream
from ficc.adapters.hypernet.streams import ABANDON_SECONDS, FrameStream
from ficc.base.errors import FiccError, ProtocolError, Unavailable
from ficc.protocol.connection import PeerConnection
from ficc.protocol.events import Event, PeerClosed
from ficc.protocol.frames import encode_frame
from ficc.protocol.handshake import Session
from ficc.protocol.limits import MAX_REQUESTS_IN_FLIGHT, MIN_READ_BYTES, SessionLimits
from ficc.protocol.messages import Error, encode_message
from ficc.protocol.sessions import Entry
from ficc.protocol.signing import Signer, Verify
from ficc.protocol.stream_states import (
    CANCELLED_CODE,
    PROTOCOL_ERROR_CODE,
    LocalProtocolError,
)
from ficc.services.peer_channel import BodyBound, PeerIdentity, RequestHandler

log = logging.getLogger(__name__)


class PeerSession:
    """A connection whose handshake succeeded; serves and sends requests until closed."""

    def __init__(
        self,
        *,
        connection: Connection,
        control: FrameStream,
        session: Session,
        signer: Signer,
        verify: Verify,
        handler: RequestHandler,
        on_closed: Callable[[PeerSession, FiccError], None],
        limits: SessionLimits | None = None,
        source: str | None = None,
        body_bound: BodyBound | None = None,
    ) -> None:
        self.loop = asyncio.get_running_loop()
        self.connection = connection
        self.session = session
        self.protocol = PeerConnection(session, signer, verify, self.loop.time(), limits=limits)
        self.identity = PeerIdentity(
            hypernet_id=session.remote_hypernet_id.hex(),
            cluster_key=session.remote_cluster_key,
            generation=session.generation,
            source=source,
        )
        self.source = source
        self.entry: Entry[PeerSession] | None = None
        """Its place in the endpoint's session table, where ``idle_since`` is kept."""
        self.incoming = self.protocol.incoming
        self.handler = handler
        self._body_bound = body_bound
        self.closed = asyncio.Event()
        self.close_reason: FiccError | None = None
        self.slots = asyncio.Semaphore(MAX_REQUESTS_IN_FLIGHT)
        self._control = control
        self._on_closed = on_closed
        self._streams: dict[int, FrameStream] = {}
        self._read_timers: dict[int, asyncio.Timeout] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        """Begin heartbeats and serving the peer's requests."""
        with contextlib.suppress(IrohError):
            self.connection.set_max_concurrent_bi_streams(self.protocol.stream_credit)
        self.spawn(self._send_heartbeats())
        self.spawn(self._read_control())
        self.spawn(self._accept_streams())

    def close(self, reason: FiccError, *, code: int = 0) -> None:
        """Close the connection and stop every task of this session (idempotent)."""
        if self.closed.is_set():
            return
        self.closed.set()
        self.close_reason = reason
        with contextlib.suppress(IrohError, ValueError):
            self.connection.close(code, reason.message.encode("utf-8", "replace")[:200])
        current = asyncio.current_task()
        for task in list(self._tasks):
            if task is not current:
                task.cancel()
        self._on_closed(self, reason)

    def spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        """Run ``coroutine`` as a task of this session (cancelled when it closes)."""
        task: asyncio.Task[None] = self.loop.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def fail(self, stream: FrameStream | None, error: ProtocolError) -> None:
        """A protocol error is terminal: tell the peer on ``stream``, then close everything."""
        log.info("closing the session with %s: %s", self.identity.hypernet_id, error.message)
        if stream is not None:
            with contextlib.suppress(FiccError, TimeoutError):
                async with asyncio.timeout(ABANDON_SECONDS):
                    await stream.write(encode_frame(encode_message(Error.from_exception(error))))
                    await stream.finish_and_wait()
        self.close(error, code=PROTOCOL_ERROR_CODE)

    # -- liveness -------------------------------------------------------------------------

    async def _send_heartbeats(self) -> None:
        try:
            while True:
                now = self.loop.time()
                reason = self.protocol.check_alive(now)
                if reason is not None:
                    self.close(reason)
                    return
                beat = self.protocol.heartbeat_due(now)
                if beat is not None:
                    await self._control.write(beat)
                await asyncio.sleep(max(0.0, self.protocol.next_deadline() - self.loop.time()))
        except FiccError as exc:
            self.close(exc)

    async def _read_control(self) -> None:
        try:
            pending = self._control.unconsumed()  # what the handshake's reads took past it
            while True:
                data = pending or await self._control.read(MIN_READ_BYTES)
                pending = b""
                for event in self.protocol.receive_control(data, self.loop.time()):
                    if isinstance(event, PeerClosed):
                        self.close(Unavailable(event.reason))
                        return
        except ProtocolError as exc:
            await self.fail(self._control, exc)
        except FiccError as exc:
            self.close(exc)

    # -- streams --------------------------------------------------------------------------

    async def _accept_streams(self) -> None:
        while True:
            try:
                stream = FrameStream(await self.connection.accept_bi())
            except IrohError as exc:
                self.close(Unavailable(f"the connection ended: {describe(exc)}"))
                return
            stream_id = self.protocol.accept_stream(self.loop.time())
            if stream_id is None:
                # QUIC's first stream credit cannot be taken back: refuse past the cap here.
                self.spawn(stream.reset(CANCELLED_CODE))
                continue
            self.spawn(self._serve(stream_id, stream))

    def receive_serving(self, stream_id: int, data: bytes) -> list[Event]:
        """Hand a serving stream's bytes to the connection, bounding the bodies that may
        follow a request by what the peer's grants allow now (they change as grants do)."""
        if self._body_bound is not None:
            self.protocol.max_body_bytes = self._body_bound(self.identity)
        return self.protocol.receive(stream_id, data, self.loop.time())

    async def _serve(self, stream_id: int, stream: FrameStream) -> None:
        self._touch()
        try:
            await serve_stream(self, stream_id, stream)
        finally:
            self._touch()
            self.protocol.close_stream(stream_id, self.loop.time())

    def _touch(self) -> None:
        """The peer's requests began or ended now: the idlest unpaired session is the one
        closed for a newcomer."""
        if self.entry is not None:
            self.entry.idle_since = self.loop.time()

    async def read(self, stream_id: int, stream: FrameStream) -> bytes:
        """The stream's next bytes, within the read deadline the connection sets for it."""
        try:
            async with asyncio.timeout_at(self.protocol.read_deadline(stream_id)) as timer:
                self._read_timers[stream_id] = timer
                return await stream.read(self.protocol.read_size(stream_id))
        except TimeoutError:
            raise self.protocol.read_expired(stream_id) from None
        finally:
            self._read_timers.pop(stream_id, None)

    def answered(self, stream_id: int) -> None:
        """Our answer on ``stream_id`` is written: a pending read now has the next request's
        deadline."""
        self.protocol.answer_flushed(stream_id, self.loop.time())
        timer = self._read_timers.get(stream_id)
        if timer is not None:
            timer.reschedule(self.protocol.read_deadline(stream_id))

    async def take_stream(self) -> tuple[int, FrameStream]:
        """An idle stream to reuse, else a new one."""
        stream_id, stale = self.protocol.take_idle_stream(self.loop.time())
        for old in stale:
            self.spawn(self._streams.pop(old).finish())
        if stream_id is not None:
            return stream_id, self._streams[stream_id]
        if self.closed.is_set():
            raise Unavailable("the session with the peer is closed")
        try:
            stream = FrameStream(await self.connection.open_bi())
        except IrohError as exc:
            raise Unavailable(f"cannot open a stream to the peer: {describe(exc)}") from exc
        stream_id = self.protocol.open_stream()
        self._streams[stream_id] = stream
        return stream_id, stream

    def return_stream(self, stream_id: int) -> None:
        """Our request on ``stream_id`` was answered: keep the stream for the next one."""
        stream = self._streams[stream_id]
        if self.closed.is_set():
            self.protocol.close_stream(stream_id, self.loop.time())
        elif self.protocol.release_stream(stream_id, self.loop.time()):
            return
        del self._streams[stream_id]
        self.spawn(stream.finish())

    def abandon(self, stream_id: int, *, cancelled: bool) -> None:
        """Our request on ``stream_id`` ended unanswered: cancel it if it went out, reset."""
        stream = self._streams.pop(stream_id)
        cancel = b""
        if cancelled:
            with contextlib.suppress(LocalProtocolError):
                cancel = self.protocol.send_cancel(stream_id)
        self.protocol.close_stream(stream_id, self.loop.time())

        async def abandon() -> None:
            if cancel and not stream.torn:
                with contextlib.suppress(FiccError, TimeoutError):
                    async with asyncio.timeout(ABANDON_SECONDS):
                        await stream.write(cancel)
            await stream.reset(CANCELLED_CODE)

        self.spawn(abandon())

    # -- requesting -----------------------------------------------------------------------

    async def request(
        self,
        operation: str,
        body: Mapping[str, Any],
        timeout_seconds: float,
        max_answer_bytes: int | None = None,
    ) -> dict[str, Any]:
        """Send one request and return its JSON result (at most ``max_answer_bytes``)."""
        exchange = Exchange(
            self, operation, dict(body), streaming=False, max_answer_bytes=max_answer_bytes
        )
        return await exchange.answer(timeout_seconds)

    def stream(
        self, operation: str, body: Mapping[str, Any], timeout_seconds: float
    ) -> AbstractAsyncContextManager[AsyncIterator[bytes]]:
        """Send one request and iterate the chunks it streams back."""
        return stream_answer(Exchange(self, operation, dict(body), streaming=True), timeout_seconds)
