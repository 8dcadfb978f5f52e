"""The streamed relay's hot path: chunks that waited go on together (the same bytes, fewer
writes) on both clusters, and iroh's ready polls resume their coroutine without a wake-up of
the loop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from tests.unit.protocol.test_protocol_connection import START, connected, feed, one_request

from ficc.adapters.engines.sse import EngineStream
from ficc.adapters.hypernet import serving, wakefix
from ficc.adapters.hypernet.requesting import Exchange
from ficc.domain.openai_requests import CHAT_COMPLETIONS_PATH
from ficc.protocol.events import AnswerEnded, DataReceived, Event
from ficc.services.inference import invoke
from ficc.services.ports.peers import HeldChunk


class _Protocol:
    """What the requester's connection makes of each read: here, a script of events."""

    def __init__(self, reads: list[list[Event]]) -> None:
        self._reads = reads

    def receive(self, stream_id: int, data: bytes, now: float) -> list[Event]:
        return self._reads.pop(0)


def _exchange(reads: list[list[Event]]) -> Exchange:
    async def read(stream_id: int, stream: Any) -> bytes:
        await asyncio.sleep(0)
        return b"x"

    return Exchange(
        _Protocol(reads),  # type: ignore[arg-type]
        1,
        None,  # type: ignore[arg-type]
        read,
        lambda: 0.0,
        message_timeout=None,
    )


async def _pieces(exchange: Exchange, *, transfer: bool = False) -> list[bytes]:
    chunks = await exchange.streamed(transfer=transfer)
    return [piece async for piece in chunks]


async def test_chunks_that_arrived_together_reach_a_slow_reader_in_one_write() -> None:
    # The reader fell behind: one read of the peer's stream brought three chunks, the next two.
    reads: list[list[Event]] = [
        [DataReceived(1, b"data: a\n\n"), DataReceived(1, b"data: b\n\n")],
        [DataReceived(1, b"data: c\n\n")],
        [DataReceived(1, b"data: d\n\n"), AnswerEnded(1)],
    ]
    pieces = await _pieces(_exchange(reads))
    assert b"".join(pieces) == b"data: a\n\ndata: b\n\ndata: c\n\ndata: d\n\n"
    assert pieces == [b"data: a\n\ndata: b\n\n", b"data: c\n\n", b"data: d\n\n"]


async def test_a_reader_keeping_up_gets_each_chunk_as_it_came() -> None:
    reads: list[list[Event]] = [[DataReceived(1, b"a")], [DataReceived(1, b"b")], [AnswerEnded(1)]]
    assert await _pieces(_exchange(reads)) == [b"a", b"b"]


async def test_a_transfers_chunks_stay_apart() -> None:
    reads: list[list[Event]] = [[DataReceived(1, b"a"), DataReceived(1, b"b"), AnswerEnded(1)]]
    assert await _pieces(_exchange(reads), transfer=True) == [b"a", b"b"]


class _Loop:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def call_soon(self, *args: Any) -> None:
        self.calls.append("call_soon")

    def call_soon_threadsafe(self, *args: Any) -> None:
        self.calls.append("call_soon_threadsafe")


def test_the_wake_fix_applies_to_iroh_1_2_0_once() -> None:
    assert wakefix.apply_wake_fix()
    assert wakefix.apply_wake_fix()


async def test_a_poll_ready_on_the_loops_thread_resumes_without_a_thread_safe_wake_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loop = _Loop()
    handles = wakefix.iroh_ffi._UniffiContinuationHandleMap
    monkeypatch.setattr(asyncio, "_get_running_loop", lambda: loop)
    wakefix._continue(handles.insert((loop, None)), 0)
    assert loop.calls == ["call_soon"]


def test_a_poll_woken_from_irohs_thread_resumes_through_the_thread_safe_call() -> None:
    loop = _Loop()
    handles = wakefix.iroh_ffi._UniffiContinuationHandleMap
    wakefix._continue(handles.insert((loop, None)), 0)  # no loop runs on this thread
    assert loop.calls == ["call_soon_threadsafe"]


class _Body:
    """An engine's streamed body as the client reads it: pieces, each one read."""

    def __init__(self, pieces: list[bytes]) -> None:
        self._pieces = pieces

    async def aiter_raw(self) -> Any:
        for piece in self._pieces:
            await asyncio.sleep(0)
            yield piece

    async def aclose(self) -> None:
        return None


def _event(text: str) -> bytes:
    return b'data: {"choices":[{"delta":{"content":"' + text.encode() + b'"}}]}\n\n'


