"""One established peer connection: heartbeats, request streams in both directions.

Each request travels on its own bi-stream (idle ones are reused, so a request normally costs
what an echo on an open stream costs). The requester abandoning a request cancels the
handler on the serving side; any protocol error closes the whole connection.

What a peer can hold is bounded: streams at once (few before a pairing), bytes of unfinished
frames per connection, a deadline on each frame and on a stream's next request, and an idle
timeout for sessions without a pairing (generation 0).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, replace
from typing import Any, Final

from iroh import BiStream, Connection, IrohError

from ficc.adapters import metrics
from ficc.adapters.hypernet_errors import describe
from ficc.adapters.hypernet_streams import (
    CANCELLED_CODE,
    PROTOCOL_ERROR_CODE,
    FrameStream,
    ReadBudget,
    reset_code,
)
from ficc.adapters.logs import current_request_id, new_request_id
from ficc.base.errors import (
    FiccError,
    OutcomeUnknown,
    ProtocolError,
    Unavailable,
    error_from_code,
)
from ficc.base.units import MiB
from ficc.domain.grants import MAX_RESPONSE_BYTES
from ficc.protocol.canonical import canonical_json, parse_json_object
from ficc.protocol.frames import MAX_FRAME_BYTES, encode_frame
from ficc.protocol.handshake import Role, Session
from ficc.protocol.liveness import Liveness
from ficc.protocol.messages import (
    MAX_FOLLOWING_BODY_BYTES,
    Cancel,
    Chunk,
    End,
    Error,
    Heartbeat,
    Message,
    Request,
    Response,
    encode_chunk_frames,
    encode_message,
)
from ficc.protocol.requests import RequestSigner, RequestVerifier
from ficc.protocol.signing import Signer, Verify
from ficc.services.peer_channel import PeerIdentity, RequestHandler, ending_reason

log = logging.getLogger(__name__)
federation_log = logging.getLogger("ficc.federation.access")

MAX_PEER_STREAMS: Final = 128
"""Incoming bi-streams a peer may hold open at once (QUIC's default is 100)."""
MAX_IDLE_STREAMS: Final = 8
MAX_REQUESTS_IN_FLIGHT: Final = MAX_PEER_STREAMS - MAX_IDLE_STREAMS - 1
ABANDON_SECONDS: Final = 1.0
MAX_ASSEMBLED_BYTES: Final = 2 * MAX_FOLLOWING_BODY_BYTES
"""Request bodies gathered from chunks at once in one session: two of the largest."""
MAX_JSON_ANSWER_BYTES: Final = MAX_RESPONSE_BYTES + MiB
"""The largest JSON answer a requester gathers from chunks: a grant's largest
``response_bytes``, and room for the envelope around the result."""
MAX_UNPAIRED_STREAMS: Final = 4
"""Incoming request streams at once before a pairing: its operations go one at a time."""
MAX_BUFFERED_BYTES: Final = 32 * MiB
"""Bytes of unfinished frames a paired connection may hold over all its streams."""
MAX_UNPAIRED_BUFFERED_BYTES: Final = 2 * MiB
"""The same before a pairing: two frames of the largest size."""
READ_DEADLINE_SECONDS: Final = 10.0
"""A frame must complete this long after its first bytes, and a request stream must carry its
next request this long after it was opened or last answered; else the stream is reset."""
UNPAIRED_IDLE_SECONDS: Final = 30.0
"""A session without a pairing that carries no request this long is closed."""


@dataclass(frozen=True)
class SessionLimits:
    """The deadlines of a session (the caps are constants; tests shorten only the clocks)."""

    read_deadline_seconds: float = READ_DEADLINE_SECONDS
    unpaired_idle_seconds: float = UNPAIRED_IDLE_SECONDS

    @property
    def idle_stream_reuse_seconds(self) -> float:
        """An idle stream is reused only this long, well before the peer would reset it."""
        return self.read_deadline_seconds / 2


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
    ) -> None:
        self.connection = connection
        self.session = session
        self.identity = PeerIdentity(
            hypernet_id=session.remote_hypernet_id.hex(),
            cluster_key=session.remote_cluster_key,
            generation=session.generation,
        )
        self.closed = asyncio.Event()
        self.close_reason: FiccError | None = None
        self._control = control
        self._outgoing = RequestSigner(session, signer)
        self._incoming = RequestVerifier(session, verify)
        self._handler = handler
        self._on_closed = on_closed
        self._slots = asyncio.Semaphore(MAX_REQUESTS_IN_FLIGHT)
        self._idle: list[tuple[FrameStream, float]] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._limits = limits or SessionLimits()
        paired = session.generation != 0
        self._paired = paired
        self._assembling = 0
        self.incoming = session.role is Role.RESPONDER
        self._max_streams = MAX_PEER_STREAMS if paired else MAX_UNPAIRED_STREAMS
        self._budget = ReadBudget(MAX_BUFFERED_BYTES if paired else MAX_UNPAIRED_BUFFERED_BYTES)
        # Our own unpaired sessions idle out first, so we never reuse one the peer is closing.
        idle = self._limits.unpaired_idle_seconds
        self._idle_limit = None if paired else (idle if self.incoming else idle * 2 / 3)
        self._serving = 0
        self._busy = 0
        self._last_busy = asyncio.get_running_loop().time()

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        """Begin heartbeats and serving the peer's requests."""
        with contextlib.suppress(IrohError):
            self.connection.set_max_concurrent_bi_streams(self._max_streams)
        loop = asyncio.get_running_loop()
        liveness = Liveness(loop.time())
        self._spawn(self._send_heartbeats(liveness))
        self._spawn(self._read_control(liveness))
        self._spawn(self._accept_streams())

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

    def _spawn(self, coroutine: Any) -> None:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _fail(self, stream: FrameStream | None, error: ProtocolError) -> None:
        """A protocol error is terminal: tell the peer on ``stream``, then close everything."""
        log.info("closing the session with %s: %s", self.identity.hypernet_id, error.message)
        if stream is not None:
            with contextlib.suppress(FiccError, TimeoutError):
                async with asyncio.timeout(ABANDON_SECONDS):
                    await stream.send(Error.from_exception(error))
                    await stream.finish_and_wait()
        self.close(error, code=PROTOCOL_ERROR_CODE)

    # -- liveness -------------------------------------------------------------------------

    async def _send_heartbeats(self, liveness: Liveness) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                now = loop.time()
                if liveness.is_dead(now):
                    self.close(Unavailable("the peer stopped answering heartbeats"))
                    return
                if self._idle_too_long(now):
                    self.close(Unavailable("a session without a pairing stayed idle"))
                    return
                beat = liveness.due(now)
                if beat is not None:
                    await self._control.send(beat)
                await asyncio.sleep(max(0.0, liveness.next_deadline() - loop.time()))
        except FiccError as exc:
            self.close(exc)

    def _idle_too_long(self, now: float) -> bool:
        limit = self._idle_limit
        return limit is not None and self._busy == 0 and now - self._last_busy > limit

    def _began(self) -> None:
        """A request stream or an exchange started: the session is busy."""
        self._busy += 1

    def _ended(self) -> None:
        self._busy -= 1
        self._last_busy = asyncio.get_running_loop().time()

    def _frame_stream(self, stream: BiStream) -> FrameStream:
        return FrameStream(
            stream, budget=self._budget, frame_deadline_seconds=self._limits.read_deadline_seconds
        )

    async def _read_control(self, liveness: Liveness) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                message = await self._control.receive()
                if message is None:
                    self.close(Unavailable("the peer closed the session"))
                    return
                if isinstance(message, Heartbeat):
                    liveness.heard(loop.time(), message)
                elif isinstance(message, Error):
                    self.close(Unavailable(f"the peer closed the session: {message.message}"))
                    return
                else:
                    raise ProtocolError("only heartbeats travel on the control stream")
        except ProtocolError as exc:
            await self._fail(self._control, exc)
        except FiccError as exc:
            self.close(exc)

    # -- serving --------------------------------------------------------------------------

    async def _accept_streams(self) -> None:
        while True:
            try:
                stream = await self.connection.accept_bi()
            except IrohError as exc:
                self.close(Unavailable(f"the connection ended: {describe(exc)}"))
                return
            if self._serving >= self._max_streams:
                # QUIC's first stream credit cannot be taken back: refuse past the cap here.
                self._spawn(FrameStream(stream).reset(CANCELLED_CODE))
                continue
            self._serving += 1
            self._began()
            self._spawn(self._serve_stream(self._frame_stream(stream)))

    async def _serve_stream(self, stream: FrameStream) -> None:
        try:
            await self._serve_requests(stream)
        finally:
            self._serving -= 1
            self._ended()

    async def _next_request(self, receiving: asyncio.Future[Message | None]) -> Message | None:
        """The stream's next message, if the peer sends one within the read deadline."""
        limit = self._limits.read_deadline_seconds
        try:
            async with asyncio.timeout(limit):
                return await receiving
        except TimeoutError as exc:
            raise Unavailable(
                f"no request on the stream within {limit:g} s",
                details={"limit": "request_read_seconds", "max": limit},
            ) from exc

    async def _following_body(self, stream: FrameStream, request: Request) -> Request:
        """The request with the body that follows it in chunks: exactly the announced size,
        then an end, matching the signed SHA-256, parsed as strictly as a request's JSON.

        Only a paired peer may send one, and only :data:`MAX_ASSEMBLED_BYTES` of such bodies
        are gathered at once in a session.
        """
        following = request.following
        assert following is not None
        if not self._paired:
            raise ProtocolError("a request body in chunks needs a paired session")
        if self._assembling + following.size > MAX_ASSEMBLED_BYTES:
            raise ProtocolError(
                f"request bodies of more than {MAX_ASSEMBLED_BYTES} bytes at once in a session"
            )
        self._assembling += following.size
        try:
            parts: list[bytes] = []
            total = 0
            while True:
                message = await self._next_request(asyncio.ensure_future(stream.receive()))
                if isinstance(message, End):
                    break
                if not isinstance(message, Chunk):
                    raise ProtocolError("only chunks and an end may follow a request's body")
                total += len(message.data)
                if total > following.size:
                    raise ProtocolError("the request's body is longer than it announced")
                parts.append(message.data)
            if message.total_bytes != total or total != following.size:
                raise ProtocolError("the request's body is not the size it announced")
            data = b"".join(parts)
            del parts
            if hashlib.sha256(data).hexdigest() != following.sha256:
                raise ProtocolError("the request's body does not match its signed SHA-256")
            body = parse_json_object(data, what="request body")
        finally:
            self._assembling -= following.size
        return replace(request, body=body, following=None)

    async def _serve_requests(self, stream: FrameStream) -> None:
        previous_seq = 0
        receiving = asyncio.ensure_future(stream.receive())
        work: asyncio.Future[None] | None = None
        try:
            while True:
                message = await self._next_request(receiving)
                if message is None:
                    await stream.finish()
                    return
                if isinstance(message, Cancel):
                    receiving = asyncio.ensure_future(stream.receive())
                    continue
                if not isinstance(message, Request):
                    raise ProtocolError(f"expected a request, got {type(message).__name__}")
                self._incoming.verify(message, previous_on_stream=previous_seq)
                previous_seq = message.seq
                if message.following is not None:
                    message = await self._following_body(stream, message)
                # The handler runs in a task of its own; the next receive runs beside it, and a
                # cancel, a reset or the end of the stream cancels the handler.
                work = asyncio.ensure_future(self._answer(stream, message))
                receiving = asyncio.ensure_future(stream.receive())
                cancel_work = _canceller(work)
                receiving.add_done_callback(cancel_work)
                try:
                    await work
                except asyncio.CancelledError:
                    if not receiving.done():
                        raise
                    # The requester spoke while the handler worked: only a cancel may.
                    following = receiving.result()
                    if following is not None and not isinstance(following, Cancel):
                        raise ProtocolError(
                            "only a cancel may follow a request in flight"
                        ) from None
                    await stream.reset(CANCELLED_CODE)
                    return
                receiving.remove_done_callback(cancel_work)
        except ProtocolError as exc:
            await self._fail(stream, exc)
        except FiccError as exc:
            log.debug("request stream from %s ended: %s", self.identity.hypernet_id, exc)
            await stream.reset()
        finally:
            for future in (receiving, work):
                if future is not None and not future.done():
                    future.cancel()

    async def _answer(self, stream: FrameStream, request: Request) -> None:
        # This runs in a task of its own: the ID set here is this request's alone.
        current_request_id.set(request.request_id or new_request_id())
        label = metrics.operation_label(request.operation)
        with _counted("in", label) as outcome:
            try:
                try:
                    result = await self._handler(self.identity, request.operation, request.body)
                except (Unavailable, OutcomeUnknown) as exc:
                    raise _HandlerFailed(exc) from exc
                if isinstance(result, dict):
                    await _send_answer(stream, result)
                    return
                total = 0
                async with _closing(result):
                    while True:
                        try:
                            chunk = await anext(result)
                        except StopAsyncIteration:
                            break
                        except (Unavailable, OutcomeUnknown) as exc:
                            raise _HandlerFailed(exc) from exc
                        await stream.write(encode_chunk_frames(chunk))
                        total += len(chunk)
                        if metrics.is_transfer(label):
                            metrics.TRANSFER_BYTES.labels(direction="out").inc(len(chunk))
                await stream.send(End(total))
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
                await _tell_ended(stream, reason)
            except _HandlerFailed as failed:
                # The handler's own failure (an engine down): the requester is told it, as
                # any refusal; only this stream's own I/O failing leaves the outcome unknown.
                outcome.append(failed.error.code)
                await stream.send(Error.from_exception(failed.error))
            except (Unavailable, OutcomeUnknown):
                raise
            except FiccError as exc:
                outcome.append(exc.code)
                await stream.send(Error.from_exception(exc))
            except Exception:
                outcome.append("internal")
                log.exception("handler for %s failed", request.operation)
                await stream.send(Error("internal", "the peer failed to handle the request", {}))

    # -- requesting -----------------------------------------------------------------------

    async def request(
        self, operation: str, body: Mapping[str, Any], timeout_seconds: float
    ) -> dict[str, Any]:
        """Send one request and return its JSON result."""
        exchange = _Exchange(self, operation, dict(body))
        with _counted("out", metrics.operation_label(operation)):
            async with exchange.running(timeout_seconds):
                await exchange.send()
                message = await exchange.receive()
                if isinstance(message, Response):
                    exchange.complete()
                    return message.body
                if isinstance(message, Chunk):
                    body = await _whole_answer(exchange, message)
                    exchange.complete()
                    return body
                raise exchange.unexpected(message)
        raise AssertionError("unreachable")  # pragma: no cover

    def stream(
        self, operation: str, body: Mapping[str, Any], timeout_seconds: float
    ) -> AbstractAsyncContextManager[AsyncIterator[bytes]]:
        """Send one request and iterate the chunks it streams back."""
        return self._stream(_Exchange(self, operation, dict(body)), timeout_seconds)

    @asynccontextmanager
    async def _stream(
        self, exchange: _Exchange, timeout_seconds: float
    ) -> AsyncIterator[AsyncIterator[bytes]]:
        with _counted("out", exchange.label):
            async with self._streaming(exchange, timeout_seconds) as iterator:
                yield iterator

    @asynccontextmanager
    async def _streaming(
        self, exchange: _Exchange, timeout_seconds: float
    ) -> AsyncIterator[AsyncIterator[bytes]]:
        transfer = metrics.is_transfer(exchange.label)
        async with exchange.running(timeout_seconds, per_message=True):
            await exchange.send()
            first = await exchange.receive()
            if not isinstance(first, Chunk | End):
                raise exchange.unexpected(first)

            async def chunks() -> AsyncGenerator[bytes, None]:
                message: Message | None = first
                total = 0
                while isinstance(message, Chunk):
                    total += len(message.data)
                    if transfer:
                        metrics.TRANSFER_BYTES.labels(direction="in").inc(len(message.data))
                    yield message.data
                    message = await exchange.receive()
                if not isinstance(message, End):
                    raise exchange.unexpected(message)
                if message.total_bytes != total:
                    raise ProtocolError(
                        f"the stream ended at {total} bytes, the peer says {message.total_bytes}"
                    )
                exchange.complete()

            iterator = chunks()
            async with contextlib.aclosing(iterator):
                yield iterator

    async def _take_stream(self) -> FrameStream:
        oldest = asyncio.get_running_loop().time() - self._limits.idle_stream_reuse_seconds
        while self._idle:
            stream, idle_since = self._idle.pop()
            if idle_since >= oldest:
                return stream
            self._spawn(stream.finish())
        if self.closed.is_set():
            raise Unavailable("the session with the peer is closed")
        try:
            return self._frame_stream(await self.connection.open_bi())
        except IrohError as exc:
            raise Unavailable(f"cannot open a stream to the peer: {describe(exc)}") from exc

    def _return_stream(self, stream: FrameStream) -> None:
        if len(self._idle) < MAX_IDLE_STREAMS and not self.closed.is_set():
            self._idle.append((stream, asyncio.get_running_loop().time()))
        else:
            self._spawn(stream.finish())

    def _abandon(self, stream: FrameStream, *, cancelled: bool) -> None:
        async def abandon() -> None:
            if cancelled:
                with contextlib.suppress(FiccError, TimeoutError):
                    async with asyncio.timeout(ABANDON_SECONDS):
                        await stream.send(Cancel())
            await stream.reset(CANCELLED_CODE)

        self._spawn(abandon())


