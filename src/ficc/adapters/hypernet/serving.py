"""Answering one request of the peer on its stream: the handler's answer as frames, and what
the requester is told when there is none (:mod:`ficc.protocol.outcomes` decides which).

Stream-level helpers of :class:`~ficc.adapters.hypernet.shovel.PeerSession`; they know the
stream and the connection's rules, not the session.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable

from ficc.adapters import metrics
from ficc.adapters.hypernet.accounting import counted
from ficc.adapters.hypernet.streams import ABANDON_SECONDS, FrameStream
from ficc.adapters.logs import current_request_id, new_request_id
from ficc.base.errors import FiccError, LocalProtocolError
from ficc.protocol.answers import complete_request
from ficc.protocol.connection import PeerConnection
from ficc.protocol.events import LargeBodyReceived, RequestReceived, RequestRefused
from ficc.protocol.outcomes import INTERNAL, ending, refusal
from ficc.services.ports.peers import (
    EncodedAnswer,
    HeldChunk,
    PeerIdentity,
    RequestHandler,
    RequestResult,
    ending_reason,
)

log = logging.getLogger(__name__)

Received = RequestReceived | LargeBodyReceived | RequestRefused


async def answer(
    protocol: PeerConnection,
    stream: FrameStream,
    received: Received,
    handler: RequestHandler,
    identity: PeerIdentity,
) -> None:
    """Answer ``received`` on ``stream``; only the stream's own I/O failing (or a large body
    that breaks the protocol) raises."""
    stream_id, request = received.stream_id, received.request
    if isinstance(received, LargeBodyReceived):
        # Checked and decoded in a worker thread, gradually: the loop serves everyone else
        # meanwhile. A body that fails is a protocol error, terminal like any.
        request = await asyncio.to_thread(complete_request, request, received.data)
    current_request_id.set(request.request_id or new_request_id())
    with counted("in", metrics.operation_label(request.operation)) as outcome:
        if isinstance(received, RequestRefused):  # its body was larger than grants allow
            outcome.append(received.error.code)
            await stream.write(protocol.send_error(stream_id, received.error))
            return
        try:
            handled = handler(identity, request.operation, request.body, request.body_bytes)
            transfer = metrics.is_transfer(metrics.operation_label(request.operation))
            refused = functools.partial(_refusal, protocol, stream_id, request.operation, outcome)
            frames = _frames(protocol, stream_id, handled, refused, transfer=transfer)
            async with contextlib.aclosing(frames):
                async for frame in frames:
                    await stream.write(frame)
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
            await _tell_ended(protocol, stream, stream_id, reason)


def _refusal(
    protocol: PeerConnection, stream_id: int, operation: str, outcome: list[str], failure: Exception
) -> bytes:
    """The ``ERROR`` frame telling the requester that its handler failed (an engine down, a
    refusal, a bug), as :func:`~ficc.protocol.outcomes.refusal` names it; a bug is logged here
    with its text, which the requester never sees."""
    error = refusal(failure)
    if error is INTERNAL:
        log.error("handler for %s failed", operation, exc_info=failure)
    outcome.append(error.code)
    return protocol.send_error(stream_id, error)


async def _frames(
    protocol: PeerConnection,
    stream_id: int,
    handled: Awaitable[RequestResult],
    refused: Callable[[Exception], bytes],
    *,
    transfer: bool,
) -> AsyncGenerator[bytes, None]:
    """The frames of the handler's answer, each made when it is to be written; what the
    handler raises ends them with ``refused``'s frame. Only the handler is caught here: the
    connection's own refusals (an answer it may not send) and the stream's writes raise."""
    try:
        result = await handled
    except Exception as exc:  # noqa: BLE001 - the handler's root: told, a bug logged
        yield refused(exc)
        return
    if isinstance(result, dict | EncodedAnswer):
        # An encoded answer is sent as the bytes it was measured by (no second encode).
        answer = result.content if isinstance(result, EncodedAnswer) else result
        yield protocol.send_answer(stream_id, answer)
        return
    held = b""  # the frames of held chunks, written with what follows them
    failure: Exception | None = None
    try:
        while True:
            try:
                chunk = await anext(result)
            except StopAsyncIteration:
                break
            except Exception as exc:  # noqa: BLE001 - as above (held chunks are dropped)
                failure = exc
                break
            frame = protocol.send_chunk(stream_id, chunk)
            if transfer:
                metrics.TRANSFER_BYTES.labels(direction="out").inc(len(chunk))
            if isinstance(chunk, HeldChunk):
                held += frame
                continue
            yield held + frame if held else frame
            held = b""
    finally:
        close = getattr(result, "aclose", None)
        if close is not None:  # its ``finally`` runs now, whichever way this ends
            await close()
    yield refused(failure) if failure is not None else held + protocol.send_end(stream_id)


async def _tell_ended(
    protocol: PeerConnection, stream: FrameStream, stream_id: int, reason: FiccError
) -> None:
    """The frame :func:`~ficc.protocol.outcomes.ending` names if it goes out within
    ``ABANDON_SECONDS``; else the reset code it names."""
    told = ending(reason, torn=stream.torn)
    if told.frame is not None:
        with contextlib.suppress(FiccError, TimeoutError, LocalProtocolError):
            frame = protocol.send_error(stream_id, told.frame)
            async with asyncio.timeout(ABANDON_SECONDS):
                await stream.write(frame)
                return
    await stream.reset_sending(told.code)
