"""The local node on the fake unit of work: what a probe finds is what the node records, under
the name it is given and the ID it was first given."""

from __future__ import annotations

from datetime import UTC, datetime

from tests.support.fakes.unit_of_work import FakeUnitOfWorkFactory

from ficc.base.units import GiB
from ficc.domain.nodes import Capacity, Gpu
from ficc.services.nodes import Nodes

NOW = datetime(2026, 1, 1, tzinfo=UTC)
H200 = Gpu(index=0, name="NVIDIA H200", memory_bytes=140 * GiB, memory_used_bytes=2 * GiB)


async def test_the_local_node_records_what_the_probe_found_under_its_first_id() -> None:
    storage = FakeUnitOfWorkFactory()
    nodes = Nodes(storage, lambda: NOW)
    first = Capacity(cpu_count=8, memory_bytes=64 * GiB, memory_available_bytes=60 * GiB, gpus=())
    later = Capacity(cpu_count=8, memory_bytes=64 * GiB, memory_available_bytes=7, gpus=(H200,))
    answers = [first, later]

    async def probe() -> Capacity:
        return answers.pop(0)

    registered = await nodes.register_local_node(probe, "node_first", name="box")
    refreshed = await nodes.register_local_node(probe, "node_other", name="box-renamed")

    assert (registered.id, registered.name, registered.is_local) == ("node_first", "box", True)
    assert (refreshed.id, refreshed.name) == ("node_first", "box-renamed")
    assert (
        refreshed.cpu_count,
        refreshed.memory_bytes,
        refreshed.memory_available_bytes,
        refreshed.gpus,
    ) == (later.cpu_count, later.memory_bytes, 7, (H200,))
    assert await nodes.list_nodes() == [refreshed]