async def _relay(pieces: list[bytes]) -> list[bytes]:
    """What the grantor's relay writes for an engine body read in ``pieces``."""
    stream = EngineStream(_Body(pieces), CHAT_COMPLETIONS_PATH)  # type: ignore[arg-type]
    await stream.start()
    chunks = invoke._coalesced(invoke._bounded(invoke._relayed(stream), None), stream)
    return [chunk async for chunk in chunks]


async def test_events_the_engine_sent_while_the_relay_was_behind_go_on_in_one_write() -> None:
    # Three events and [DONE] waited in one read (the peer read slower than the engine).
    engine = [_event("a") + _event("b") + _event("c") + b"data: [DONE]\n\n"]
    writes = await _relay(engine)
    assert b"".join(writes) == b"".join(engine)
    assert writes == [_event("a"), _event("b") + _event("c") + b"data: [DONE]\n\n"]


async def test_the_first_event_is_written_alone_though_the_whole_answer_waited() -> None:
    # An engine that answers at once: the first token must not wait for the last.
    engine = [_event("a") + _event("b") + b"data: [DONE]\n\n"]
    writes = await _relay(engine)
    assert writes[0] == _event("a")
    assert b"".join(writes[1:]) == _event("b") + b"data: [DONE]\n\n"


async def test_events_arriving_one_by_one_are_written_one_by_one() -> None:
    engine = [_event("a"), _event("b"), b"data: [DONE]\n\n"]
    writes = await _relay(engine)
    assert writes == engine


async def test_an_event_is_not_held_for_a_half_arrived_one_or_a_comment() -> None:
    half = _event("b")
    engine = [_event("a") + half[:10], half[10:] + b": ping\n\n", b"data: [DONE]\n\n"]
    writes = await _relay(engine)
    assert writes == [_event("a"), half, b"data: [DONE]\n\n"]


async def test_what_this_cluster_adds_after_the_engines_last_event_goes_on_with_it() -> None:
    # A translation's closing events follow the engine's end: nothing more comes from the
    # engine, so the end and they are one write, however long making them took.
    engine = [_event("a"), _event("b"), b"data: [DONE]\n\n"]
    stream = EngineStream(_Body(engine), CHAT_COMPLETIONS_PATH)  # type: ignore[arg-type]
    await stream.start()

    async def closed() -> AsyncIterator[bytes]:
        async for piece in invoke._relayed(stream):
            yield piece
        await asyncio.sleep(0.01)
        yield _event("closing")
        yield _event("closed")

    chunks = invoke._coalesced(invoke._bounded(closed(), None), stream)
    writes = [chunk async for chunk in chunks]
    ending = b"data: [DONE]\n\n" + _event("closing") + _event("closed")
    assert writes == [_event("a"), _event("b"), ending]


class _PacedBody:
    """An engine's body as a socket delivers it: the engine sends an event every ``gap``
    seconds on its own, and each read takes all that has arrived (as aiohttp's
    ``iter_any``), however long the reader was away."""

    def __init__(self, events: list[bytes], gap: float) -> None:
        self._arrived: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._sending = asyncio.ensure_future(self._send(events, gap))

    async def _send(self, events: list[bytes], gap: float) -> None:
        for event in events:
            self._arrived.put_nowait(event)
            await asyncio.sleep(gap)
        self._arrived.put_nowait(None)

    async def aiter_raw(self) -> Any:
        while True:
            pieces = [await self._arrived.get()]
            while not self._arrived.empty():
                pieces.append(self._arrived.get_nowait())
            if pieces[-1] is None:
                if len(pieces) > 1:
                    yield b"".join(p for p in pieces if p is not None)
                return
            yield b"".join(p for p in pieces if p is not None)

    async def aclose(self) -> None:
        self._sending.cancel()


async def _joined(events: list[bytes], gap: float, join_seconds: float) -> list[bytes]:
    """What the relay writes, joining over ``join_seconds``, for an engine sending
    ``events`` one every ``gap`` seconds."""
    stream = EngineStream(_PacedBody(events, gap), CHAT_COMPLETIONS_PATH)  # type: ignore[arg-type]
    await stream.start()
    relayed = invoke._bounded(invoke._relayed(stream), None)
    return [chunk async for chunk in invoke._coalesced(relayed, stream, join_seconds)]


