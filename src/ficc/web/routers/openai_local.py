"""The local OpenAI-compatible URL /api/v1/inference/v1: ``model`` is a local service ID."""

from __future__ import annotations

import contextlib
from typing import Any, Final

from fastapi import APIRouter, Request, Response

from ficc.base.errors import InvalidInput, NotFound
from ficc.domain.openai_answers import shape_answer
from ficc.domain.openai_requests import (
    CHAT_COMPLETIONS_PATH,
    COMPLETIONS_PATH,
    EMBEDDINGS_PATH,
    check_request,
    parse_request_body,
)
from ficc.domain.openai_runtimes import check_capabilities, engine_body
from ficc.domain.service_records import ServiceRecord
from ficc.services.inference.records import load_service
from ficc.web.auth import Context, scoped
from ficc.web.fast_routes import fast_path
from ficc.web.responses import FiccJSONResponse
from ficc.web.schemas_responses import OPENAI_ANSWER
from ficc.web.sse import EventStreamResponse, sse_bytes, unless_disconnected

router = APIRouter()

PREFIX: Final = "/api/v1/inference/v1"
CLIENT_CLOSED_REQUEST: Final = 499


def model_object(service: ServiceRecord, owner: str) -> dict[str, Any]:
    """A service as OpenAI's ``model`` object; ``created`` is when the service was created."""
    return {
        "id": service.id,
        "object": "model",
        "created": int(service.created_at.timestamp()),
        "owned_by": owner,
    }


def unknown_model(model: str, usable: list[str]) -> NotFound:
    """The 404 of a ``model`` that is no running service of the project, listing those that are."""
    listed = ", ".join(usable) if usable else "none is running"
    return NotFound(
        f"the model {model} is not a service of this project: model is the ID of a "
        f"running service (here: {listed})",
        details={"field": "model", "services": usable},
    )


@router.get(f"{PREFIX}/models", responses=OPENAI_ANSWER)
async def list_models(ctx: Context = scoped("inference:invoke")) -> Any:
    services = await ctx.cluster.inference.router.running_services(ctx.project)
    return {"object": "list", "data": [model_object(s, ctx.project) for s in services]}


@router.get(f"{PREFIX}/models/{{model_id}}", responses=OPENAI_ANSWER)
async def get_model(model_id: str, ctx: Context = scoped("inference:invoke")) -> Any:
    services = await ctx.cluster.inference.router.running_services(ctx.project)
    for service in services:
        if service.id == model_id:
            return model_object(service, ctx.project)
    raise unknown_model(model_id, [service.id for service in services])


async def _read_body(request: Request, engine_path: str) -> dict[str, Any]:
    """The body, checked as OpenAI checks it, before anything reaches an engine."""
    body = parse_request_body(await request.body())
    if not isinstance(body.get("model"), str):
        raise InvalidInput("model must be the ID of a running service", field="model")
    check_request(engine_path, body)
    return body


async def relay(ctx: Context, request: Request, engine_path: str) -> Response:
    body = await _read_body(request, engine_path)
    service_id = body["model"]
    invocations = ctx.cluster.inference.router
    try:
        # Resolved once and handed on: each resolution takes the next replica in turn.
        endpoint = await invocations.endpoint(ctx.project, service_id)
        # The record alone: the owner's view would read every attempt of the service too.
        async with ctx.cluster.uow_factory() as uow:
            spec = (await load_service(uow, ctx.project, service_id)).spec
    except NotFound as exc:
        # The usual mistake is a model's name: say what `model` is and which IDs work here.
        usable = [service.id for service in await invocations.running_services(ctx.project)]
        raise unknown_model(service_id, usable) from exc
    check_capabilities(endpoint.runtime, spec.options, engine_path, body)
    sent = engine_body(endpoint.runtime, engine_path, body)
    if body.get("stream") is True:
        stack = contextlib.AsyncExitStack()
        events = await stack.enter_async_context(
            invocations.stream(ctx.project, service_id, engine_path, sent, endpoint=endpoint)
        )
        return EventStreamResponse(sse_bytes(events), stack.aclose)
    answer = await unless_disconnected(
        request,
        invocations.complete(ctx.project, service_id, engine_path, sent, endpoint=endpoint),
    )
    if answer is None:
        return Response(status_code=CLIENT_CLOSED_REQUEST)
    return FiccJSONResponse(shape_answer(endpoint.runtime, engine_path, body, answer))


@router.post(f"{PREFIX}/chat/completions", responses=OPENAI_ANSWER)
@fast_path
async def chat_completions(request: Request, ctx: Context = scoped("inference:invoke")) -> Any:
    return await relay(ctx, request, CHAT_COMPLETIONS_PATH)


@router.post(f"{PREFIX}/completions", responses=OPENAI_ANSWER)
@fast_path
async def completions(request: Request, ctx: Context = scoped("inference:invoke")) -> Any:
    return await relay(ctx, request, COMPLETIONS_PATH)


@router.post(f"{PREFIX}/embeddings", responses=OPENAI_ANSWER)
@fast_path
async def embeddings(request: Request, ctx: Context = scoped("inference:invoke")) -> Any:
    return await relay(ctx, request, EMBEDDINGS_PATH)
