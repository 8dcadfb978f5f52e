"""A stream's deadline keeps ``asyncio.timeout``'s rule: past it the block raises TimeoutError
and the task is left as it was; a cancel from elsewhere stays a cancel (also at the same
moment); moved later it does not fire, moved earlier it does; nested, each raises only for its
own; None never fires."""

from __future__ import annotations

import asyncio

import pytest

from ficc.adapters.hypernet.deadlines import Deadline


async def test_past_its_deadline_the_block_raises_timeout_and_the_task_is_uncancelled() -> None:
    with pytest.raises(TimeoutError), Deadline.after(0.01):
        await asyncio.sleep(5)
    task = asyncio.current_task()
    assert task is not None
    assert task.cancelling() == 0
    await asyncio.sleep(0)  # no cancel is left pending


async def test_a_block_that_ends_in_time_is_left_alone() -> None:
    with Deadline.after(0.05) as deadline:
        await asyncio.sleep(0)
    await asyncio.sleep(0.08)  # its timer is gone with it
    assert deadline.when() is not None


async def test_none_never_fires() -> None:
    with Deadline(None):
        await asyncio.sleep(0.02)


async def test_a_deadline_already_passed_fires_at_the_first_wait() -> None:
    loop = asyncio.get_running_loop()
    with pytest.raises(TimeoutError), Deadline(loop.time() - 1):
        await asyncio.sleep(1)


async def test_a_cancel_from_elsewhere_stays_a_cancel() -> None:
    async def waiting() -> None:
        with Deadline.after(5):
            await asyncio.sleep(5)

    task = asyncio.create_task(waiting())
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_cancel_at_the_moment_the_deadline_passes_stays_a_cancel() -> None:
    loop = asyncio.get_running_loop()
    at = loop.time() + 0.02

    async def waiting() -> None:
        with Deadline(at):
            await asyncio.sleep(5)

    task = asyncio.create_task(waiting())
    await asyncio.sleep(0)
    loop.call_at(at, task.cancel)  # after the deadline's own timer, in the same step
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_moved_later_it_does_not_fire_and_moved_earlier_it_does() -> None:
    loop = asyncio.get_running_loop()
    with Deadline.after(0.01) as deadline:
        deadline.reschedule(loop.time() + 5)
        await asyncio.sleep(0.05)

    async def moved_earlier() -> None:
        with Deadline.after(5) as deadline:
            deadline.reschedule(loop.time() + 0.01)
            await asyncio.sleep(5)

    with pytest.raises(TimeoutError):
        await moved_earlier()
    with Deadline.after(0.01) as deadline:
        deadline.reschedule(None)
        await asyncio.sleep(0.05)


async def test_nested_each_raises_only_for_its_own() -> None:
    with Deadline.after(5):
        with pytest.raises(TimeoutError), Deadline.after(0.01):
            await asyncio.sleep(5)
        await asyncio.sleep(0.01)  # the outer one goes on
    inner: list[str] = []

    async def outer_passes() -> None:
        with Deadline.after(0.01):
            try:
                with Deadline.after(5):
                    await asyncio.sleep(5)
            except TimeoutError:
                inner.append("raised")  # the inner deadline did not pass; the outer did
                raise

    with pytest.raises(TimeoutError):
        await outer_passes()
    assert inner == []


async def test_outside_a_task_it_refuses() -> None:
    def armed_outside() -> None:
        with Deadline.after(1):
            pass

    loop = asyncio.get_running_loop()
    future: asyncio.Future[None] = loop.create_future()

    def run() -> None:
        try:
            armed_outside()
        except RuntimeError as exc:
            future.set_exception(exc)
        else:
            future.set_result(None)

    loop.call_soon(run)
    with pytest.raises(RuntimeError, match="inside a task"):
        await future
