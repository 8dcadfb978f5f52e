"""Projects: the unit that owns services, models, peers, grants and transfers."""

from __future__ import annotations

from datetime import datetime

from ficc.base.errors import Conflict
from ficc.base.ids import parse_project_name
from ficc.domain.principals import Principal
from ficc.services import audit
from ficc.services.ports import Clock, UnitOfWorkFactory


async def list_projects(
    uow_factory: UnitOfWorkFactory, principal: Principal
) -> list[tuple[str, datetime]]:
    """The projects this credential is admitted to."""
    async with uow_factory() as uow:
        projects = await uow.projects.list()
    return [(name, at) for name, at in projects if principal.admitted_to(name)]


async def create_project(
    uow_factory: UnitOfWorkFactory, clock: Clock, principal: Principal, name: object
) -> tuple[str, datetime]:
    project = parse_project_name(name, field="name")
    async with uow_factory() as uow:
        if await uow.projects.exists(project):
            raise Conflict(f"a project named {project} exists already", details={"name": project})
        now = clock()
        await uow.projects.add(project, now)
        await audit.record_by(
            uow, clock, principal, "project.created", project=project, target=project
        )
        await uow.commit()
    return project, now
