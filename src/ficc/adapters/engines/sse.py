"""Reading an engine's server-sent events: bounded lines and events, errors raised, usage
added where the engine streams none, and the connection judged reusable or not at the end."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Generator
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

import aiohttp

from ficc.adapters.engines.closing import ClosedOnExit
from ficc.adapters.engines.errors import engine_error_text, safe_engine_message, transport_error
from ficc.base.errors import EngineUnavailable, FiccError
from ficc.domain.openai_requests import CHAT_COMPLETIONS_PATH
from ficc.domain.openai_responses import RESPONSES_PATH, TERMINAL_EVENTS

END_DRAIN_SECONDS: Final = 1.0
"""After ``[DONE]``, how long the end of the body may take; later, the connection is closed."""
MAX_LINE_BYTES: Final = 1024 * 1024
MAX_EVENT_BYTES: Final = 1024 * 1024
"""One event's data: a streamed chunk is a few hundred bytes, and a peer receives an event in
one frame of at most 1 MiB anyway."""
EMPTY_STREAM: Final = (
    "the engine ended the stream without an answer; the prompt may be longer than the model's "
    "context"
)
MAX_ASSEMBLED_EVENTS: Final = 65_536
MAX_ASSEMBLED_BYTES: Final = 64 * 1024 * 1024
"""What a plain answer may be assembled from (the grant's default ``response_bytes``)."""


@dataclass(frozen=True)
class SseEvent:
    """One server-sent event as the engine sent it; ``data`` is its joined data lines."""

    data: str
    event: str | None = None
    last: bool = False
    """The Responses API's last event (``response.completed``...), which ends its stream."""
    _parsed: dict[str, Any] | None = field(default=None, compare=False, repr=False)

    @property
    def done(self) -> bool:
        """The OpenAI stream's end marker (the Responses API's last event for its stream)."""
        return self.last or self.data == "[DONE]"

    def payload(self) -> dict[str, Any]:
        """The event's JSON object; EngineUnavailable if the engine sent something else.

        Parsed once, whoever asks first (usage counting, the relay, metering): the others
        get the same object, so it must not be changed.
        """
        if self._parsed is not None:
            return self._parsed
        try:
            value = json.loads(self.data)
        except ValueError as exc:
            raise EngineUnavailable("the engine sent an event that is not JSON") from exc
        if not isinstance(value, dict):
            raise EngineUnavailable("the engine sent an event that is not a JSON object")
        object.__setattr__(self, "_parsed", value)
        return value


class RawBody(Protocol):
    """An engine's answer body: its bytes as they arrive, and its end (which decides whether
    its connection is kept)."""

    def aiter_raw(self) -> AsyncIterator[bytes]: ...

    async def aclose(self) -> None: ...


UsageCounter = Callable[[list[dict[str, Any]]], Awaitable[dict[str, Any] | None]]
"""Counts the usage of a finished stream from its chunks, for engines that stream none."""
WhyEmpty = Callable[[], Awaitable[FiccError]]
"""Finds out why the engine ended a stream without any event (see :meth:`EngineStream.start`)."""


class EngineStream(ClosedOnExit):
    """An open streamed response: iterate it for events; closing it stops the generation.

    With ``count_usage``, a stream whose engine sent no usage gets a final usage chunk before
    ``[DONE]``, counted by the engine itself, as OpenAI sends one for ``include_usage``.
    """

    def __init__(
        self,
        response: RawBody,
        path: str,
        count_usage: UsageCounter | None = None,
        on_close: Callable[[], Awaitable[None]] | None = None,
        *,
        release: Callable[[bool], Awaitable[None]] | None = None,
        why_empty: WhyEmpty | None = None,
    ) -> None:
        self._response = response
        self._why_empty = why_empty
        self._events_left: AsyncGenerator[SseEvent, None] | None = None
        self._first: SseEvent | None = None
        self._path = path
        self._count_usage = count_usage
        self._on_close = on_close
        self._release = release
        self._buffer = bytearray()
        self._offset = 0
        """Where the line just handed out ends in ``_buffer``: what follows is unread."""
        self._data: list[str] = []
        self._size = 0
        self._event: str | None = None
        """The event being read: its data lines, their size, its name."""
        self._clean = False
        """``[DONE]`` arrived and the body ended right after it: the connection can be reused."""
        self._ended = False
        """The engine finished the body (HTTP's end, whatever it held)."""
        self._done = False
        """The stream's last event was handed out."""

    async def start(self) -> None:
        """Wait for the engine's first event: a stream that fails before any (llama.cpp's
        server refuses a prompt past the context only by ending it) raises here, before the
        caller's answer has begun, so the caller gets a status and not an error event. On a
        raise the response is closed and ``on_close`` is not run."""
        self._events_left = self._events()
        try:
            self._first = await anext(self._events_left)
        except BaseException:
            await self._events_left.aclose()
            raise

    async def aclose(self) -> None:
        """Close the engine's response now; the engine stops generating within a second."""
        try:
            if self._events_left is not None:
                await self._events_left.aclose()
            await self._finish()
        finally:
            on_close, self._on_close = self._on_close, None
            if on_close is not None:
                await on_close()

    async def _finish(self) -> None:
        """Tell the client whether the connection may be dead though finished (it closes that
        one), then end the response: an unfinished one closes its connection, a clean one goes
        back to the pool."""
        release, self._release = self._release, None
        try:
            if release is not None:
                await release(self._ended and not self._clean)
        finally:
            await self._response.aclose()

    def __aiter__(self) -> AsyncIterator[SseEvent]:
        return self._events() if self._events_left is None else self._after_start()

    async def _after_start(self) -> AsyncIterator[SseEvent]:
        assert self._events_left is not None
        first, self._first = self._first, None
        if first is not None:
            yield first
        async for item in self._events_left:
            yield item

    def _complete_events(self) -> Generator[SseEvent, None, None]:
        """The events the buffer holds whole, each handed out with ``_offset`` at its end; what
        they took leaves the buffer once they are all taken or this is closed (a line not yet
        ended stays). An event of one data line, as engines stream every chunk, is read by one
        match; any other is read line by line. Raw bytes, never decoded by content encoding
        (the request asks for ``identity``), so nothing inflates; a generator, not an async
        one: a piece's events are split without a trip through the event loop's machinery
        each."""
        buffer = self._buffer
        start = self._offset = 0
        try:
            while True:
                if not self._data and self._event is None:
                    simple = _SIMPLE_EVENT.match(buffer, start)
                    if simple is not None:
                        value = simple.group(1).decode("utf-8", "replace")
                        if len(value) + 1 > MAX_EVENT_BYTES:
                            raise EngineUnavailable(
                                f"the engine sent an event larger than {MAX_EVENT_BYTES} bytes"
                            )
                        start = self._offset = simple.end()
                        yield SseEvent(value, None, self._last_event(None))
                        continue
                end = _LINE_END.search(buffer, start)
                if end is None or (end.group() == b"\r" and end.end() == len(buffer)):
                    break  # not ended yet (the "\n" of a "\r\n" may come with the next piece)
                self._offset = end.end()
                line = buffer[start : end.start()].decode("utf-8", "replace")
                start = end.end()
                item = self._take(line)
                if item is not None:
                    yield item
        finally:
            del buffer[:start]
            self._offset = 0

    def _take(self, line: str) -> SseEvent | None:
        """One line into the event being read; the event, when ``line`` is the blank line
        that ends one with data."""
        if line:
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "data":
                self._data.append(value)
                self._size += len(value) + 1
                if self._size > MAX_EVENT_BYTES:
                    raise EngineUnavailable(
                        f"the engine sent an event larger than {MAX_EVENT_BYTES} bytes"
                    )
            elif name == "event":
                self._event = value
            return None
        event, self._event = self._event, None
        if not self._data:
            return None
        item = SseEvent("\n".join(self._data), event, self._last_event(event))
        self._data, self._size = [], 0
        return item

    async def _events(self) -> AsyncGenerator[SseEvent, None]:
        """Each event as soon as its closing blank line arrives; ends after ``[DONE]``.

        An ``error`` event or an error object from the engine raises EngineUnavailable with a safe
        message; so does a stream that ends without ``[DONE]``, and an event or line over its
        bound (the connection is closed: a hostile upstream cannot fill FICC's memory).
        """
        received = False
        kept: list[SseEvent] = []
        """The events a usage count may need, kept as they came: decoded only at ``[DONE]``,
        and only when no usage chunk arrived (an engine that streams usage costs nothing)."""
        has_usage = False
        pieces = self._response.aiter_raw()
        try:
            async for piece in pieces:
                self._buffer += piece
                events = self._complete_events()
                for item in events:
                    if item.done:
                        if self._count_usage is not None and not has_usage:
                            usage_chunk = await self._usage_chunk([e.payload() for e in kept])
                            if usage_chunk is not None:
                                yield usage_chunk
                        self._done = True
                        yield item
                        events.close()
                        self._clean = await self._ends_after_done(pieces)
                        return
                    _raise_for_error_event(item)
                    received = True
                    if self._count_usage is not None and not has_usage:
                        if _names_usage(item):
                            has_usage = True
                            kept.clear()
                        elif len(kept) < MAX_ASSEMBLED_EVENTS:
                            kept.append(item)
                    yield item
                if len(self._buffer) > MAX_LINE_BYTES:
                    raise EngineUnavailable(
                        f"the engine sent a line longer than {MAX_LINE_BYTES} bytes"
                    )
            self._ended = True
            if self._buffer:
                # A last line with no end: it ends no event, but it counts against the bound.
                self._take(self._buffer.decode("utf-8", "replace"))
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise transport_error(exc) from exc
        finally:
            await self._finish()
        if not received:
            # llama.cpp's server reports errors found after the stream began (a prompt longer
            # than the context) only by ending the stream.
            if self._why_empty is not None:
                raise await self._why_empty()
            raise EngineUnavailable(EMPTY_STREAM)
        raise EngineUnavailable("the engine ended the stream before it was complete")

    async def _ends_after_done(self, pieces: AsyncIterator[bytes]) -> bool:
        """Whether the body ends, with nothing but blank lines, soon after ``[DONE]``.

        Only then is the connection left as HTTP expects it, ready for the next request.
        """
        if self._buffer.strip(b"\r\n"):
            return False
        try:
            async with asyncio.timeout(END_DRAIN_SECONDS):
                async for piece in pieces:
                    if piece.strip(b"\r\n"):
                        return False
        except (TimeoutError, aiohttp.ClientError, EngineUnavailable):
            return False
        self._ended = True
        return True

    def ready(self) -> bool:
        """Whether the engine has already sent the end of another event: the next one is
        there without waiting (the relay joins such events into one write)."""
        return _EVENT_END.search(self._buffer, self._offset) is not None

    def ended(self) -> bool:
        """Whether the last event (``[DONE]``, or a Responses stream's terminal one) was
        taken: the relay waits for no other."""
        return self._done

    def _last_event(self, event: str | None) -> bool:
        """Whether an event of this name ends a Responses stream (no ``[DONE]`` follows it)."""
        return self._path == RESPONSES_PATH and event in TERMINAL_EVENTS

    async def _usage_chunk(self, chunks: list[dict[str, Any]]) -> SseEvent | None:
        """The usage chunk OpenAI ends a stream with, or None when it cannot be counted."""
        if self._count_usage is None or not chunks:
            return None
        usage = await self._count_usage(chunks)
        if usage is None:
            return None
        first = chunks[0]
        kind = "chat.completion.chunk" if self._path == CHAT_COMPLETIONS_PATH else "text_completion"
        chunk: dict[str, Any] = {
            "id": first.get("id"),
            "object": kind,
            "created": first.get("created"),
            "model": first.get("model"),
            "choices": [],
            "usage": usage,
        }
        return SseEvent(json.dumps(chunk, separators=(",", ":")))


def _names_usage(item: SseEvent) -> bool:
    """Whether the event carries a usage (decoded only when its text names one)."""
    data = item.data
    return '"usage"' in data and '"usage":null' not in data and bool(item.payload().get("usage"))


_LINE_END = re.compile(rb"\r\n|\r|\n")
_SIMPLE_EVENT = re.compile(rb"data: ?([^\r\n]*)(?:\r\n\r\n|\n\n|\r\r(?!\n))")
"""An event of one data line and the blank line after it, both ended alike."""
_EVENT_END = re.compile(rb"(?m)^data[^\r\n]*(?:\r\n|\n|\r(?!\n))(?:\r\n|\n|\r)")
"""A data line and the blank line after it: an event complete in the buffer (a comment, or
an event whose lines end in a lone CR, is not counted: then the relay does not wait)."""


def _raise_for_error_event(item: SseEvent) -> None:
    if item.event == "error":
        raise EngineUnavailable(f"the engine failed: {safe_engine_message(item.data)}")
    if item.data.startswith("{") and '"error"' in item.data:
        payload = item.payload()
        if "error" in payload and "choices" not in payload:
            text = engine_error_text(item.data.encode())
            raise EngineUnavailable(f"the engine failed: {safe_engine_message(text)}")
