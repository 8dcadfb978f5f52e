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
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from iroh import Connection, IrohError

from ficc.adapters import metrics
from ficc.adapters.hypernet.accounting import counted
from ficc.adapters.hypernet.deadlines import Deadline
from ficc.adapters.hypernet.errors import describe
from ficc.adapters.hypernet.requesting import Exchange
from ficc.adapters.hypernet.serving import answer
from ficc.adapters.hypernet.streams import ABANDON_SECONDS, FrameStream
from ficc.base.errors import FiccError, LocalProtocolError, PeerUnreachable, ProtocolError
from ficc.protocol.connection import PeerConnection
from ficc.protocol.events import (
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
from ficc.protocol.outcomes import unanswered
from ficc.protocol.sessions import Entry
from ficc.protocol.signing import Signer, Verify
from ficc.protocol.stream_states import CANCELLED_CODE, PROTOCOL_ERROR_CODE
from ficc.services.ports.peers import BodyBound, PeerIdentity, RequestHandler

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SessionTerms:
    """What every session of one endpoint is given: the cluster key that signs, the check of
    the peer's signatures, the handler of the peer's requests, the connection's limits and
    how large a body the peer's grants allow now (None: the limits' own)."""

    signer: Signer
    verify: Verify
    handler: RequestHandler
    limits: SessionLimits
    body_bound: BodyBound | None = None


class PeerSession:
    """A connection whose handshake succeeded; serves and sends requests until closed."""

    def __init__(
        self,
        *,
        connection: Connection,
        control: FrameStream,
        session: Session,
        terms: SessionTerms,
        on_closed: Callable[[PeerSession, FiccError], None],
        source: str | None = None,
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self.connection = connection
        self.protocol = PeerConnection(
            session, terms.signer, terms.verify, self._loop.time(), limits=terms.limits
        )
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
        self._handler = terms.handler
        self._body_bound = terms.body_bound
        self._slots = asyncio.Semaphore(MAX_REQUESTS_IN_FLIGHT)
        self._control = control
        self._on_closed = on_closed
        self._streams: dict[int, FrameStream] = {}
        self._read_timers: dict[int, Deadline] = {}
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
                        self.close(PeerUnreachable(event.reason))
                        return
        except ProtocolError as exc:
            await self._fail(self._control, exc)
        except FiccError as exc:
            self.close(exc)

    # -- reading --------------------------------------------------------------------------

    async def _read(self, stream_id: int, stream: FrameStream) -> bytes:
        """The stream's next bytes, within the read deadline the connection sets for it."""
        try:
            with Deadline(self.protocol.read_deadline(stream_id)) as timer:
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
                self.close(PeerUnreachable(f"the connection ended: {describe(exc)}"))
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
                        work = asyncio.ensure_future(
                            answer(self.protocol, stream, event, self._handler, self.identity)
                        )
                        work.add_done_callback(
                            lambda done: self._answered(stream_id, stream, done, reader)
                        )
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
        self,
        stream_id: int,
        stream: FrameStream,
        work: asyncio.Future[None],
        reader: asyncio.Task[Any] | None,
    ) -> None:
        """A request's task ended: a protocol error in its body closes the session, its own
        I/O failing ends the stream; else a pending read has the next request's deadline."""
        failure = None if work.cancelled() else work.exception()
        if isinstance(failure, ProtocolError):
            self._spawn(self._fail(stream, failure))
            return
        if failure is not None:
            log.debug("serving a request of %s ended: %r", self.identity.hypernet_id, failure)
            if reader is not None:
                reader.cancel()
            return
        self.protocol.answer_flushed(stream_id, self._loop.time())
        timer = self._read_timers.get(stream_id)
        if timer is not None:
            timer.reschedule(self.protocol.read_deadline(stream_id))

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
            async with self._exchange(operation, timeout_seconds, per_message=False) as exchange:
                await exchange.send(
                    operation, dict(body), streaming=False, max_answer_bytes=max_answer_bytes
                )
                return await exchange.json_answer()
        raise AssertionError("unreachable")  # pragma: no cover

    @asynccontextmanager
    async def stream(
        self, operation: str, body: Mapping[str, Any], timeout_seconds: float
    ) -> AsyncIterator[AsyncIterator[bytes]]:
        """Send one request and iterate the chunks it streams back; ``timeout_seconds``
        bounds the wait for each."""
        label = metrics.operation_label(operation)
        with counted("out", label):
            async with self._exchange(operation, timeout_seconds, per_message=True) as exchange:
                await exchange.send(operation, dict(body), streaming=True)
                chunks = await exchange.streamed(transfer=metrics.is_transfer(label))
                async with contextlib.aclosing(chunks) as iterator:
                    yield iterator

    @asynccontextmanager
    async def _exchange(
        self, operation: str, timeout_seconds: float, *, per_message: bool
    ) -> AsyncIterator[Exchange]:
        """A stream for one request, its deadline (over the whole answer, or per message),
        and its cleanup on every exit: an answered stream is kept for the next request, an
        unanswered one cancelled and reset."""
        exchange: Exchange | None = None
        try:
            async with asyncio.timeout(None if per_message else timeout_seconds):
                async with self._slots:
                    stream_id, stream = await self._take_stream()
                    exchange = Exchange(
                        self.protocol,
                        stream_id,
                        stream,
                        self._read,
                        self._loop.time,
                        message_timeout=timeout_seconds if per_message else None,
                    )
                    yield exchange
        except TimeoutError as exc:
            why = f"no answer from the peer within {timeout_seconds} s"
            raise unanswered(operation, why, sent=exchange is not None and exchange.sent) from exc
        except PeerUnreachable as exc:
            if exchange is not None and exchange.sent and not exchange.complete:
                raise unanswered(operation, exc.message, sent=True) from exc
            raise
        except ProtocolError as exc:
            if exchange is None or not exchange.complete:
                await self._fail(None if exchange is None else exchange.stream, exc)
            raise
        finally:
            if exchange is not None:
                if exchange.complete:
                    self._return_stream(exchange.stream_id)
                else:
                    self._abandon(exchange.stream_id, sent=exchange.sent)

    async def _take_stream(self) -> tuple[int, FrameStream]:
        """An idle stream to reuse, else a new one."""
        stream_id, stale = self.protocol.take_idle_stream(self._loop.time())
        for old in stale:
            self._spawn(self._streams.pop(old).finish())
        if stream_id is not None:
            return stream_id, self._streams[stream_id]
        if self.closed.is_set():
            raise PeerUnreachable("the session with the peer is closed")
        try:
            stream = FrameStream(await self.connection.open_bi())
        except IrohError as exc:
            raise PeerUnreachable(f"cannot open a stream to the peer: {describe(exc)}") from exc
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


def _stop(task: asyncio.Task[None] | None) -> None:
    if task is not None and not task.done():
        task.cancel()
