"""One established peer connection: the shovel between iroh streams and a PeerConnection.

Every rule lives in :mod:`ficc.protocol` (the stream tables and caps in
:class:`~ficc.protocol.connection.PeerConnection`, what the peer is told in
:mod:`~ficc.protocol.outcomes`); this glue reads bytes and hands them over, writes the bytes
it gets back, runs the timers the connection asks for on the loop's clock, and runs each
request's handler in a task of its own. Each request travels on a bi-stream of its own (idle
ones are reused); each served stream has one task that reads it, so a cancel (or the stream's
end) reaches the handler at once. Any protocol error closes the whole connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine, Mapping
from contextlib import asynccontextmanager
from typing import Any

from iroh import Connection, IrohError

from ficc.adapters import metrics
from ficc.adapters.hypernet.accounting import counted
from ficc.adapters.hypernet.errors import describe
from ficc.adapters.hypernet.streams import ABANDON_SECONDS, FrameStream
from ficc.adapters.logs import current_request_id, new_request_id
from ficc.base.errors import FiccError, ProtocolError, Unavailable, error_from_code
from ficc.protocol.answers import complete_request, parse_large_answer
from ficc.protocol.connection import PeerConnection
from ficc.protocol.events import (
    AnswerEnded,
    AnswerReceived,
    DataReceived,
    ErrorReceived,
    Event,
    LargeAnswerReceived,
    LargeBodyReceived,
    PeerClosed,
    RequestCancelled,
    RequestReceived,
    RequestRefused,
    StreamEnded,
)
from ficc.protocol.frames import encode_frame
from ficc.protocol.handshake import Session
from ficc.protocol.limits import MAX_REQUESTS_IN_FLIGHT, MIN_READ_BYTES, SessionLimits
from ficc.protocol.messages import Error, encode_message
from ficc.protocol.outcomes import ending, refusal, unanswered
from ficc.protocol.sessions import Entry
from ficc.protocol.signing import Signer, Verify
from ficc.protocol.stream_states import CANCELLED_CODE, PROTOCOL_ERROR_CODE, LocalProtocolError
from ficc.services.peer_channel import BodyBound, PeerIdentity, RequestHandler, ending_reason

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
        self._loop = asyncio.get_running_loop()
        self.connection = connection
        self.protocol = PeerConnection(session, signer, verify, self._loop.time(), limits=limits)
        self.identity = PeerIdentity(
            hypernet_id=session.remote_hypernet_id.hex(),
            cluster_key=session.remote_cluster_key,
            generation=session.generation,
            source=source,
        )
        self.incoming = self.protocol.incoming
        self.entry: Entry[PeerSession] | None = None
        """Its place in the endpoint's session table, where ``idle_since`` is kept."""
        self.closed = asyncio.Event()
        self._handler = handler
        self._body_bound = body_bound
        self._slots = asyncio.Semaphore(MAX_REQUESTS_IN_FLIGHT)
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
        self._spawn(self._send_heartbeats())
        self._spawn(self._read_control())
        self._spawn(self._accept_streams())

    def close(self, reason: FiccError, *, code: int = 0) -> None:
        """Close the connection and stop every task of this session (idempotent)."""
        if self.closed.is_set():
            return
        self.closed.set()
        with contextlib.suppress(IrohError, ValueError):
            self.connection.close(code, reason.message.encode("utf-8", "replace")[:200])
        current = asyncio.current_task()
        for task in list(self._tasks):
            if task is not current:
                task.cancel()
        self._on_closed(self, reason)

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task: asyncio.Task[None] = self._loop.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _fail(self, stream: FrameStream | None, error: ProtocolError) -> None:
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
                now = self._loop.time()
                reason = self.protocol.check_alive(now)
                if reason is not None:
                    self.close(reason)
                    return
                beat = self.protocol.heartbeat_due(now)
                if beat is not None:
                    await self._control.write(beat)
                await asyncio.sleep(max(0.0, self.protocol.next_deadline() - self._loop.time()))
        except FiccError as exc:
            self.close(exc)

    async def _read_control(self) -> None:
        try:
            pending = self._control.unconsumed()  # what the handshake's reads took past it
            while True:
                data = pending or await self._control.read(MIN_READ_BYTES)
                pending = b""
                for event in self.protocol.receive_control(data, self._loop.time()):
                    if isinstance(event, PeerClosed):
                        self.close(Unavailable(event.reason))
                        return
        except ProtocolError as exc:
            await self._fail(self._control, exc)
        except FiccError as exc:
            self.close(exc)

    # -- reading --------------------------------------------------------------------------

    async def _read(self, stream_id: int, stream: FrameStream) -> bytes:
        """The stream's next bytes, within the read deadline the connection sets for it."""
        try:
            async with asyncio.timeout_at(self.protocol.read_deadline(stream_id)) as timer:
                self._read_timers[stream_id] = timer
                return await stream.read(self.protocol.read_size(stream_id))
        except TimeoutError:
            raise self.protocol.read_expired(stream_id) from None
        finally:
            self._read_timers.pop(stream_id, None)

    # -- serving --------------------------------------------------------------------------

    async def _accept_streams(self) -> None:
        while True:
            try:
                stream = FrameStream(await self.connection.accept_bi())
            except IrohError as exc:
                self.close(Unavailable(f"the connection ended: {describe(exc)}"))
                return
            stream_id = self.protocol.accept_stream(self._loop.time())
            if stream_id is None:
                # QUIC's first stream credit cannot be taken back: refuse past the cap here.
                self._spawn(stream.reset(CANCELLED_CODE))
                continue
            self._spawn(self._serve(stream_id, stream))

    async def _serve(self, stream_id: int, stream: FrameStream) -> None:
        """Read one incoming stream until it ends, fails or is cancelled; each request's
        handler runs in its own task meanwhile."""
        self._touch()
        reader = asyncio.current_task()
        work: asyncio.Task[None] | None = None
        clean = False
        try:
            while True:
                data = await self._read(stream_id, stream)
                if self._body_bound is not None:  # what the peer's grants allow now
                    self.protocol.max_body_bytes = self._body_bound(self.identity)
                for event in self.protocol.receive(stream_id, data, self._loop.time()):
                    if isinstance(event, RequestReceived | LargeBodyReceived | RequestRefused):
                        work = asyncio.ensure_future(self._answer(stream_id, stream, event))
                        work.add_done_callback(lambda done: self._answered(stream_id, done, reader))
                    elif isinstance(event, RequestCancelled):
                        if work is not None:
                            work.cancel()
                            await asyncio.wait({work})
                        await stream.reset(CANCELLED_CODE)
                        clean = True
                        return
                    elif isinstance(event, StreamEnded):
                        await stream.finish()
                        clean = True
                        return
        except ProtocolError as exc:
            _stop(work)
            await self._fail(stream, exc)
            clean = True
        except FiccError as exc:
            log.debug("request stream from %s ended: %s", self.identity.hypernet_id, exc)
        finally:
            _stop(work)
            if not clean:
                await asyncio.shield(stream.reset())
            self._touch()
            self.protocol.close_stream(stream_id, self._loop.time())

    def _touch(self) -> None:
        """The peer's requests began or ended now: the idlest unpaired session is the one
        closed for a newcomer."""
        if self.entry is not None:
            self.entry.idle_since = self._loop.time()

    def _answered(
        self, stream_id: int, work: asyncio.Future[None], reader: asyncio.Task[Any] | None
    ) -> None:
        """A handler's task ended: its own I/O failing ends the stream; else a pending read
        now has the next request's deadline."""
        failure = None if work.cancelled() else work.exception()
        if failure is not None:
            log.debug("serving a request of %s ended: %r", self.identity.hypernet_id, failure)
            if reader is not None:
                reader.cancel()
            return
        self.protocol.answer_flushed(stream_id, self._loop.time())
        timer = self._read_timers.get(stream_id)
        if timer is not None:
            timer.reschedule(self.protocol.read_deadline(stream_id))

    async def _answer(
        self,
        stream_id: int,
        stream: FrameStream,
        received: RequestReceived | LargeBodyReceived | RequestRefused,
    ) -> None:
        request = received.request
        if isinstance(received, LargeBodyReceived):
            # Checked and decoded in a worker thread, gradually: the loop serves everyone else
            # meanwhile. A body that fails is a protocol error, terminal like any.
            try:
                request = await asyncio.to_thread(complete_request, request, received.data)
            except ProtocolError as exc:
                await self._fail(stream, exc)
                return
        current_request_id.set(request.request_id or new_request_id())
        with counted("in", metrics.operation_label(request.operation)) as outcome:
            if isinstance(received, RequestRefused):  # its body was larger than grants allow
                outcome.append(received.error.code)
                await stream.write(self.protocol.send_error(stream_id, received.error))
                return
            try:
                frames = self._handle(stream_id, request.operation, request.body)
                async with contextlib.aclosing(frames):
                    async for frame in frames:
                        await stream.write(frame)
            except asyncio.CancelledError as cancelled:
                reason = ending_reason(cancelled)
                if reason is None:
                    raise  # the requester abandoned it, or the session is closing
                # The serving side ended the request (its grant ended). The handler has
                # unwound: its slot and engine request are freed; now tell the requester why.
                current = asyncio.current_task()
                if current is not None:
                    current.uncancel()
                outcome.append(reason.code)
                await self._tell_ended(stream_id, stream, reason)
            except _HandlerFailed as failed:
                # The handler's own failure (an engine down, a refusal, a bug): the requester
                # is told; only this stream's own I/O failing leaves the outcome unknown.
                error = refusal(failed.error)
                if not isinstance(failed.error, FiccError):
                    log.error("handler for %s failed", request.operation, exc_info=failed.error)
                outcome.append(error.code)
                await stream.write(self.protocol.send_error(stream_id, error))

    async def _handle(
        self, stream_id: int, operation: str, body: dict[str, Any]
    ) -> AsyncGenerator[bytes, None]:
        """The frames of the handler's answer, each made as it is to be written; whatever
        the handler raises comes as :class:`_HandlerFailed`."""
        protocol = self.protocol
        transfer = metrics.is_transfer(metrics.operation_label(operation))
        try:
            result = await self._handler(self.identity, operation, body)
        except Exception as exc:
            raise _HandlerFailed(exc) from exc
        if isinstance(result, dict):
            yield protocol.send_answer(stream_id, result)
            return
        try:
            while True:
                try:
                    chunk = await anext(result)
                except StopAsyncIteration:
                    break
                except Exception as exc:
                    raise _HandlerFailed(exc) from exc
                yield protocol.send_chunk(stream_id, chunk)
                if transfer:
                    metrics.TRANSFER_BYTES.labels(direction="out").inc(len(chunk))
        finally:
            close = getattr(result, "aclose", None)
            if close is not None:  # its ``finally`` runs now, whichever way this ends
                await close()
        yield protocol.send_end(stream_id)

    async def _tell_ended(self, stream_id: int, stream: FrameStream, reason: FiccError) -> None:
        """The frame :func:`~ficc.protocol.outcomes.ending` names if it goes out within
        ``ABANDON_SECONDS``; else the reset code it names."""
        told = ending(reason, torn=stream.torn)
        if told.frame is not None:
            with contextlib.suppress(FiccError, TimeoutError, LocalProtocolError):
                frame = self.protocol.send_error(stream_id, told.frame)
                async with asyncio.timeout(ABANDON_SECONDS):
                    await stream.write(frame)
                    return
        await stream.reset_sending(told.code)

    # -- requesting -----------------------------------------------------------------------

    async def request(
        self,
        operation: str,
        body: Mapping[str, Any],
        timeout_seconds: float,
        max_answer_bytes: int | None = None,
    ) -> dict[str, Any]:
        """Send one request and return its JSON result (at most ``max_answer_bytes``)."""
        with counted("out", metrics.operation_label(operation)):
            exchange = _Exchange(self, operation, timeout_seconds, per_message=False)
            async with exchange.running():
                await exchange.send(dict(body), streaming=False, max_answer_bytes=max_answer_bytes)
                event = await exchange.next_event()
                if isinstance(event, LargeAnswerReceived):
                    # Decoded in a worker thread, gradually: the loop serves everyone else.
                    answer = await asyncio.to_thread(parse_large_answer, event.data)
                elif isinstance(event, AnswerReceived):
                    answer = event.body
                else:
                    raise exchange.unexpected(event)
                exchange.complete = True
                return answer
        raise AssertionError("unreachable")  # pragma: no cover

    @asynccontextmanager
    async def stream(
        self, operation: str, body: Mapping[str, Any], timeout_seconds: float
    ) -> AsyncIterator[AsyncIterator[bytes]]:
        """Send one request and iterate the chunks it streams back; ``timeout_seconds``
        bounds the wait for each."""
        label = metrics.operation_label(operation)
        transfer = metrics.is_transfer(label)
        with counted("out", label):
            exchange = _Exchange(self, operation, timeout_seconds, per_message=True)
            async with exchange.running():
                await exchange.send(dict(body), streaming=True)
                first = await exchange.next_event()
                if not isinstance(first, DataReceived | AnswerEnded):
                    raise exchange.unexpected(first)

                async def chunks() -> AsyncGenerator[bytes, None]:
                    event: Event = first
                    while isinstance(event, DataReceived):
                        if transfer:
                            metrics.TRANSFER_BYTES.labels(direction="in").inc(len(event.data))
                        yield event.data
                        event = await exchange.next_event()
                    if not isinstance(event, AnswerEnded):
                        raise exchange.unexpected(event)
                    exchange.complete = True

                async with contextlib.aclosing(chunks()) as iterator:
                    yield iterator

    async def _take_stream(self) -> tuple[int, FrameStream]:
        """An idle stream to reuse, else a new one."""
        stream_id, stale = self.protocol.take_idle_stream(self._loop.time())
        for old in stale:
            self._spawn(self._streams.pop(old).finish())
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

    def _return_stream(self, stream_id: int) -> None:
        """Our request on ``stream_id`` was answered: keep the stream for the next one."""
        now = self._loop.time()
        if not self.closed.is_set() and self.protocol.release_stream(stream_id, now):
            return
        self.protocol.close_stream(stream_id, now)
        self._spawn(self._streams.pop(stream_id).finish())

    def _abandon(self, stream_id: int, *, sent: bool) -> None:
        """Our request on ``stream_id`` ended unanswered: cancel it if it went out, reset."""
        stream = self._streams.pop(stream_id)
        cancel = b""
        if sent:
            with contextlib.suppress(LocalProtocolError):
                cancel = self.protocol.send_cancel(stream_id)
        self.protocol.close_stream(stream_id, self._loop.time())

        async def abandon() -> None:
            if cancel and not stream.torn:
                with contextlib.suppress(FiccError, TimeoutError):
                    async with asyncio.timeout(ABANDON_SECONDS):
                        await stream.write(cancel)
            await stream.reset(CANCELLED_CODE)

        self._spawn(abandon())


