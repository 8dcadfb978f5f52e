"""Admission against fakes: what a preview promises is what a start enforces.

A refused start records nothing (no attempt, no state change, no revision) and launches
nothing.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import pytest
from tests.support.fakes.inference import PROJECT, Bench, FakeRuntime, bench

from ficc.base.errors import Conflict, InvalidInput, LimitExceeded
from ficc.base.units import GiB, MiB
from ficc.domain.inference import (
    ENGINE_OVERHEAD_BYTES,
    MAX_GRANT_RUNNING_SERVICES,
    ServiceState,
)


def unchanged(b: Bench, service_id: str, revision: int) -> None:
    service = b.service(service_id)
    assert (service.state, service.revision) == (ServiceState.STOPPED, revision)
    assert not [a for a in b.store.attempts.values() if a.service_id == service_id]


async def test_a_start_that_does_not_fit_in_memory_is_refused_as_its_preview_says(
    tmp_path: Path,
) -> None:
    b = bench(tmp_path)
    await b.add_node(memory_bytes=GiB)
    model = await b.add_model(GiB)  # the model alone takes the node's memory
    preview = await b.services.admission.preview(
        PROJECT, {"name": "big", "model": model.id, "runtime": "llama.cpp"}
    )
    assert not preview["fits"]
    assert preview["requirements"]["memory_bytes"] == GiB + ENGINE_OVERHEAD_BYTES
    service = await b.create(model)
    with pytest.raises(Conflict) as refused:
        await b.control(service["id"], "start")
    [resource] = refused.value.details["resources"]
    assert resource == {
        "resource": "memory_bytes",
        "needed": GiB + ENGINE_OVERHEAD_BYTES,
        "available": GiB,
    }
    unchanged(b, service["id"], 1)
    assert b.runtime.replicas == []


async def test_memory_committed_to_a_starting_service_is_not_counted_twice(
    tmp_path: Path,
) -> None:
    b = bench(tmp_path, runtime=FakeRuntime(healthy_at_once=False))
    await b.add_node(memory_bytes=2 * GiB)
    model = await b.add_model(GiB)
    first = await b.create(model)
    second = await b.create(model)
    await b.control(first["id"], "start")
    preview = await b.services.admission.preview(
        PROJECT, {"name": "x", "model": model.id, "runtime": "llama.cpp"}
    )
    assert not preview["fits"]
    with pytest.raises(Conflict):
        await b.control(second["id"], "start")
    unchanged(b, second["id"], 1)


async def test_two_concurrent_starts_cannot_both_take_the_same_free_memory(
    tmp_path: Path,
) -> None:
    b = bench(tmp_path, runtime=FakeRuntime(healthy_at_once=False))
    await b.add_node(memory_bytes=2 * GiB)
    model = await b.add_model(GiB)
    services = [await b.create(model) for _ in range(2)]
    results = await asyncio.gather(
        *(b.control(s["id"], "start") for s in services), return_exceptions=True
    )
    refused = [r for r in results if isinstance(r, Conflict)]
    assert len(refused) == 1, results
    starting = [s for s in services if b.service(s["id"]).state is ServiceState.STARTING]
    assert len(starting) == 1


async def test_a_grant_may_not_run_more_services_than_its_cap(tmp_path: Path) -> None:
    b = bench(tmp_path)
    await b.add_node(memory_bytes=64 * GiB, cpu_count=64)
    model = await b.add_model(MiB)
    ids = [(await b.create(model))["id"] for _ in range(MAX_GRANT_RUNNING_SERVICES + 1)]
    for service_id in ids:
        b.store.services[service_id] = replace(b.service(service_id), created_by_grant="grant_x")
    for service_id in ids[:-1]:
        await b.control(service_id, "start")
    with pytest.raises(LimitExceeded) as refused:
        await b.control(ids[-1], "start")
    assert refused.value.details == {
        "limit": "running_services",
        "allowed": MAX_GRANT_RUNNING_SERVICES,
    }
    unchanged(b, ids[-1], 1)


async def test_a_runtime_that_cannot_run_on_the_node_refuses_the_start_before_any_launch(
    tmp_path: Path,
) -> None:
    b = bench(tmp_path, runtime=FakeRuntime(unavailable=("no llama-server binary",)))
    await b.add_node()
    model = await b.add_model(MiB)
    preview = await b.services.admission.preview(
        PROJECT, {"name": "x", "model": model.id, "runtime": "llama.cpp"}
    )
    assert preview["reasons"] == ["no llama-server binary"]
    service = await b.create(model)
    with pytest.raises(Conflict) as refused:
        await b.control(service["id"], "start")
    assert refused.value.details["reasons"] == ["no llama-server binary"]
    unchanged(b, service["id"], 1)
    assert b.runtime.replicas == []


async def test_a_model_whose_file_is_missing_is_refused_at_start(tmp_path: Path) -> None:
    b = bench(tmp_path)
    await b.add_node()
    model = await b.add_model(MiB)
    service = await b.create(model)
    (tmp_path / model.id).unlink()
    with pytest.raises(Conflict) as refused:
        await b.control(service["id"], "start")
    assert refused.value.details == {"model": model.id, "reason": "files_missing"}
    unchanged(b, service["id"], 1)


async def test_a_runtime_this_cluster_has_not_installed_is_invalid_input_naming_it(
    tmp_path: Path,
) -> None:
    """It was ``Unavailable`` (502 ``peer_unreachable``): neither a peer nor an engine failed;
    the spec names a runtime this cluster lacks (the fake cluster has llama.cpp only)."""
    b = bench(tmp_path)
    await b.add_node()
    model = await b.add_model(MiB)
    with pytest.raises(InvalidInput) as refused:
        await b.services.admission.preview(
            PROJECT, {"name": "gpu", "model": model.id, "runtime": "vllm"}
        )
    error = refused.value
    assert (error.code, error.status) == ("runtime_not_installed", 400)
    assert error.details == {"field": "spec.runtime", "runtime": "vllm"}
