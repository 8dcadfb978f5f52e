"""The repositories the inference services use behave alike in the fake and in SQL.

The back ends come from ``conftest.py`` (the fake and a SQLite file) and from the storage tier
(PostgreSQL).
"""

from __future__ import annotations

import secrets
from dataclasses import replace
from datetime import timedelta

from tests.support.fakes.clock import FakeClock

from ficc.base.ids import new_id
from ficc.domain.inference import AttemptState, DesiredState, ServiceState, parse_service_spec
from ficc.domain.mutations import MutationReceipt
from ficc.domain.nodes import Node
from ficc.domain.service_records import AttemptRecord, ServiceRecord
from ficc.services.ports import UnitOfWorkFactory

CLOCK = FakeClock()


async def a_service(uow_factory: UnitOfWorkFactory, project: str = "default") -> ServiceRecord:
    node = Node(new_id("node", secrets.token_bytes(16)), "n", 4, 1, 1, (), True, CLOCK())
    service = ServiceRecord(
        id=new_id("service", secrets.token_bytes(16)),
        project=project,
        spec=parse_service_spec(
            {"name": "s", "model": new_id("model", secrets.token_bytes(16)), "runtime": "llama.cpp"}
        ),
        node=node.id,
        state=ServiceState.STOPPED,
        revision=1,
        error=None,
        created_by_grant=None,
        created_at=CLOCK(),
        updated_at=CLOCK(),
    )
    async with uow_factory() as uow:
        if not await uow.projects.exists(project):
            await uow.projects.add(project, CLOCK())
        await uow.nodes.upsert(node)
        await uow.services.add(service)
        await uow.commit()
    return service


async def test_what_is_not_committed_is_not_kept(uow_factory: UnitOfWorkFactory) -> None:
    service = await a_service(uow_factory)
    async with uow_factory() as uow:
        await uow.services.update(replace(service, state=ServiceState.STARTING))
    async with uow_factory() as uow:
        assert await uow.services.get(service.id) == service


async def test_services_round_trip_and_list_by_project(uow_factory: UnitOfWorkFactory) -> None:
    mine = await a_service(uow_factory)
    CLOCK.advance(1)
    theirs = await a_service(uow_factory, project="other")
    changed = replace(mine, state=ServiceState.FAILED, error="boom", revision=2)
    async with uow_factory() as uow:
        await uow.services.update(changed)
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.services.get(mine.id) == changed
        assert [s.id for s in await uow.services.list("default")] == [mine.id]
        assert {s.id for s in await uow.services.list_all()} >= {mine.id, theirs.id}
        await uow.services.delete(mine.id)
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.services.get(mine.id) is None


async def test_a_service_keeps_its_desired_state_and_restart_policy(
    uow_factory: UnitOfWorkFactory,
) -> None:
    service = await a_service(uow_factory)
    assert service.desired is DesiredState.STOPPED
    spec = parse_service_spec({**service.spec.to_json(), "restart": "always"})
    changed = replace(service, spec=spec, state=ServiceState.RUNNING, desired=DesiredState.RUNNING)
    async with uow_factory() as uow:
        await uow.services.update(changed)
        await uow.commit()
    async with uow_factory() as uow:
        stored = await uow.services.get(service.id)
    assert stored == changed
    assert stored.desired is DesiredState.RUNNING
    assert stored.spec.restart.value == "always"


async def test_one_attempt_is_deleted_alone(uow_factory: UnitOfWorkFactory) -> None:
    service = await a_service(uow_factory)
    kept, gone = (
        AttemptRecord(
            new_id("attempt", secrets.token_bytes(16)),
            service.id,
            0,
            AttemptState.STOPPED,
            "x",
            CLOCK() + timedelta(seconds=index),
        )
        for index in range(2)
    )
    async with uow_factory() as uow:
        await uow.attempts.add(kept)
        await uow.attempts.add(gone)
        await uow.commit()
    async with uow_factory() as uow:
        await uow.attempts.delete(gone.id)
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.attempts.for_service(service.id) == [kept]


async def test_attempts_are_kept_in_order_and_deleted_with_their_service(
    uow_factory: UnitOfWorkFactory,
) -> None:
    service = await a_service(uow_factory)
    attempts = [
        AttemptRecord(
            id=new_id("attempt", secrets.token_bytes(16)),
            service_id=service.id,
            replica=index,
            state=AttemptState.PENDING,
            serve_instance="x",
            created_at=CLOCK() + timedelta(seconds=index),
        )
        for index in range(3)
    ]
    async with uow_factory() as uow:
        for attempt in reversed(attempts):
            await uow.attempts.add(attempt)
        launched = replace(attempts[0], state=AttemptState.LAUNCHED, pid=42, port=8080)
        await uow.attempts.update(launched)
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.attempts.for_service(service.id) == [launched, *attempts[1:]]
        await uow.attempts.delete_for_service(service.id)
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.attempts.for_service(service.id) == []


async def test_receipts_are_kept_per_scope_and_counted_by_state(
    uow_factory: UnitOfWorkFactory,
) -> None:
    def receipt(scope: str, state: str) -> MutationReceipt:
        return MutationReceipt(
            scope, secrets.token_hex(16), "inference.create", "0" * 64, state, None, CLOCK()
        )

    kept = [receipt("local:a", "uncertain"), receipt("local:a", "completed")]
    other = receipt("local:b", "uncertain")
    async with uow_factory() as uow:
        for r in (*kept, other):
            await uow.receipts.put(r)
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.receipts.get("local:a", kept[0].mutation_id) == kept[0]
        assert await uow.receipts.count("local:a", "inference.create", "uncertain") == 1
        await uow.receipts.delete_scope("local:a")
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.receipts.get("local:a", kept[1].mutation_id) is None
        assert await uow.receipts.get("local:b", other.mutation_id) == other