class _Exchange:
    """One request of ours on one stream: its deadline, and its cleanup on every exit (an
    answered stream is kept for the next request, an unanswered one cancelled and reset)."""

    def __init__(
        self, session: PeerSession, operation: str, timeout_seconds: float, *, per_message: bool
    ) -> None:
        self._session = session
        self._operation = operation
        self._timeout = timeout_seconds
        self._per_message = per_message
        self._stream_id = 0
        self._stream: FrameStream | None = None
        self._events: list[Event] = []
        self._sent = False
        self.complete = False
        """The answer is whole: the stream may carry the next request."""

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        session = self._session
        try:
            async with asyncio.timeout(None if self._per_message else self._timeout):
                async with session._slots:
                    self._stream_id, self._stream = await session._take_stream()
                    yield
        except TimeoutError as exc:
            raise self._unanswered(f"no answer from the peer within {self._timeout} s") from exc
        except Unavailable as exc:
            if self._sent and not self.complete:
                raise self._unanswered(exc.message) from exc
            raise
        except ProtocolError as exc:
            if not self.complete:
                await session._fail(self._stream, exc)
            raise
        finally:
            if self._stream is not None:
                if self.complete:
                    session._return_stream(self._stream_id)
                else:
                    session._abandon(self._stream_id, sent=self._sent)

    def _unanswered(self, why: str) -> FiccError:
        return unanswered(self._operation, why, sent=self._sent)

    async def send(
        self, body: dict[str, Any], *, streaming: bool, max_answer_bytes: int | None = None
    ) -> None:
        """The request in one frame; a body too large for it follows as chunks and an end."""
        assert self._stream is not None
        frames = self._session.protocol.send_request(
            self._stream_id,
            self._operation,
            body,
            current_request_id.get(),
            streaming=streaming,
            max_answer_bytes=max_answer_bytes,
        )
        self._sent = True
        await self._stream.write(frames)

    async def next_event(self) -> Event:
        """What the peer's next bytes on the stream come to."""
        assert self._stream is not None
        session = self._session
        while not self._events:
            async with asyncio.timeout(self._timeout if self._per_message else None):
                data = await session._read(self._stream_id, self._stream)
            events = session.protocol.receive(self._stream_id, data, session._loop.time())
            self._events = events[::-1]
        return self._events.pop()

    def unexpected(self, event: Event) -> FiccError:
        """The error for an event that does not answer a request of this kind."""
        if isinstance(event, ErrorReceived):
            self.complete = True
            return error_from_code(event.error.code, event.error.message, event.error.details)
        if isinstance(event, StreamEnded):
            return Unavailable("the peer ended the request's stream without an answer")
        return ProtocolError(f"unexpected {type(event).__name__} in answer to a request")


class _HandlerFailed(Exception):
    """What the handler raised, to tell the requester as an error frame (unlike the same
    error raised by this stream's own reads and writes)."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


def _stop(task: asyncio.Task[None] | None) -> None:
    if task is not None and not task.done():
        task.cancel()
