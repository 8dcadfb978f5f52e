"""Desired state and restart policies against fakes, on the loop's virtual time: a crashed
engine starts again after its backoff, a crash loop ends ``failed``, and after FICC's own
restart (clean or killed) every service whose desired state is running runs again."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from tests.support.fakes.inference import Bench, FakeRuntime, bench
from tests.support.fakes.loop_clock import LoopWallClock, run_virtual

from ficc.base.units import MiB
from ficc.domain.inference import (
    ACTION_TABLE,
    EVENT_TABLE,
    AttemptState,
    DesiredState,
    RestartPolicy,
    ServiceState,
)

ALLOWED_CHANGES = {
    (before, after)
    for table in (*ACTION_TABLE.values(), *EVENT_TABLE.values())
    for before, after in table.items()
    if after is not None and after is not before
}


def virtual(test: Callable[[Path], Coroutine[Any, Any, None]]) -> Callable[[Path], None]:
    """Run an async test on the virtual-time loop: a five-minute backoff takes microseconds."""

    def run(tmp_path: Path) -> None:
        run_virtual(test(tmp_path))

    run.__name__ = test.__name__
    return run


async def eventually(condition: Callable[[], bool], *, seconds: float = 3600.0) -> float:
    """Let virtual time pass until ``condition`` holds; returns the seconds it took."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    while not condition():
        if loop.time() - start > seconds:
            raise AssertionError("the condition never held")
        await asyncio.sleep(0.01)
    return loop.time() - start


def state(b: Bench, service_id: str) -> ServiceState:
    return b.service(service_id).state


def restart_audits(b: Bench, service_id: str) -> list[dict[str, Any]]:
    return [
        dict(entry.details or {})
        for entry in b.store.audit
        if entry.action == "service.restart" and entry.target == service_id
    ]


def assert_changes_follow_the_tables(b: Bench) -> None:
    wrong = [change for change in b.store.state_changes if change not in ALLOWED_CHANGES]
    assert not wrong, wrong


async def running(b: Bench, *, replicas: int = 1, **spec: Any) -> str:
    await b.add_node()
    model = await b.add_model(MiB)
    service = await b.create(model, replicas=replicas, **spec)
    await b.control(service["id"], "start")
    await eventually(lambda: state(b, service["id"]) is ServiceState.RUNNING)
    return str(service["id"])


@virtual
async def test_a_crashed_engine_starts_again_after_one_second_with_one_engine_per_replica(
    tmp_path: Path,
) -> None:
    b = bench(tmp_path, clock=LoopWallClock())
    service_id = await running(b, replicas=2)
    assert b.service(service_id).desired is DesiredState.RUNNING
    revision = b.service(service_id).revision
    b.runtime.replicas[0].crash(exit_code=139)
    await eventually(lambda: state(b, service_id) is ServiceState.STARTING)
    assert "exit code 139" in (b.service(service_id).error or "")
    took = await eventually(lambda: len(b.runtime.replicas) == 4)
    assert 0.9 <= took <= 1.1  # the first backoff, in virtual seconds
    await eventually(lambda: state(b, service_id) is ServiceState.RUNNING)
    assert len(b.runtime.running()) == 2  # the old engines ended before the new ones started
    assert b.service(service_id).revision == revision  # no user change
    assert b.service(service_id).error is None
    assert b.restarts == [RestartPolicy.ON_FAILURE]
    [audit] = restart_audits(b, service_id)
    assert audit["restart"] == 1
    assert audit["policy"] == "on-failure"
    assert "exit code 139" in audit["reason"]
    assert_changes_follow_the_tables(b)


@virtual
async def test_the_fifth_crash_within_ten_minutes_fails_the_service_with_its_log_lines(
    tmp_path: Path,
) -> None:
    b = bench(tmp_path, clock=LoopWallClock())
    service_id = await running(b)
    loop = asyncio.get_running_loop()
    crashed_at = []
    for crash in range(5):
        await eventually(lambda: len(b.runtime.running()) == 1)
        await eventually(lambda: state(b, service_id) is ServiceState.RUNNING)
        crashed_at.append(loop.time())
        b.runtime.running()[0].crash(exit_code=crash + 1)
        await eventually(lambda: state(b, service_id) is not ServiceState.RUNNING)
    await eventually(lambda: state(b, service_id) is ServiceState.FAILED)
    gaps = [round(later - earlier) for earlier, later in itertools.pairwise(crashed_at)]
    assert gaps == [1, 2, 4, 8]  # 1 s doubling
    error = b.service(service_id).error or ""
    assert error == "engine crashed: exit code 5; crashed 5 times within 600 s; not restarted again"
    assert b.service(service_id).desired is DesiredState.RUNNING  # what was asked, still
    attempts = [a for a in b.store.attempts.values() if a.service_id == service_id]
    last = max(attempts, key=lambda a: a.created_at)
    assert last.state is AttemptState.CRASHED
    assert last.exit_code == 5
    assert last.log_tail == f"log of {last.id}"
    assert len(b.restarts) == 4
    assert [a["restart"] for a in restart_audits(b, service_id)] == [1, 2, 3, 4]
    await asyncio.sleep(600)
    assert len(b.restarts) == 4  # no further restart
    assert not b.runtime.running()
    assert_changes_follow_the_tables(b)


