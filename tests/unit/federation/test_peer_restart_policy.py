"""A peer's ``inference.create`` may set a service's restart policy, within its grant: the
policy is kept and shown, a wrong one is refused naming the field, and a service whose grant
has ended is not started again after a crash."""

from __future__ import annotations

import asyncio
import secrets
from typing import Any

import pytest
from tests.support.fakes.inference import FakeRuntime
from tests.support.fakes.peer_channel import OWNER, Pair, paired
from tests.support.isolation import add_node, record_model

from ficc.base.errors import FiccError
from ficc.domain.grants import GrantState
from ficc.domain.inference import DesiredState, RestartPolicy, RuntimeName, ServiceState


async def _peer(pair: Pair) -> tuple[str, dict[str, Any], FakeRuntime]:
    runtime = FakeRuntime()
    runtimes = pair.grantor.inference.supervisor._runtimes
    runtimes[RuntimeName.LLAMA_CPP] = runtime  # type: ignore[index]
    node = await add_node(pair.grantor)
    model = await record_model(pair.grantor, "default", [1024], owned=True)
    finished = await paired(
        pair, {"scopes": ["inference:manage"], "models": [model.id], "nodes": [node.id]}
    )
    spec = {"name": "peer-made", "model": model.id, "runtime": "llama.cpp", "node": node.id}
    return finished.peer.id, spec, runtime


async def _request(pair: Pair, peer_id: str, operation: str, body: dict[str, Any]) -> Any:
    answer = await pair.requester.remote.request(
        OWNER, "default", peer_id, operation=operation, body=body, mutation_id=secrets.token_hex(16)
    )
    return answer["result"]


async def _until(condition: Any) -> None:
    for _ in range(10_000):
        if await condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("the condition never held")


async def test_a_peer_sets_the_restart_policy_and_sees_it_with_the_desired_state(
    pair: Pair,
) -> None:
    peer_id, spec, _ = await _peer(pair)
    created = await _request(
        pair, peer_id, "inference.create", {"spec": {**spec, "restart": "never"}}
    )
    assert created["spec"]["restart"] == "never"
    assert created["desired"] == "stopped"
    assert "options" not in created["spec"]
    async with pair.grantor.uow_factory() as uow:
        record = await uow.services.get(created["id"])
    assert record is not None
    assert record.spec.restart is RestartPolicy.NEVER


async def test_a_peers_restart_policy_outside_the_three_is_refused_naming_the_field(
    pair: Pair,
) -> None:
    peer_id, spec, _ = await _peer(pair)
    with pytest.raises(FiccError) as refused:
        await _request(
            pair, peer_id, "inference.create", {"spec": {**spec, "restart": "unless-stopped"}}
        )
    assert refused.value.code == "invalid_request"
    assert "restart must be one of on-failure, always, never" in refused.value.message
    async with pair.grantor.uow_factory() as uow:
        assert await uow.services.list("default") == []


async def test_a_crashed_service_of_an_ended_grant_is_not_started_again(pair: Pair) -> None:
    peer_id, spec, runtime = await _peer(pair)
    created = await _request(pair, peer_id, "inference.create", {"spec": spec})
    started = await _request(
        pair,
        peer_id,
        "inference.control",
        {"service": created["id"], "revision": created["revision"], "operation": "start"},
    )
    assert started["desired"] == "running"

    async def state() -> ServiceState | None:
        async with pair.grantor.uow_factory() as uow:
            record = await uow.services.get(created["id"])
        return None if record is None else record.state

    async def is_running() -> bool:
        return await state() is ServiceState.RUNNING

    await _until(is_running)
    async with pair.grantor.uow_factory() as uow:
        record = await uow.services.get(created["id"])
        assert record is not None
        assert record.created_by_grant is not None
        # Ended without stop_on_revoke: the service keeps running until it crashes.
        await uow.grants.set_state(
            record.created_by_grant, GrantState.REVOKED, pair.grantor.clock()
        )
        await uow.commit()
    runtime.replicas[0].crash()

    async def is_failed() -> bool:
        return await state() is ServiceState.FAILED

    await _until(is_failed)
    async with pair.grantor.uow_factory() as uow:
        record = await uow.services.get(created["id"])
    assert record is not None
    assert record.desired is DesiredState.RUNNING
    assert "its grant is no longer active" in (record.error or "")
    assert len(runtime.replicas) == 1


async def test_after_ficc_restarts_a_service_of_an_ended_grant_stays_stopped_saying_why(
    pair: Pair,
) -> None:
    peer_id, spec, runtime = await _peer(pair)
    kept = await _request(pair, peer_id, "inference.create", {"spec": spec})
    await _request(
        pair,
        peer_id,
        "inference.control",
        {"service": kept["id"], "revision": kept["revision"], "operation": "start"},
    )

    async def is_running() -> bool:
        async with pair.grantor.uow_factory() as uow:
            record = await uow.services.get(kept["id"])
        return record is not None and record.state is ServiceState.RUNNING

    await _until(is_running)
    await pair.grantor.inference.close()
    async with pair.grantor.uow_factory() as uow:
        record = await uow.services.get(kept["id"])
        assert record is not None
        assert record.created_by_grant is not None
        await uow.grants.set_state(
            record.created_by_grant, GrantState.REVOKED, pair.grantor.clock()
        )
        await uow.commit()
    await pair.grantor.inference.recover()
    async with pair.grantor.uow_factory() as uow:
        record = await uow.services.get(kept["id"])
    assert record is not None
    assert (record.state, record.desired) == (ServiceState.STOPPED, DesiredState.RUNNING)
    assert "grant that created service" in (record.error or "")
    assert len(runtime.replicas) == 1
