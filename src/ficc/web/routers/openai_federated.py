"""The federated OpenAI-compatible URL /api/v1/federation/peers/{id}/v1.

``model`` is a remote service ID published by the selected grant. Each request travels as one
``inference.invoke`` through the grant; streams pass through unbuffered; closing the response
cancels the remote request. Nothing is retried or replayed.
"""

from __future__ import annotations

from typing import Any, Final

from fastapi import APIRouter, Request, Response

from ficc.domain.openai_requests import check_request, parse_request_body
from ficc.services.remote.views import unpublished
from ficc.web.auth import Context, scoped
from ficc.web.responses import FiccJSONResponse
from ficc.web.routers.openai_local import CLIENT_CLOSED_REQUEST
from ficc.web.sse import open_unless_disconnected, unless_disconnected

router = APIRouter()

PREFIX: Final = "/api/v1/federation/peers/{peer_id}/v1"


@router.get(f"{PREFIX}/models")
async def list_models(peer_id: str, ctx: Context = scoped("federation:invoke")) -> Any:
    return {
        "object": "list",
        "data": [
            {"id": service, "object": "model", "created": 0, "owned_by": peer_id}
            for service in await ctx.cluster.remote.published_services(
                ctx.principal, ctx.project, peer_id
            )
        ],
    }


async def relay(ctx: Context, request: Request, peer_id: str, path: str) -> Response:
    # Checked here as the grantor checks it again: a bad request never costs the grant one.
    body = parse_request_body(await request.body())
    model = body.get("model")
    if not isinstance(model, str):
        raise unpublished(model)
    check_request(path, body)
    remote = ctx.cluster.remote
    invocation = {"service": model, "path": path, "body": body}
    if body.get("stream") is True:
        opened = await open_unless_disconnected(
            request,
            remote.open_stream(
                ctx.principal,
                ctx.project,
                peer_id,
                operation="inference.invoke",
                body=invocation,
                service=model,
            ),
        )
        if opened is None:
            return Response(status_code=CLIENT_CLOSED_REQUEST)
        return opened
    answer = await unless_disconnected(
        request,
        remote.request(
            ctx.principal,
            ctx.project,
            peer_id,
            operation="inference.invoke",
            body=invocation,
            service=model,
        ),
    )
    if answer is None:
        return Response(status_code=CLIENT_CLOSED_REQUEST)
    return FiccJSONResponse(answer["result"])


@router.post(f"{PREFIX}/chat/completions")
async def chat_completions(
    peer_id: str, request: Request, ctx: Context = scoped("federation:invoke")
) -> Any:
    return await relay(ctx, request, peer_id, "/v1/chat/completions")


@router.post(f"{PREFIX}/completions")
async def completions(
    peer_id: str, request: Request, ctx: Context = scoped("federation:invoke")
) -> Any:
    return await relay(ctx, request, peer_id, "/v1/completions")
