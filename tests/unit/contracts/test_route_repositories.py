"""The routes repository's contract, on the fake unit of work, SQLite and PostgreSQL."""

from __future__ import annotations

import secrets
from datetime import timedelta

import pytest
from tests.support.fakes.clock import FakeClock

from ficc.base.ids import new_id
from ficc.domain.routes import Route, parse_route_spec
from ficc.services.ports import UnitOfWorkFactory

CLOCK = FakeClock()


def a_route(name: str = "chat", project: str = "default") -> Route:
    spec = parse_route_spec(
        {
            "name": name,
            "policy": "least-busy",
            "targets": [
                {"service": new_id("service", secrets.token_bytes(16)), "max_in_flight": 2},
                {
                    "peer": new_id("peer", secrets.token_bytes(16)),
                    "service": new_id("service", secrets.token_bytes(16)),
                    "weight": 3,
                },
            ],
        }
    )
    return Route(new_id("route", secrets.token_bytes(16)), project, spec, CLOCK(), CLOCK())


async def _projects(uow_factory: UnitOfWorkFactory, *names: str) -> None:
    async with uow_factory() as uow:
        for name in names:
            if not await uow.projects.exists(name):
                await uow.projects.add(name, CLOCK())
        await uow.commit()


async def test_routes_round_trip_by_id_and_name_and_list_by_project_in_name_order(
    uow_factory: UnitOfWorkFactory,
) -> None:
    await _projects(uow_factory, "default", "other")
    second, first, theirs = a_route("zeta"), a_route("alpha"), a_route("alpha", "other")
    async with uow_factory() as uow:
        for route in (second, first, theirs):
            await uow.routes.add(route)
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.routes.get(first.id) == first
        assert await uow.routes.by_name("default", "alpha") == first
        assert await uow.routes.by_name("other", "alpha") == theirs
        assert await uow.routes.by_name("default", "missing") is None
        assert [r.id for r in await uow.routes.list("default")] == [first.id, second.id]


async def test_a_replaced_route_keeps_its_id_and_a_deleted_one_is_gone(
    uow_factory: UnitOfWorkFactory,
) -> None:
    await _projects(uow_factory, "default")
    route = a_route()
    async with uow_factory() as uow:
        await uow.routes.add(route)
        await uow.commit()
    changed = route.replaced(
        parse_route_spec({**route.spec.to_json(), "name": "renamed", "policy": "priority"}),
        CLOCK() + timedelta(seconds=5),
    )
    async with uow_factory() as uow:
        await uow.routes.update(changed)
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.routes.get(route.id) == changed
        await uow.routes.delete(route.id)
    async with uow_factory() as uow:
        assert await uow.routes.get(route.id) == changed  # not committed: kept
        await uow.routes.delete(route.id)
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.routes.get(route.id) is None
        assert await uow.routes.list("default") == []


async def test_a_route_name_is_unique_within_its_project(uow_factory: UnitOfWorkFactory) -> None:
    await _projects(uow_factory, "default")
    async with uow_factory() as uow:
        await uow.routes.add(a_route("same"))
        await uow.commit()

    async def again() -> None:
        async with uow_factory() as uow:
            await uow.routes.add(a_route("same"))
            await uow.commit()

    with pytest.raises(Exception):  # noqa: B017, PT011  (each back end's integrity error)
        await again()
    async with uow_factory() as uow:
        assert [r.name for r in await uow.routes.list("default")] == ["same"]
