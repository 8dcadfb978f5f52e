"""Managed inference services: create, read, replace, control, and the admission preview."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body, Header, Response

from ficc.base.ids import parse_mutation_id
from ficc.services.inference import Actor
from ficc.services.mutations import MutationKey
from ficc.web.auth import Context, scoped
from ficc.web.presenters.services import render_service, render_services
from ficc.web.schemas import PreviewRequest, ServiceControl, ServiceReplace
from ficc.web.schemas_responses import OpenObject, Service, ServiceList, answer

router = APIRouter()

IDEMPOTENCY_HEADER = "Idempotency-Key"


def _actor(ctx: Context) -> Actor:
    credential = ctx.principal.token_id or ctx.principal.session_id or ctx.principal.via
    return Actor(name=f"{ctx.principal.username}:{credential}")


def _key(ctx: Context, header: str | None, operation: str, arguments: Any) -> MutationKey | None:
    if header is None:
        return None
    mutation_id = parse_mutation_id(header, field=IDEMPOTENCY_HEADER)
    return MutationKey.local(ctx.project, mutation_id, operation, arguments)


def _answer(response: Response, result: tuple[dict[str, Any], bool]) -> dict[str, Any]:
    body, replayed = result
    if replayed:
        response.headers["Idempotent-Replayed"] = "true"
    return body


@router.get("/api/v1/inference/services", responses=answer(ServiceList))
async def list_services(ctx: Context = scoped("inference:read")) -> Any:
    return {
        "services": render_services(await ctx.cluster.inference.commands.list_services(ctx.project))
    }


@router.post("/api/v1/inference/services", status_code=201, responses=answer(Service, 201))
async def create_service(
    response: Response,
    spec: dict[str, Any] = Body(...),
    idempotency_key: str | None = Header(None, alias=IDEMPOTENCY_HEADER),
    ctx: Context = scoped("inference:manage"),
) -> Any:
    key = _key(ctx, idempotency_key, "inference.create", {"spec": spec})
    result = await ctx.cluster.inference.commands.create_service(
        _actor(ctx), ctx.project, spec, key=key
    )
    return _answer(response, result)


@router.get("/api/v1/inference/services/{service_id}", responses=answer(Service))
async def get_service(service_id: str, ctx: Context = scoped("inference:read")) -> Any:
    return render_service(await ctx.cluster.inference.commands.get_service(ctx.project, service_id))


@router.put("/api/v1/inference/services/{service_id}", responses=answer(Service))
async def replace_service(
    service_id: str,
    body: ServiceReplace,
    response: Response,
    idempotency_key: str | None = Header(None, alias=IDEMPOTENCY_HEADER),
    ctx: Context = scoped("inference:manage"),
) -> Any:
    arguments = {"service": service_id, **body.model_dump()}
    key = _key(ctx, idempotency_key, "inference.replace", arguments)
    result = await ctx.cluster.inference.commands.replace_service(
        _actor(ctx), ctx.project, service_id, revision=body.revision, spec_data=body.spec, key=key
    )
    return _answer(response, result)


@router.post("/api/v1/inference/services/{service_id}/control", responses=answer(Service))
async def control_service(
    service_id: str,
    body: ServiceControl,
    response: Response,
    idempotency_key: str | None = Header(None, alias=IDEMPOTENCY_HEADER),
    ctx: Context = scoped("inference:manage"),
) -> Any:
    arguments = {"service": service_id, **body.model_dump()}
    key = _key(ctx, idempotency_key, "inference.control", arguments)
    result = await ctx.cluster.inference.commands.control_service(
        _actor(ctx),
        ctx.project,
        service_id,
        revision=body.revision,
        operation=body.operation,
        acknowledge_unknown=body.acknowledge_unknown,
        key=key,
    )
    return _answer(response, result)


@router.post("/api/v1/inference/preview", responses=answer(OpenObject))
async def preview(body: PreviewRequest, ctx: Context = scoped("inference:manage")) -> Any:
    return await ctx.cluster.inference.admission.preview(ctx.project, body.spec)