async def _send_answer(stream: FrameStream, result: dict[str, Any]) -> None:
    """A JSON answer: one ``RESPONSE`` frame when it fits, else its canonical JSON as chunks
    and an ``END`` (a plain answer may be as large as a grant's ``response_bytes``)."""
    content = canonical_json(result)
    if len(content) < MAX_FRAME_BYTES:
        await stream.send(Response(result))
        return
    await stream.write(encode_chunk_frames(content))
    await stream.send(End(len(content)))


async def _whole_answer(exchange: _Exchange, first: Chunk) -> dict[str, Any]:
    """A JSON answer that came as chunks: gathered up to the largest a grant allows, then
    parsed as strictly as a ``RESPONSE``."""
    parts: list[bytes] = []
    total = 0
    message: Message | None = first
    while isinstance(message, Chunk):
        total += len(message.data)
        if total > MAX_JSON_ANSWER_BYTES:
            raise ProtocolError(
                f"a JSON answer of more than {MAX_JSON_ANSWER_BYTES} bytes was streamed"
            )
        parts.append(message.data)
        message = await exchange.receive()
    if not isinstance(message, End):
        raise exchange.unexpected(message)
    if message.total_bytes != total:
        raise ProtocolError(
            f"the answer ended at {total} bytes, the peer says {message.total_bytes}"
        )
    return parse_json_object(b"".join(parts), what="response")


