"""What a process answers by its role: the standby serves /livez, answers /readyz 503 with
``"role": "standby"`` and every other route 503 ``standby``; the holder of the lease, once
started, answers as the active one; without a lease (SQLite) a process is always active."""

from __future__ import annotations

from pathlib import Path

import httpx
from tests.support.fakes.cluster import fake_cluster
from tests.support.fakes.unit_of_work import FakeUnitOfWorkFactory

from ficc.bootstrap import Cluster
from ficc.services.lease import LeaseKeeper
from ficc.web.app import create_app


def client(cluster: Cluster) -> httpx.AsyncClient:
    token = cluster.state.owner_token.read_text().strip()
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_app(cluster)),
        base_url="http://127.0.0.1:8470",
        headers={"Authorization": f"Bearer {token}"},
    )


async def with_lease(tmp_path: Path) -> Cluster:
    cluster = await fake_cluster(tmp_path)
    storage = cluster.uow_factory
    assert isinstance(storage, FakeUnitOfWorkFactory)
    # The keeper's own transactions are unguarded, as open_cluster wires them.
    cluster.lease = LeaseKeeper(FakeUnitOfWorkFactory(storage.store), cluster.clock, "this", 10)
    storage.guard = cluster.lease
    return cluster


async def test_a_standby_serves_health_only(tmp_path: Path) -> None:
    cluster = await with_lease(tmp_path)
    storage = cluster.uow_factory
    assert isinstance(storage, FakeUnitOfWorkFactory)
    other = LeaseKeeper(FakeUnitOfWorkFactory(storage.store), cluster.clock, "other", 10)
    assert await other.try_acquire()
    assert cluster.lease is not None
    assert not await cluster.lease.try_acquire()
    async with client(cluster) as api:
        live = await api.get("/livez")
        ready = await api.get("/readyz")
        refused = await api.get("/api/v1/inference/services")
        posted = await api.post("/api/v1/inference/services", json={"name": "x"})
    assert (live.status_code, live.json()) == (200, {"status": "ok"})
    assert ready.status_code == 503
    assert (ready.json()["role"], ready.json()["checks"]["lease"]) == ("standby", "waiting")
    for answer in (refused, posted):
        assert answer.status_code == 503
        assert answer.json()["error"]["code"] == "standby"
        assert answer.headers["Retry-After"] == "1"


async def test_the_holder_is_active_once_started_and_a_lone_sqlite_process_always(
    tmp_path: Path,
) -> None:
    cluster = await with_lease(tmp_path / "leased")
    assert cluster.lease is not None
    assert await cluster.lease.try_acquire()
    async with client(cluster) as api:
        starting = await api.get("/readyz")
        cluster.serving = True  # what lifecycle.start sets last
        ready = await api.get("/readyz")
        listed = await api.get("/api/v1/inference/services")
    assert (starting.status_code, starting.json()["role"]) == (503, "standby")
    assert (ready.status_code, ready.json()["role"]) == (200, "active")
    assert ready.json()["checks"]["lease"] == "held"
    assert listed.status_code == 200
    alone = await fake_cluster(tmp_path / "alone")
    async with client(alone) as api:
        answer = await api.get("/readyz")
    assert (answer.status_code, answer.json()["role"]) == (200, "active")
