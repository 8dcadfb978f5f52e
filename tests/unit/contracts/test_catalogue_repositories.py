"""Projects, the audit log, settings, nodes and the catalogue behave alike in the fake and in
SQL: what a blob's project set holds, when a blob is in use, JSON values as JSON."""

from __future__ import annotations

from dataclasses import replace

import pytest
from tests.unit.contracts.records import (
    DUPLICATE,
    NOW,
    at,
    committed,
    digest,
    fresh,
    model,
    project,
)

from ficc.domain.audit import AuditEntry
from ficc.domain.inference import ServiceState, parse_service_spec
from ficc.domain.nodes import Gpu, Node
from ficc.domain.service_records import ServiceRecord
from ficc.services.ports import UnitOfWorkFactory


async def test_projects_list_by_name_and_a_name_is_taken_once(
    uow_factory: UnitOfWorkFactory,
) -> None:
    async with uow_factory() as uow:
        await uow.projects.add("zeta", NOW)
        await uow.projects.add("alpha", at(1))
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.projects.list() == [("alpha", at(1)), ("zeta", NOW)]
        assert await uow.projects.exists("alpha")
        assert not await uow.projects.exists("beta")
    with pytest.raises(DUPLICATE):
        await committed(uow_factory, lambda uow: uow.projects.add("zeta", NOW))


async def test_the_audit_log_numbers_entries_and_filters_by_project(
    uow_factory: UnitOfWorkFactory,
) -> None:
    def entry(project_name: str | None) -> AuditEntry:
        return AuditEntry("a.b", "tester", project_name, None, NOW, details={"k": (1, 2)})

    async with uow_factory() as uow:
        seqs = [await uow.audit.append(entry(p)) for p in ("one", None, "two", "one")]
        await uow.commit()
    assert seqs == sorted(seqs)
    assert len(set(seqs)) == 4
    async with uow_factory() as uow:
        everything = await uow.audit.list(project=None, after_seq=0, limit=10)
        assert [e.seq for e in everything] == seqs
        assert everything[0].details == {"k": [1, 2]}
        with_wide = await uow.audit.list(project="one", after_seq=0, limit=10)
        assert [e.seq for e in with_wide] == [seqs[0], seqs[1], seqs[3]]
        own = await uow.audit.list(project="one", after_seq=seqs[0], limit=10, cluster_wide=False)
        assert [e.seq for e in own] == [seqs[3]]
        assert [e.seq for e in await uow.audit.list(project=None, after_seq=0, limit=2)] == seqs[:2]


async def test_settings_keep_json_and_a_put_replaces(uow_factory: UnitOfWorkFactory) -> None:
    async with uow_factory() as uow:
        await uow.settings.put("k", {"list": (1, 2), "text": "é"})
        await uow.settings.lock("k")
        await uow.settings.lock("absent")
        await uow.commit()
    async with uow_factory() as uow:
        stored = await uow.settings.get("k")
        assert stored == {"list": [1, 2], "text": "é"}
        stored["list"].append(3)
        assert await uow.settings.get("k") == {"list": [1, 2], "text": "é"}
        await uow.settings.put("k", 7)
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.settings.get("k") == 7
        assert await uow.settings.get("absent") is None


async def test_nodes_upsert_and_list_by_name(uow_factory: UnitOfWorkFactory) -> None:
    gpu = Gpu(index=0, name="H200", memory_bytes=2**37, memory_used_bytes=0)
    b = Node(fresh("node"), "b", 8, 2**34, 2**33, (gpu,), True, NOW, labels=(("zone", "x"),))
    a = Node(fresh("node"), "a", 4, 2**33, 2**32, (), False, NOW)
    async with uow_factory() as uow:
        await uow.nodes.upsert(b)
        await uow.nodes.upsert(a)
        await uow.commit()
    moved = replace(b, memory_available_bytes=1, available=False, unavailable_reason="gone")
    async with uow_factory() as uow:
        await uow.nodes.upsert(moved)
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.nodes.list() == [a, moved]
        assert await uow.nodes.get(b.id) == moved
        assert await uow.nodes.get(fresh("node")) is None


async def test_a_blob_is_in_use_while_a_model_names_it_and_released_when_none_of_its_own_does(
    uow_factory: UnitOfWorkFactory,
) -> None:
    kept, shared, dropped = digest(), digest(), digest()
    async with uow_factory() as uow:
        await project(uow)
        mine = model("default", [kept, shared])
        peers = model("default", [dropped], by_grant=fresh("grant"))
        await uow.models.add(mine)
        await uow.models.add(peers)
        await uow.models.own_blobs("default", [kept, shared, dropped])
        await uow.models.own_blobs("default", [kept])
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.models.list("default") == sorted(
            [mine, peers], key=lambda m: (m.created_at, m.id)
        )
        assert await uow.models.owns_blobs("default", [kept, shared, dropped])
        assert not await uow.models.owns_blobs("other", [kept])
        assert await uow.models.blob_in_use(dropped)
        assert not await uow.models.blob_in_use(digest())
        # A record a peer created never keeps a blob in the set.
        await uow.models.release_blobs("default", [kept, dropped])
        assert await uow.models.owns_blobs("default", [kept, shared])
        assert not await uow.models.owns_blobs("default", [dropped])
        await uow.models.delete(mine.id)
        await uow.models.release_blobs("default", [kept])
        assert not await uow.models.owns_blobs("default", [kept])
        assert await uow.models.get(mine.id) is None
        await uow.commit()
    with pytest.raises(DUPLICATE):
        await committed(uow_factory, lambda uow: uow.models.add(peers))


async def test_a_model_is_used_by_the_services_that_name_it(
    uow_factory: UnitOfWorkFactory,
) -> None:
    async with uow_factory() as uow:
        await project(uow)
        used = model("default", [digest()])
        await uow.models.add(used)
        service = ServiceRecord(
            id=fresh("service"),
            project="default",
            spec=parse_service_spec({"name": "s", "model": used.id, "runtime": "llama.cpp"}),
            node=fresh("node"),
            state=ServiceState.STOPPED,
            revision=1,
            error=None,
            created_by_grant=None,
            created_at=NOW,
            updated_at=NOW,
        )
        await uow.services.add(service)
        await uow.commit()
    async with uow_factory() as uow:
        assert list(await uow.model_usage.users_of_model(used.id)) == [service.id]
        assert list(await uow.model_usage.users_of_model(fresh("model"))) == []