class _HandlerFailed(Exception):
    """A peer-or-engine failure the serving handler raised, to tell the requester as an error
    frame (unlike the same error raised by this stream's own reads and writes)."""

    def __init__(self, error: FiccError) -> None:
        super().__init__(error.message)
        self.error = error


async def _tell_ended(stream: FrameStream, reason: FiccError) -> None:
    """An error frame naming ``reason`` if one can still go out; else a reset naming it.

    A write cut off in the middle of a frame, or a requester that does not read for
    ``ABANDON_SECONDS``, leaves only the reset (its code names the reason).
    """
    if not stream.torn:
        with contextlib.suppress(FiccError, TimeoutError):
            async with asyncio.timeout(ABANDON_SECONDS):
                await stream.send(Error.from_exception(reason))
                return
    await stream.reset_sending(reset_code(reason))


def _canceller(work: asyncio.Future[None]) -> Callable[[object], None]:
    """A done-callback that cancels ``work``."""

    def cancel(_: object) -> None:
        work.cancel()

    return cancel


@asynccontextmanager
async def _closing(chunks: AsyncIterator[bytes]) -> AsyncIterator[None]:
    """Close a handler's async generator on every exit, so its ``finally`` runs now."""
    try:
        yield
    finally:
        close = getattr(chunks, "aclose", None)
        if close is not None:
            await close()


