"""The local OpenAI-compatible URL /api/v1/inference/v1: ``model`` is a local service ID."""

from __future__ import annotations

import contextlib
from typing import Any, Final

from fastapi import APIRouter, Request, Response

from ficc.base.errors import InvalidInput, NotFound
from ficc.domain.openai_requests import check_request, parse_request_body
from ficc.web.auth import Context, scoped
from ficc.web.responses import FiccJSONResponse
from ficc.web.schemas_responses import OPENAI_ANSWER
from ficc.web.sse import EventStreamResponse, sse_bytes, unless_disconnected

router = APIRouter()

PREFIX: Final = "/api/v1/inference/v1"
CLIENT_CLOSED_REQUEST: Final = 499


@router.get(f"{PREFIX}/models", responses=OPENAI_ANSWER)
async def list_models(ctx: Context = scoped("inference:invoke")) -> Any:
    services = await ctx.cluster.inference.running_services(ctx.project)
    return {
        "object": "list",
        "data": [
            {
                "id": service.id,
                "object": "model",
                "created": int(service.created_at.timestamp()),
                "owned_by": ctx.project,
            }
            for service in services
        ],
    }


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
    inference = ctx.cluster.inference
    try:
        # Resolved once and handed on: each resolution takes the next replica in turn.
        endpoint = await inference.endpoint(ctx.project, service_id)
    except NotFound as exc:
        # The usual mistake is a model's name: say what `model` is and which IDs work here.
        usable = [service.id for service in await inference.running_services(ctx.project)]
        listed = ", ".join(usable) if usable else "none is running"
        raise NotFound(
            f"the model {service_id} is not a service of this project: model is the ID of a "
            f"running service (here: {listed})",
            details={"field": "model", "services": usable},
        ) from exc
    if body.get("stream") is True:
        stack = contextlib.AsyncExitStack()
        events = await stack.enter_async_context(
            inference.stream(ctx.project, service_id, engine_path, body, endpoint=endpoint)
        )
        return EventStreamResponse(sse_bytes(events), stack.aclose)
    answer = await unless_disconnected(
        request,
        inference.complete(ctx.project, service_id, engine_path, body, endpoint=endpoint),
    )
    if answer is None:
        return Response(status_code=CLIENT_CLOSED_REQUEST)
    return FiccJSONResponse(answer)


@router.post(f"{PREFIX}/chat/completions", responses=OPENAI_ANSWER)
async def chat_completions(request: Request, ctx: Context = scoped("inference:invoke")) -> Any:
    return await relay(ctx, request, "/v1/chat/completions")


@router.post(f"{PREFIX}/completions", responses=OPENAI_ANSWER)
async def completions(request: Request, ctx: Context = scoped("inference:invoke")) -> Any:
    return await relay(ctx, request, "/v1/completions")
