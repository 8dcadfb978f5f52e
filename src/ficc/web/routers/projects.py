"""Projects: list those the caller is admitted to; create one."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from ficc.web.auth import Context, scoped
from ficc.web.schemas import ProjectCreate
from ficc.web.schemas_responses import Project, ProjectList, answer

router = APIRouter()


@router.get("/api/v1/projects", responses=answer(ProjectList))
async def list_projects(ctx: Context = scoped()) -> Any:
    found = await ctx.cluster.projects.list_projects(ctx.principal)
    return {"projects": [{"name": name, "created_at": at} for name, at in found]}


@router.post("/api/v1/projects", status_code=201, responses=answer(Project, 201))
async def create_project(body: ProjectCreate, ctx: Context = scoped("projects:manage")) -> Any:
    name, at = await ctx.cluster.projects.create_project(ctx.principal, body.name)
    return {"name": name, "created_at": at}