@contextlib.contextmanager
def _counted(direction: str, operation: str) -> Iterator[list[str]]:
    """Count one federation request and time it; the outcome is ``ok`` unless the body
    appends an error code or raises (then the error's code)."""
    outcome: list[str] = []
    started = time.perf_counter()
    try:
        yield outcome
    except FiccError as exc:
        outcome.append(exc.code)
        raise
    except asyncio.CancelledError:
        outcome.append("cancelled")
        raise
    finally:
        elapsed = time.perf_counter() - started
        result = metrics.federation_outcome(outcome[0] if outcome else None)
        metrics.FEDERATION_REQUESTS.labels(
            direction=direction, operation=operation, outcome=result
        ).inc()
        metrics.FEDERATION_DURATION.labels(direction=direction, operation=operation).observe(
            elapsed
        )
        # The federation's access log: with the request ID both clusters' lines match.
        federation_log.info(
            "%s %s %s %.1f ms",
            direction,
            operation,
            result,
            elapsed * 1000,
            extra={
                "direction": direction,
                "operation": operation,
                "outcome": result,
                "duration_ms": round(elapsed * 1000, 3),
            },
        )


class _Exchange:
    """One request on one stream, with its deadline and its cleanup on every exit path."""

    def __init__(self, session: PeerSession, operation: str, body: dict[str, Any]) -> None:
        self._session = session
        self.label = metrics.operation_label(operation)
        self._operation = operation
        self._body = body
        self._stream: FrameStream | None = None
        self._sent = False
        self._complete = False
        self._timeout = 0.0
        self._per_message = False

    @asynccontextmanager
    async def running(
        self, timeout_seconds: float, *, per_message: bool = False
    ) -> AsyncIterator[None]:
        session = self._session
        self._timeout = timeout_seconds
        self._per_message = per_message
        session._began()
        try:
            async with asyncio.timeout(None if per_message else timeout_seconds):
                async with session._slots:
                    self._stream = await session._take_stream()
                    yield
        except TimeoutError as exc:
            raise self._lost(f"no answer from the peer within {timeout_seconds} s") from exc
        except (Unavailable, OutcomeUnknown) as exc:
            if self._sent and not self._complete and isinstance(exc, Unavailable):
                raise self._lost(exc.message) from exc
            raise
        except ProtocolError as exc:
            if not self._complete:
                await session._fail(self._stream, exc)
            raise
        finally:
            session._ended()
            stream = self._stream
            if stream is not None:
                if self._complete:
                    session._return_stream(stream)
                else:
                    session._abandon(stream, cancelled=self._sent)

    def _lost(self, why: str) -> FiccError:
        """Sent but unanswered: unknown (the service that built the request names what is in
        doubt); never sent: unavailable, and certainly nothing happened."""
        if not self._sent:
            return Unavailable(f"the request was not sent: {why}")
        return OutcomeUnknown(f"the outcome of {self._operation} is unknown: {why}")

    async def send(self) -> None:
        """The request in one frame; a body too large for it follows as chunks and an end."""
        assert self._stream is not None
        request, following = self._session._outgoing.sign_fitting(
            self._operation, self._body, current_request_id.get()
        )
        self._sent = True
        if following is None:
            await self._stream.send(request)
            return
        await self._stream.write(
            encode_frame(encode_message(request))
            + encode_chunk_frames(following)
            + encode_frame(encode_message(End(len(following))))
        )

    async def receive(self) -> Message | None:
        assert self._stream is not None
        if self._per_message:
            async with asyncio.timeout(self._timeout):
                return await self._stream.receive()
        return await self._stream.receive()

    def complete(self) -> None:
        self._complete = True

    def unexpected(self, message: Message | None) -> FiccError:
        """The error for a message that does not answer a request of this kind."""
        if isinstance(message, Error):
            self._complete = True
            return error_from_code(message.code, message.message, message.details)
        if message is None:
            return Unavailable("the peer ended the request's stream without an answer")
        return ProtocolError(f"unexpected {type(message).__name__} in answer to a request")