@virtual
async def test_a_stop_during_the_backoff_cancels_the_restart(tmp_path: Path) -> None:
    b = bench(tmp_path, clock=LoopWallClock())
    service_id = await running(b)
    b.runtime.replicas[0].crash()
    await eventually(lambda: state(b, service_id) is ServiceState.STARTING)
    await b.control(service_id, "stop")
    await asyncio.sleep(10)
    assert state(b, service_id) is ServiceState.STOPPED
    assert b.service(service_id).desired is DesiredState.STOPPED
    assert len(b.runtime.replicas) == 1
    assert b.restarts == []
    assert_changes_follow_the_tables(b)


@virtual
async def test_a_clean_exit_is_restarted_only_under_always(tmp_path: Path) -> None:
    b = bench(tmp_path, clock=LoopWallClock())
    quiet = await running(b)
    always = await running(b, restart="always")
    for service_id in (quiet, always):
        replica = next(r for r in b.runtime.running() if r.request.model_name == service_id)
        replica.crash(exit_code=0)
    await eventually(lambda: state(b, quiet) is ServiceState.FAILED)
    assert "restart policy is on-failure" in (b.service(quiet).error or "")
    await eventually(lambda: len(b.restarts) == 1)
    await eventually(lambda: state(b, always) is ServiceState.RUNNING)
    assert b.restarts == [RestartPolicy.ALWAYS]


@virtual
async def test_restarts_keep_a_bounded_number_of_ended_attempts(tmp_path: Path) -> None:
    b = bench(tmp_path, clock=LoopWallClock())
    service_id = await running(b, restart="always")
    loop = asyncio.get_running_loop()
    for _ in range(40):
        await eventually(lambda: state(b, service_id) is ServiceState.RUNNING)
        await asyncio.sleep(700)  # runs long enough: the backoff starts again at 1 s
        b.runtime.running()[0].crash()
        await eventually(lambda: state(b, service_id) is not ServiceState.RUNNING)
    await eventually(lambda: state(b, service_id) is ServiceState.RUNNING)
    assert loop.time() > 40 * 700
    assert len(b.restarts) == 40
    attempts = [a for a in b.store.attempts.values() if a.service_id == service_id]
    assert len(attempts) <= 33  # 32 ended, 1 running


async def _restored(tmp_path: Path, *, clean: bool) -> None:
    b = bench(tmp_path, clock=LoopWallClock())
    first = await running(b, replicas=2)
    second = await running(b)
    stopped = await running(b)
    await b.control(stopped, "stop")
    if clean:
        await b.services.close()
        assert state(b, first) is ServiceState.STOPPED
        assert b.service(first).desired is DesiredState.RUNNING
    old_pids = sorted(r.handle.pid for r in b.runtime.running())
    # The same database, a new FICC process; after kill -9 the old engines are still there.
    after = bench(tmp_path, clock=LoopWallClock(), runtime=FakeRuntime(), store=b.store)
    await after.services.recover()
    await eventually(lambda: state(after, first) is ServiceState.RUNNING)
    await eventually(lambda: state(after, second) is ServiceState.RUNNING)
    assert state(after, stopped) is ServiceState.STOPPED
    assert sorted(p.pid for p in after.runtime.fenced) == old_pids
    assert len(after.runtime.replicas) == 3  # one engine per replica of the two
    starts = [e for e in after.store.audit if e.actor == "ficc:restore"]
    assert sorted(e.target or "" for e in starts) == sorted([first, second])
    assert_changes_follow_the_tables(after)


def test_after_a_clean_restart_every_service_desired_running_runs_again(tmp_path: Path) -> None:
    run_virtual(_restored(tmp_path, clean=True))


def test_after_a_kill_every_service_desired_running_runs_again_once_fenced(
    tmp_path: Path,
) -> None:
    run_virtual(_restored(tmp_path, clean=False))


@virtual
async def test_a_clean_shutdown_during_the_backoff_records_the_service_stopped(
    tmp_path: Path,
) -> None:
    b = bench(tmp_path, clock=LoopWallClock())
    service_id = await running(b)
    b.runtime.replicas[0].crash()
    await eventually(lambda: state(b, service_id) is ServiceState.STARTING)
    await b.services.close()
    assert state(b, service_id) is ServiceState.STOPPED
    assert b.service(service_id).desired is DesiredState.RUNNING
    assert len(b.runtime.replicas) == 1
