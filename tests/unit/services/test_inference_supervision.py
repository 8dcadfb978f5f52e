"""Supervision of replicas against fakes: launch, crash, drain, superseded launch, restart.

Each test also checks that every service state change it caused is one the domain's tables
allow, and that a removed service leaves nothing in memory.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.support.fakes.inference import OWNER, PROJECT, Bench, FakeRuntime, bench

from ficc.base.errors import Conflict, UnacknowledgedOutcome
from ficc.base.units import MiB
from ficc.domain.inference import (
    ACTION_TABLE,
    EVENT_TABLE,
    AttemptState,
    DesiredState,
    ServiceState,
)
from ficc.domain.service_records import AttemptRecord
from ficc.services.mutations import MutationKey

ALLOWED_CHANGES = {
    (before, after)
    for table in (*ACTION_TABLE.values(), *EVENT_TABLE.values())
    for before, after in table.items()
    if after is not None and after is not before
}


def assert_changes_follow_the_tables(b: Bench) -> None:
    wrong = [change for change in b.store.state_changes if change not in ALLOWED_CHANGES]
    assert not wrong, wrong


def attempt_states(b: Bench, service_id: str) -> list[AttemptState]:
    return [a.state for a in b.store.attempts.values() if a.service_id == service_id]


async def running(b: Bench, *, replicas: int = 1, **spec: Any) -> str:
    await b.add_node()
    model = await b.add_model(MiB)
    service = await b.create(model, replicas=replicas, **spec)
    await b.control(service["id"], "start")
    await b.until(lambda: b.service(service["id"]).state is ServiceState.RUNNING)
    return str(service["id"])


async def test_a_started_service_runs_and_requests_go_round_robin_over_its_replicas(
    tmp_path: Path,
) -> None:
    b = bench(tmp_path)
    service_id = await running(b, replicas=2)
    router = b.services.router
    for _ in range(4):
        endpoint = await router.endpoint(PROJECT, service_id)
        await router.complete(endpoint, "/v1/completions", {"prompt": "x"}, None)
    urls = [r.handle.base_url for r in b.runtime.replicas]
    assert sorted(b.engine.calls) == sorted(urls * 2)
    assert attempt_states(b, service_id) == [AttemptState.HEALTHY] * 2
    assert_changes_follow_the_tables(b)


async def test_a_crashed_replica_fails_the_service_and_ends_its_siblings(tmp_path: Path) -> None:
    b = bench(tmp_path)
    service_id = await running(b, replicas=2, restart="never")
    b.runtime.replicas[0].crash(exit_code=139)
    await b.until(lambda: not b.runtime.running())
    await b.until(lambda: b.service(service_id).state is ServiceState.FAILED)
    assert b.service(service_id).error == "engine crashed: exit code 139; restart policy is never"
    with pytest.raises(Conflict):
        await b.services.router.endpoint(PROJECT, service_id)
    assert sorted(attempt_states(b, service_id)) == [AttemptState.CRASHED, AttemptState.STOPPED]
    assert_changes_follow_the_tables(b)


async def test_a_drain_waits_for_the_request_in_flight_then_stops(tmp_path: Path) -> None:
    b = bench(tmp_path)
    service_id = await running(b)
    endpoint = await b.services.router.endpoint(PROJECT, service_id)
    async with b.services.router.in_flight(service_id):
        await b.control(service_id, "drain")
        assert b.service(service_id).state is ServiceState.DRAINING
        with pytest.raises(Conflict):
            await b.services.router.endpoint(PROJECT, service_id)  # no new request while draining
        for _ in range(20):
            await b.until(lambda: True)
        assert b.runtime.running(), "the replica was stopped under a request in flight"
    await b.until(lambda: b.service(service_id).state is ServiceState.STOPPED)
    assert not b.runtime.running()
    assert endpoint.base_url == b.runtime.replicas[0].handle.base_url
    assert_changes_follow_the_tables(b)


async def test_a_stop_during_the_launch_ends_the_engine_and_leaves_no_handle(
    tmp_path: Path,
) -> None:
    b = bench(tmp_path, runtime=FakeRuntime(healthy_at_once=False))
    await b.add_node()
    model = await b.add_model(MiB)
    service = await b.create(model, replicas=2)
    await b.control(service["id"], "start")
    await b.runtime.launched.wait()
    await b.control(service["id"], "stop")
    await b.until(lambda: not b.runtime.running() and len(b.runtime.replicas) >= 1)
    b.runtime.replicas[0].become_healthy()  # too late: the launch was superseded
    await b.until(lambda: AttemptState.PENDING not in attempt_states(b, service["id"]))
    assert b.service(service["id"]).state is ServiceState.STOPPED
    assert AttemptState.HEALTHY not in attempt_states(b, service["id"])
    assert not b.runtime.running()
    with pytest.raises(Conflict):
        await b.services.router.endpoint(PROJECT, service["id"])
    assert_changes_follow_the_tables(b)


async def test_a_refused_launch_fails_the_service_and_leaves_no_attempt_pending(
    tmp_path: Path,
) -> None:
    b = bench(tmp_path, runtime=FakeRuntime(refuse="no port free"))
    await b.add_node()
    model = await b.add_model(MiB)
    service = await b.create(model, replicas=3)
    await b.control(service["id"], "start")
    await b.until(lambda: b.service(service["id"]).state is ServiceState.FAILED)
    assert b.service(service["id"]).error == "no port free"
    await b.until(lambda: attempt_states(b, service["id"]) == [AttemptState.FAILED] * 3)
    assert_changes_follow_the_tables(b)


async def test_a_restart_fences_launched_attempts_and_marks_pending_ones_unknown(
    tmp_path: Path,
) -> None:
    b = bench(tmp_path)
    service_id = await running(b)
    now = b.clock()
    pending = AttemptRecord("attempt_pending", service_id, 1, AttemptState.PENDING, "old", now)
    b.store.attempts[pending.id] = pending
    after = bench(tmp_path, runtime=FakeRuntime())
    after.store.__dict__.update(b.store.__dict__)  # the same database, a new FICC process
    await after.services.recover()
    # Desired running, but an attempt's outcome cannot be proved: it stays stopped, saying why.
    assert after.service(service_id).state is ServiceState.STOPPED
    assert after.service(service_id).desired is DesiredState.RUNNING
    error = after.service(service_id).error or ""
    assert "FICC restarted while the service was running" in error
    assert "not started again after FICC's restart" in error
    assert "acknowledge_unknown" in error
    assert not after.runtime.replicas
    assert sorted(attempt_states(after, service_id)) == [
        AttemptState.STOPPED,
        AttemptState.UNKNOWN,
    ]
    assert [p.pid for p in after.runtime.fenced] == [b.runtime.replicas[0].handle.pid]
    with pytest.raises(UnacknowledgedOutcome):
        await after.control(service_id, "start")
    await after.control(service_id, "start", acknowledge_unknown=True)
    assert after.fenced_attempts == [pending.id]
    await after.until(lambda: after.service(service_id).state is ServiceState.RUNNING)
    assert_changes_follow_the_tables(after)


async def test_a_clean_shutdown_stops_every_engine_and_records_stopped(tmp_path: Path) -> None:
    b = bench(tmp_path)
    service_id = await running(b, replicas=2)
    await b.services.close()
    assert not b.runtime.running()
    assert b.service(service_id).state is ServiceState.STOPPED
    assert_changes_follow_the_tables(b)


async def test_a_removed_service_leaves_nothing_in_memory(tmp_path: Path) -> None:
    b = bench(tmp_path)
    service_id = await running(b, replicas=2)
    router = b.services.router
    endpoint = await router.endpoint(PROJECT, service_id)
    async with router.stream(endpoint, "/v1/completions", {}) as events:
        assert [event.data async for event in events] == ["hello", "[DONE]"]
    await b.control(service_id, "stop")
    assert b.services.tracked_services() == {service_id}  # the lock of a service that exists
    await b.control(service_id, "remove")
    assert b.services.tracked_services() == frozenset()
    assert service_id not in b.store.services
    assert not [a for a in b.store.attempts.values() if a.service_id == service_id]
    assert all(stream.closed.is_set() for stream in b.engine.streams)
    assert_changes_follow_the_tables(b)


async def test_a_local_stop_replayed_after_a_start_answers_its_first_answer(
    tmp_path: Path,
) -> None:
    """An Idempotency-Key stop keeps the answer it gave once its replicas ended."""
    b = bench(tmp_path)
    service_id = await running(b)
    key = MutationKey.local(PROJECT, "c" * 32, "inference.control", {"operation": "stop"})

    async def stop() -> tuple[dict[str, Any], bool]:
        return await b.services.commands.control_service(
            OWNER, PROJECT, service_id, revision=2, operation="stop", key=key
        )

    first, replayed = await stop()
    assert not replayed
    assert [r["state"] for r in first["replicas"]] == ["stopped"]
    await b.control(service_id, "start")
    await b.until(lambda: b.service(service_id).state is ServiceState.RUNNING)
    again, replayed = await stop()
    assert replayed
    assert json.dumps(again) == json.dumps(first)
