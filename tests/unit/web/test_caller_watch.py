"""The caller leaving cancels the work a request's one listener guards, in the request's own
task: the work is stopped, the task is left uncancelled, any other cancel (a server shutting
down) still unwinds, and a stream opened and relayed under one watch stops at the engine."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from ficc.web.sse import CallerWatch, EventStreamResponse


class Caller:
    """An ASGI ``receive`` whose caller leaves when told to."""

    def __init__(self) -> None:
        self.left = asyncio.Event()
        self.calls = 0

    async def receive(self) -> dict[str, object]:
        self.calls += 1
        await self.left.wait()
        return {"type": "http.disconnect"}


async def test_the_caller_leaving_cancels_the_work_and_leaves_the_task_uncancelled() -> None:
    caller = Caller()
    watch = CallerWatch(caller.receive)  # type: ignore[arg-type]
    stopped: list[str] = []

    async def work() -> str:
        try:
            await asyncio.sleep(60)
        finally:
            stopped.append("stopped")
        return "never"

    asyncio.get_running_loop().call_later(0.01, caller.left.set)
    assert await watch.run(work()) is None
    watch.close()
    assert stopped == ["stopped"]
    task = asyncio.current_task()
    assert task is not None
    assert task.cancelling() == 0
    await asyncio.sleep(0)  # a cancel still pending would land here


async def test_work_that_ends_first_gives_its_result() -> None:
    caller = Caller()
    watch = CallerWatch(caller.receive)  # type: ignore[arg-type]

    async def work() -> str:
        await asyncio.sleep(0)
        return "answer"

    assert await watch.run(work()) == "answer"
    watch.close()
    caller.left.set()
    await asyncio.sleep(0.01)
    assert not watch.gone  # it stopped listening with the response


async def test_another_cancel_still_unwinds_the_request() -> None:
    caller = Caller()

    async def request() -> None:
        watch = CallerWatch(caller.receive)  # type: ignore[arg-type]
        try:
            await watch.run(asyncio.sleep(60))
        finally:
            watch.close()

    task = asyncio.create_task(request())
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_both_cancels_at_once_still_unwind_the_request() -> None:
    caller = Caller()

    async def request() -> None:
        watch = CallerWatch(caller.receive)  # type: ignore[arg-type]
        try:
            await watch.run(asyncio.sleep(60))
        finally:
            watch.close()

    task = asyncio.create_task(request())
    await asyncio.sleep(0.01)
    caller.left.set()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_work_after_the_caller_left_is_never_started() -> None:
    caller = Caller()
    watch = CallerWatch(caller.receive)  # type: ignore[arg-type]
    caller.left.set()
    await asyncio.sleep(0.01)
    started: list[str] = []

    async def work() -> None:
        started.append("started")

    assert await watch.run(work()) is None
    watch.close()
    assert started == []


async def test_a_stream_relayed_under_its_opening_watch_stops_when_the_caller_goes() -> None:
    caller = Caller()
    watch = CallerWatch(caller.receive)
    ended: list[str] = []

    async def endless() -> AsyncIterator[bytes]:
        try:
            while True:
                yield b"data: {}\n\n"
                await asyncio.sleep(0.005)
        finally:
            ended.append("engine stopped")

    async def close() -> None:
        ended.append("closed")

    sent: list[dict[str, object]] = []

    async def send(message: dict[str, object]) -> None:
        sent.append(message)
        if len(sent) == 3:
            caller.left.set()

    response = EventStreamResponse(endless(), close, watch=watch)
    await asyncio.wait_for(response({"type": "http"}, caller.receive, send), 5)  # type: ignore[arg-type]
    assert ended == ["engine stopped", "closed"]
    assert caller.calls == 1  # one listener for the request's whole life
    assert not any(m.get("more_body") is False for m in sent)
    task = asyncio.current_task()
    assert task is not None
    assert task.cancelling() == 0
