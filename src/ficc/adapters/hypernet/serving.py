"""Serving the peer's requests: one reader per stream, each request's handler in a task.

The reader goes on reading while the handler works, so a cancel (or the stream's end) stops
the handler at once; anything else the connection refuses as a protocol error. The handler's
task owns its grant's slot: ending the grant cancels it with a reason, which the requester is
told by an error frame, or by a reset code when no frame can go out.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from ficc.adapters import metrics
from ficc.adapters.hypernet.accounting import counted
from ficc.adapters.hypernet.streams import ABANDON_SECONDS, FrameStream
from ficc.adapters.logs import current_request_id, new_request_id
from ficc.base.errors import FiccError, OutcomeUnknown, ProtocolError, Unavailable
from ficc.protocol.answers import complete_request
from ficc.protocol.events import (
    LargeBodyReceived,
    RequestCancelled,
    RequestReceived,
    RequestRefused,
    StreamEnded,
)
from ficc.protocol.messages import Error
from ficc.protocol.stream_states import CANCELLED_CODE, LocalProtocolError, reset_code
from ficc.services.peer_channel import EncodedAnswer, ending_reason

if TYPE_CHECKING:
    from ficc.adapters.hypernet.session import PeerSession

log = logging.getLogger(__name__)


async def serve_stream(session: PeerSession, stream_id: int, stream: FrameStream) -> None:
    """Serve the requests of one incoming stream until it ends, fails or is cancelled."""
    reading: asyncio.Task[bytes] | None = None
    work: asyncio.Task[None] | None = None
    try:
        while True:
            if reading is None:
                reading = asyncio.ensure_future(session.read(stream_id, stream))
            waiting: set[asyncio.Future[bytes] | asyncio.Future[None]] = {reading}
            if work is not None:
                waiting.add(work)
            done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            if work is not None and work in done:
                finished, work = work, None
                finished.result()  # this stream's own I/O failing ends the stream
                session.answered(stream_id)
                continue
            data, reading = reading.result(), None
            for event in session.receive_serving(stream_id, data):
                if isinstance(event, RequestReceived | LargeBodyReceived):
                    # Its own task: the ID and the grant's slot it takes are this request's.
                    work = asyncio.ensure_future(_answer(session, stream_id, stream, event))
                elif isinstance(event, RequestRefused):
                    work = asyncio.ensure_future(_refuse(session, stream_id, stream, event))
                elif isinstance(event, RequestCancelled):
                    if work is not None:
                        work.cancel()
                        await asyncio.wait({work})
                    await stream.reset(CANCELLED_CODE)
                    return
                elif isinstance(event, StreamEnded):
                    await stream.finish()
                    return
    except ProtocolError as exc:
        _stop(reading, work)
        await session.fail(stream, exc)
    except FiccError as exc:
        log.debug("request stream from %s ended: %s", session.identity.hypernet_id, exc)
        _stop(reading, work)
        await stream.reset()
    finally:
        _stop(reading, work)


def _stop(*tasks: asyncio.Future[bytes] | asyncio.Future[None] | None) -> None:
    for task in tasks:
        if task is not None and not task.done():
            task.cancel()


class _HandlerFailed(Exception):
    """A peer-or-engine failure the serving handler raised, to tell the requester as an error
    frame (unlike the same error raised by this stream's own reads and writes)."""

    def __init__(self, error: FiccError) -> None:
        super().__init__(error.message)
        self.error = error


async def _refuse(
    session: PeerSession, stream_id: int, stream: FrameStream, refused: RequestRefused
) -> None:
    """A request refused before its body was kept (larger than the peer's grants allow)."""
    current_request_id.set(refused.request.request_id or new_request_id())
    with counted("in", metrics.operation_label(refused.request.operation)) as outcome:
        outcome.append(refused.error.code)
        await stream.write(session.protocol.send_error(stream_id, refused.error))


async def _answer(
    session: PeerSession,
    stream_id: int,
    stream: FrameStream,
    received: RequestReceived | LargeBodyReceived,
) -> None:
    request = received.request
    if isinstance(received, LargeBodyReceived):
        # Checked and decoded in a worker thread, gradually: the loop serves everyone else
        # meanwhile. A body that fails is a protocol error, terminal like any.
        request = await asyncio.to_thread(complete_request, request, received.data)
    current_request_id.set(request.request_id or new_request_id())
    protocol = session.protocol
    label = metrics.operation_label(request.operation)
    with counted("in", label) as outcome:
        try:
            try:
                result = await session.handler(
                    session.identity, request.operation, request.body, request.body_bytes
                )
            except (Unavailable, OutcomeUnknown) as exc:
                raise _HandlerFailed(exc) from exc
            if isinstance(result, dict | EncodedAnswer):
                answer = result.content if isinstance(result, EncodedAnswer) else result
                await stream.write(protocol.send_answer(stream_id, answer))
                return
            async with _closing(result):
                while True:
                    try:
                        chunk = await anext(result)
                    except StopAsyncIteration:
                        break
                    except (Unavailable, OutcomeUnknown) as exc:
                        raise _HandlerFailed(exc) from exc
                    await stream.write(protocol.send_chunk(stream_id, chunk))
                    if metrics.is_transfer(label):
                        metrics.TRANSFER_BYTES.labels(direction="out").inc(len(chunk))
            await stream.write(protocol.send_end(stream_id))
        except asyncio.CancelledError as cancelled:
            reason = ending_reason(cancelled)
            if reason is None:
                raise  # the requester abandoned it, or the session is closing
            # The serving side ended the request (its grant ended). The handler has unwound:
            # its slot and engine request are freed; now tell the requester why.
            current = asyncio.current_task()
            if current is not None:
                current.uncancel()
            outcome.append(reason.code)
            await _tell_ended(session, stream_id, stream, reason)
        except _HandlerFailed as failed:
            # The handler's own failure (an engine down): the requester is told it, as any
            # refusal; only this stream's own I/O failing leaves the outcome unknown.
            outcome.append(failed.error.code)
            await stream.write(protocol.send_error(stream_id, failed.error))
        except (Unavailable, OutcomeUnknown):
            raise
        except FiccError as exc:
            outcome.append(exc.code)
            await stream.write(protocol.send_error(stream_id, exc))
        except Exception:
            outcome.append("internal")
            log.exception("handler for %s failed", request.operation)
            failure = Error("internal", "the peer failed to handle the request", {})
            await stream.write(protocol.send_error(stream_id, failure))


async def _tell_ended(
    session: PeerSession, stream_id: int, stream: FrameStream, reason: FiccError
) -> None:
    """An error frame naming ``reason`` if one can still go out; else a reset naming it.

    A write cut off in the middle of a frame, or a requester that does not read for
    ``ABANDON_SECONDS``, leaves only the reset (its code names the reason).
    """
    if not stream.torn:
        with contextlib.suppress(FiccError, TimeoutError, LocalProtocolError):
            frame = session.protocol.send_error(stream_id, reason)
            async with asyncio.timeout(ABANDON_SECONDS):
                await stream.write(frame)
                return
    await stream.reset_sending(reset_code(reason.code))


@asynccontextmanager
async def _closing(chunks: AsyncIterator[bytes]) -> AsyncIterator[None]:
    """Close a handler's async generator on every exit, so its ``finally`` runs now."""
    try:
        yield
    finally:
        close = getattr(chunks, "aclose", None)
        if close is not None:
            await close()
