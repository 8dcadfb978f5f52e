"""The federated OpenAI-compatible URL /api/v1/federation/peers/{id}/v1.

``model`` is a remote service ID published by the selected grant. Each request travels as one
``inference.invoke`` through the grant; streams pass through unbuffered; closing the response
cancels the remote request. Nothing is retried or replayed. What the remote service's runtime
cannot do is refused by the grantor (this cluster does not know the runtime), which costs the
grant that one request.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final

from fastapi import APIRouter, Request, Response

from ficc.base.errors import LimitExceeded, NotFound, OutcomeUnknown, PeerUnreachable
from ficc.base.times import parse_time
from ficc.domain.openai_requests import parse_request_body
from ficc.domain.openai_responses import check_invocation
from ficc.services.ports import PeerAsk
from ficc.services.remote.views import unpublished
from ficc.services.token_limits import check_peer
from ficc.web import sse
from ficc.web.auth import Context, scoped
from ficc.web.openai_routes import add_invocation_routes, openai_model
from ficc.web.schemas_responses import OPENAI_MODEL, OPENAI_MODELS

router = APIRouter()

PREFIX: Final = "/api/v1/federation/peers/{peer_id}/v1"


UNTOLD: Final = (PeerUnreachable, OutcomeUnknown, LimitExceeded)
"""Why the grantor may not tell a service's creation time: unreachable, slow, or the grant's
requests used up. The list is then answered from this cluster's knowledge, ``created: 0``."""


async def _remote_model(ctx: Context, peer_id: str, service: str, *, ask: bool) -> dict[str, Any]:
    """OpenAI's ``model`` object of a published service, ``created`` as the grantor recorded it.

    One ``inference.get`` through the selected grant (one of its requests): the requester keeps
    no copy of the grantor's services. Without ``ask``, or when the grantor cannot tell,
    ``created`` is 0.
    """
    created = 0
    if ask:
        answer = await ctx.cluster.remote.request(
            ctx.principal,
            ctx.project,
            peer_id,
            operation="inference.get",
            body={"service": service},
            service=service,
        )
        created = int(parse_time(answer["result"]["created_at"]).timestamp())
    return openai_model(service, created, peer_id)


@router.get(f"{PREFIX}/models", responses=OPENAI_MODELS)
async def list_models(peer_id: str, ctx: Context = scoped("federation:invoke")) -> Any:
    check_peer(ctx.principal, peer_id)
    published = await ctx.cluster.remote.published_services(ctx.principal, ctx.project, peer_id)
    rules = ctx.principal.restrictions
    if rules is not None:
        # A restricted token is shown only the services it may use.
        published = [service for service in published if rules.admits_service(service)]
    data = []
    ask = True
    for service in published:
        try:
            data.append(await _remote_model(ctx, peer_id, service, ask=ask))
        except NotFound:
            continue  # published by the grant, since removed by the grantor
        except UNTOLD:
            ask = False  # one wait for an unreachable peer, not one per service
            data.append(await _remote_model(ctx, peer_id, service, ask=False))
    return {"object": "list", "data": data}


@router.get(f"{PREFIX}/models/{{model_id}}", responses=OPENAI_MODEL)
async def get_model(model_id: str, peer_id: str, ctx: Context = scoped("federation:invoke")) -> Any:
    published = await ctx.cluster.remote.published_services(ctx.principal, ctx.project, peer_id)
    if model_id not in published:
        raise unpublished(model_id)
    try:
        return await _remote_model(ctx, peer_id, model_id, ask=True)
    except NotFound as exc:
        raise unpublished(model_id) from exc
    except UNTOLD:
        return await _remote_model(ctx, peer_id, model_id, ask=False)


async def relay(ctx: Context, request: Request, peer_id: str, path: str) -> Response:
    """One ``inference.invoke`` through the selected grant, plain or streamed."""
    # Checked here as the grantor checks it again: a bad request never costs the grant one.
    body = parse_request_body(await request.body())
    model = body.get("model")
    if not isinstance(model, str):
        raise unpublished(model)
    check_invocation(path, body)
    remote = ctx.cluster.remote
    invocation = {"service": model, "path": path, "body": body}
    ask: PeerAsk = {"operation": "inference.invoke", "body": invocation, "service": model}
    if body.get("stream") is True:
        response = await sse.relay(
            request, remote.open_stream(ctx.principal, ctx.project, peer_id, **ask)
        )
        # The stream is open, its headers not yet sent: the limits as the grantor told them at
        # the end of the last answer.
        sse.add_headers(response, remote.rate_limits(peer_id, ctx.principal))
        return response

    async def result() -> Any:
        answer = await remote.request(ctx.principal, ctx.project, peer_id, **ask)
        return answer["result"]

    response = await sse.relay(request, result())
    # After the answer: the limits as the grantor told them at its end.
    sse.add_headers(response, remote.rate_limits(peer_id, ctx.principal))
    return response


def _invocation(path: str) -> Callable[..., Awaitable[Response]]:
    async def endpoint(
        peer_id: str, request: Request, ctx: Context = scoped("federation:invoke")
    ) -> Any:
        return await relay(ctx, request, peer_id, path)

    return endpoint


add_invocation_routes(router, PREFIX, _invocation)
