"""The record caps of a grant, in process over real SQLite: every record a grant ever created
counts, and the capacity an uncertain creation holds is released by inspecting it."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from tests.support.isolation import (
    PeerOf,
    add_node,
    give_grant,
    grantor,
    paired_peer,
    record_model,
    refusal,
    serve,
    stored_grant,
)

from ficc.base.errors import LimitExceeded
from ficc.bootstrap import Cluster, lifecycle
from ficc.domain import grants as g
from ficc.services import mutations
from ficc.services.mutations import MutationKey


def manifest(index: int) -> dict[str, Any]:
    return {
        "name": f"m{index}",
        "format": "gguf",
        "files": [{"path": "w.gguf", "size": 64, "sha256": f"{index:064x}"}],
        "metadata": {},
    }


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    opened = await grantor(tmp_path)
    try:
        yield opened
    finally:
        await lifecycle.close(opened)


async def create(cluster: Cluster, peer: PeerOf, grant: g.Grant, index: int) -> dict[str, Any]:
    body = {"manifest": manifest(index)}
    return await serve(cluster, peer, grant.id, "models.create", body, secrets.token_hex(16))


async def model_ids(cluster: Cluster) -> list[str]:
    async with cluster.uow_factory() as uow:
        return sorted(m.id for m in await uow.models.list("default"))


async def test_a_removed_record_still_counts_against_the_grants_cap(cluster: Cluster) -> None:
    peer = await paired_peer(cluster)
    grant = await give_grant(cluster, peer)
    created = [
        (await create(cluster, peer, grant, index))["result"]["id"]
        for index in range(g.MAX_CREATED_MODELS)
    ]
    removed = await serve(
        cluster, peer, grant.id, "models.remove", {"model": created[0]}, secrets.token_hex(16)
    )
    assert removed["result"] == {"id": created[0], "removed": True}
    before = await model_ids(cluster)
    error = await refusal(create(cluster, peer, grant, 99))
    assert isinstance(error, LimitExceeded)
    assert error.details == {"limit": "created_models", "allowed": g.MAX_CREATED_MODELS}
    assert await model_ids(cluster) == before == sorted(created[1:])


async def test_the_sixty_fifth_service_creation_is_refused_and_removing_one_makes_no_room(
    cluster: Cluster,
) -> None:
    node = await add_node(cluster)
    model = await record_model(cluster, "default", [64], owned=True)
    peer = await paired_peer(cluster)
    grant = await give_grant(cluster, peer, models=[model.id], nodes=[node.id])

    async def create_service(name: str, mutation_id: str) -> dict[str, Any]:
        spec = {"name": name, "model": model.id, "runtime": "llama.cpp"}
        return await serve(cluster, peer, grant.id, "inference.create", {"spec": spec}, mutation_id)

    created = [
        (await create_service(f"s{index}", secrets.token_hex(16)))["result"]["id"]
        for index in range(g.MAX_CREATED_SERVICES)
    ]
    assert len(set(created)) == g.MAX_CREATED_SERVICES == 64
    refused_id = secrets.token_hex(16)
    error = await refusal(create_service("s64", refused_id))
    assert isinstance(error, LimitExceeded)
    assert error.details == {"limit": "created_services", "allowed": g.MAX_CREATED_SERVICES}
    assert sorted((await stored_grant(cluster, grant.id)).created_services) == sorted(created)
    # The refusal is certain, so it keeps no capacity; but the cap counts every record the
    # grant ever created, so removing one makes no room.
    status = await serve(cluster, peer, grant.id, "operation.status", {"id": refused_id})
    assert status["result"]["state"] == "refused"
    remove = {"service": created[0], "revision": 1, "operation": "remove"}
    await serve(cluster, peer, grant.id, "inference.control", remove, secrets.token_hex(16))
    again = await refusal(create_service("s65", secrets.token_hex(16)))
    assert isinstance(again, LimitExceeded)
    assert again.details["limit"] == "created_services"


async def test_inspecting_an_uncertain_creation_releases_the_capacity_it_held(
    cluster: Cluster,
) -> None:
    peer = await paired_peer(cluster)
    grant = await give_grant(cluster, peer)
    for index in range(g.MAX_CREATED_MODELS - 1):
        await create(cluster, peer, grant, index)
    # A creation whose first try was cut off before its effect: uncertain, and it counts.
    lost = secrets.token_hex(16)
    key = MutationKey.grant(grant.id, lost, "models.create", {"manifest": manifest(500)})
    async with cluster.uow_factory() as uow:
        await (await mutations.begin(uow, key)).mark_uncertain(grant.created_at)
        await uow.commit()
    before = await model_ids(cluster)
    assert isinstance(await refusal(create(cluster, peer, grant, 600)), LimitExceeded)
    assert await model_ids(cluster) == before
    status = await serve(cluster, peer, grant.id, "operation.status", {"id": lost})
    assert status["result"]["state"] == "not_applied"
    assert status["result"]["result"] is None
    assert "retry" in status["result"]["advice"]
    made = await create(cluster, peer, grant, 700)
    assert await model_ids(cluster) == sorted([*before, made["result"]["id"]])
    # The grant is full again, so the retry of the lost mutation is refused by the cap, and
    # nothing is made.
    retry = await refusal(
        serve(cluster, peer, grant.id, "models.create", {"manifest": manifest(500)}, lost)
    )
    assert isinstance(retry, LimitExceeded)
    assert len(await model_ids(cluster)) == g.MAX_CREATED_MODELS


async def test_a_mutation_found_not_applied_is_applied_once_by_its_retry(
    cluster: Cluster,
) -> None:
    peer = await paired_peer(cluster)
    grant = await give_grant(cluster, peer)
    lost = secrets.token_hex(16)
    body = {"manifest": manifest(1)}
    key = MutationKey.grant(grant.id, lost, "models.create", body)
    async with cluster.uow_factory() as uow:
        await (await mutations.begin(uow, key)).mark_uncertain(grant.created_at)
        await uow.commit()
    status = await serve(cluster, peer, grant.id, "operation.status", {"id": lost})
    assert status["result"]["state"] == "not_applied"
    first = await serve(cluster, peer, grant.id, "models.create", body, lost)
    again = await serve(cluster, peer, grant.id, "models.create", body, lost)
    assert (first["replayed"], again["replayed"]) == (False, True)
    assert again["result"] == first["result"]
    assert await model_ids(cluster) == [first["result"]["id"]]
    done = await serve(cluster, peer, grant.id, "operation.status", {"id": lost})
    assert (done["result"]["state"], done["result"]["advice"]) == ("completed", None)


async def test_a_granted_model_a_peer_removes_takes_its_unused_blobs_with_it(
    cluster: Cluster,
) -> None:
    peer = await paired_peer(cluster)
    model = await record_model(cluster, "default", [64], owned=True)
    kept = await record_model(cluster, "default", [64], owned=True)
    grant = await give_grant(cluster, peer, models=[model.id, kept.id])
    [digest] = model.blob_digests()
    assert cluster.blobs.has(digest)
    removed = await serve(
        cluster, peer, grant.id, "models.remove", {"model": model.id}, secrets.token_hex(16)
    )
    assert removed["result"] == {"id": model.id, "removed": True}
    assert not cluster.blobs.has(digest)
    # Another model's blob stays, and so does that model.
    assert all(cluster.blobs.has(other) for other in kept.blob_digests())
    assert await model_ids(cluster) == [kept.id]