async def test_a_stream_faster_than_the_window_goes_on_in_fewer_writes_of_the_same_bytes() -> None:
    # 40 events a millisecond apart, joined over 20 ms: about two writes in each window.
    engine = [_event(str(n)) for n in range(40)] + [b"data: [DONE]\n\n"]
    writes = await _joined(engine, 0.001, 0.02)
    assert b"".join(writes) == b"".join(engine)
    assert writes[0] == engine[0]  # the first token waits for no window
    assert len(writes) <= len(engine) // 3


async def test_a_stream_slower_than_the_window_gets_each_event_as_it_came() -> None:
    engine = [_event("a"), _event("b"), _event("c"), b"data: [DONE]\n\n"]
    writes = await _joined(engine, 0.05, 0.002)
    assert writes == engine


async def test_no_window_is_waited_once_the_engines_last_event_is_out() -> None:
    # An engine that sends all at once: the first alone, the rest at once after it.
    engine = [_event("a") + _event("b") + b"data: [DONE]\n\n"]
    loop = asyncio.get_running_loop()
    started = loop.time()
    writes = await _joined(engine, 0.0, 5.0)
    assert loop.time() - started < 5.0
    assert writes == [_event("a"), _event("b") + b"data: [DONE]\n\n"]
    # Made once nothing more is awaited from the engine: a transport may hold it for what
    # follows (the grantor's counts); the first piece is never held.
    assert [isinstance(piece, HeldChunk) for piece in writes] == [False, True]


async def test_a_window_holds_an_event_no_longer_than_the_window() -> None:
    # Two events 10 ms apart, joined over 200 ms: the second is written after the first's
    # window (no sooner), and the end follows it without another window.
    engine = [_event("a"), _event("b"), b"data: [DONE]\n\n"]
    loop = asyncio.get_running_loop()
    started = loop.time()
    writes = await _joined(engine, 0.01, 0.2)
    elapsed = loop.time() - started
    assert writes == [_event("a"), _event("b") + b"data: [DONE]\n\n"]
    assert 0.2 <= elapsed < 0.4


async def _served(chunks: list[bytes], finished: list[str]) -> tuple[list[bytes], list[object]]:
    """The writes a grantor makes for a handler streaming ``chunks`` (noting in ``finished``
    when the handler's own ``finally`` ran), and what the requester reads of them."""
    requester, server = connected()
    asked, served, _ = one_request(requester, server, {}, streaming=True)

    async def handler() -> AsyncIterator[bytes]:
        try:
            for chunk in chunks:
                yield chunk
        finally:
            finished.append("handler")

    async def handled() -> AsyncIterator[bytes]:
        return handler()

    writes: list[bytes] = []

    def refused(failure: Exception) -> bytes:
        raise AssertionError("the handler did not fail") from failure

    frames = serving._frames(server, served, handled(), refused, transfer=False)
    async for frame in frames:
        writes.append(frame)
        finished.append("write")
    return writes, feed(requester, asked, b"".join(writes), [], START)


async def test_a_streams_last_chunk_goes_with_its_end_once_the_handler_finished() -> None:
    finished: list[str] = []
    writes, events = await _served([b"a", HeldChunk(b"counts")], finished)
    assert len(writes) == 2  # "a", then "counts" and the end in one write
    # The handler (its slot) finished before the last write: a next request finds it free.
    assert finished == ["write", "handler", "write"]
    data = b"".join(e.data for e in events if isinstance(e, DataReceived))
    assert data == b"acounts"
    assert isinstance(events[-1], AnswerEnded)


async def test_a_held_chunk_goes_in_one_write_with_the_chunk_that_follows_it() -> None:
    finished: list[str] = []
    writes, events = await _served([b"a", HeldChunk(b"b"), b"c"], finished)
    assert len(writes) == 3  # "a", then "b" and "c" together, then the end
    assert writes[1].count(b"b") == 1
    assert writes[1].index(b"b") < writes[1].index(b"c")
    data = b"".join(e.data for e in events if isinstance(e, DataReceived))
    assert data == b"abc"
    assert isinstance(events[-1], AnswerEnded)


async def test_the_engines_last_piece_and_the_counts_go_with_the_end_in_one_write() -> None:
    # What a grantor's stream yields once the engine has ended: its last piece (held), then
    # its counts: both wait for the handler to finish and go with the end.
    finished: list[str] = []
    writes, events = await _served([b"a", HeldChunk(b"b"), HeldChunk(b"counts")], finished)
    assert len(writes) == 2
    assert finished == ["write", "handler", "write"]
    data = b"".join(e.data for e in events if isinstance(e, DataReceived))
    assert data == b"abcounts"
    assert isinstance(events[-1], AnswerEnded)
