"""Projects: the unit that owns services, models, peers, grants and transfers."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from ficc.base.errors import Conflict, NotFound
from ficc.base.ids import parse_project_name
from ficc.domain.principals import Principal
from ficc.services import audit
from ficc.services.ports import Clock, UnitOfWorkFactory


@dataclass(frozen=True, eq=False)
class Projects:
    """Listing and creating projects, and the rule every request passes: the project it names
    exists and the caller is admitted to it."""

    uow_factory: UnitOfWorkFactory
    clock: Clock
    _known: set[str] = field(default_factory=set, init=False, repr=False)
    """Names found to exist: projects are never deleted, so a name found once needs no read
    again. Bounded by the projects that exist."""

    async def list_projects(self, principal: Principal) -> list[tuple[str, datetime]]:
        """The projects this credential is admitted to."""
        async with self.uow_factory() as uow:
            projects = await uow.projects.list()
        return [(name, at) for name, at in projects if principal.admitted_to(name)]

    async def create_project(self, principal: Principal, name: object) -> tuple[str, datetime]:
        project = parse_project_name(name, field="name")
        async with self.uow_factory() as uow:
            if await uow.projects.exists(project):
                raise Conflict(
                    f"a project named {project} exists already", details={"name": project}
                )
            now = self.clock()
            await uow.projects.add(project, now)
            await audit.record_by(
                uow, self.clock, principal, "project.created", project=project, target=project
            )
            await uow.commit()
        return project, now

    async def admitted(self, principal: Principal, name: object) -> str:
        """The project ``name`` names, once the caller is admitted to it and it exists; a
        refusal names the field ``project``."""
        project = parse_project_name(name, field="project")
        principal.require_project(project)
        if project in self._known:
            return project
        async with self.uow_factory() as uow:
            if not await uow.projects.exists(project):
                raise NotFound(f"no project {project}", details={"project": project})
        self._known.add(project)
        return project
