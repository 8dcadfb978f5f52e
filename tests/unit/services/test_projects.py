"""The rule every request passes before its handler runs: the project it names is valid, the
caller is admitted to it, and it exists. Over the fake unit of work, which counts nothing but
what is stored, so a name found once is shown to need no second read by deleting its row."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest
from tests.support.fakes.clock import FakeClock
from tests.support.fakes.unit_of_work import FakeStore, FakeUnitOfWorkFactory

from ficc.base.errors import InvalidInput, NotFound, PermissionDenied
from ficc.domain.principals import ALL_PROJECTS, Principal
from ficc.services.projects import Projects

NOW = datetime(2026, 1, 1, tzinfo=UTC)
OWNER = Principal(
    user_id="user_1",
    username="owner",
    scopes=frozenset({"projects:manage"}),
    projects=frozenset({ALL_PROJECTS}),
    is_owner=True,
    via="socket",
)


def _projects(store: FakeStore) -> Projects:
    return Projects(FakeUnitOfWorkFactory(store), FakeClock(NOW))


async def test_a_project_is_admitted_once_it_exists_and_the_caller_may_use_it() -> None:
    projects = _projects(FakeStore())
    await projects.create_project(OWNER, "red")
    assert await projects.admitted(OWNER, "red") == "red"
    with pytest.raises(NotFound) as unknown:
        await projects.admitted(OWNER, "blue")
    assert (unknown.value.message, unknown.value.details) == (
        "no project blue",
        {"project": "blue"},
    )
    only_blue = replace(OWNER, projects=frozenset({"blue"}), is_owner=False)
    with pytest.raises(PermissionDenied):
        await projects.admitted(only_blue, "red")
    with pytest.raises(InvalidInput) as invalid:
        await projects.admitted(OWNER, "Not a name")
    assert invalid.value.details["field"] == "project"


async def test_a_project_found_once_is_not_read_again() -> None:
    """Projects are never deleted: the service keeps the names it found (and the caller's
    admission is still checked every time)."""
    store = FakeStore()
    projects = _projects(store)
    await projects.create_project(OWNER, "red")
    assert await projects.admitted(OWNER, "red") == "red"
    store.projects.clear()
    assert await projects.admitted(OWNER, "red") == "red"
    with pytest.raises(PermissionDenied):
        await projects.admitted(replace(OWNER, projects=frozenset(), is_owner=False), "red")
    assert await _projects(store).list_projects(OWNER) == []
