"""The local OpenAI-compatible URL /api/v1/inference/v1: ``model`` is a local service ID, or
a route's name or ID (``ficc.services.inference.routes``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final

from fastapi import APIRouter, Request, Response

from ficc.base.errors import FiccError, InvalidInput, NotFound
from ficc.base.ids import PREFIXES
from ficc.domain.openai_requests import parse_request_body
from ficc.domain.routes import Route
from ficc.domain.service_records import ServiceRecord
from ficc.services.inference.route_targets import Ask
from ficc.services.inference.routes import RouteTrace
from ficc.services.token_limits import check_service
from ficc.web import sse
from ficc.web.auth import Context, scoped
from ficc.web.errors import error_response
from ficc.web.observability import ROUTE_TRACE_SCOPE_KEY
from ficc.web.openai_routes import add_invocation_routes, openai_model
from ficc.web.schemas_responses import OPENAI_MODEL, OPENAI_MODELS
from ficc.web.sse import Opening

router = APIRouter()

PREFIX: Final = "/api/v1/inference/v1"
SERVICE_ID_PREFIX: Final = PREFIXES["service"] + "_"
ROUTE_TARGET_HEADER: Final = "x-ficc-route-target"


def model_object(service: ServiceRecord, owner: str) -> dict[str, Any]:
    """A service as OpenAI's ``model`` object; ``created`` is when the service was created."""
    return openai_model(service.id, int(service.created_at.timestamp()), owner)


def unknown_model(model: str, usable: list[str]) -> NotFound:
    """The 404 of a ``model`` that is no running service of the project, listing those that are."""
    listed = ", ".join(usable) if usable else "none is running"
    return NotFound(
        f"the model {model} is not a service of this project: model is the ID of a "
        f"running service (here: {listed}) or a route's name or ID",
        details={"field": "model", "services": usable},
    )


def route_object(route: Route, owner: str) -> dict[str, Any]:
    """A route as OpenAI's ``model`` object, named as callers name it (its name)."""
    return openai_model(route.name, int(route.created_at.timestamp()), owner)


@router.get(f"{PREFIX}/models", responses=OPENAI_MODELS)
async def list_models(ctx: Context = scoped("inference:invoke")) -> Any:
    services = await ctx.cluster.inference.router.running_services(ctx.project)
    routes = await ctx.cluster.routes.routes(ctx.project)
    rules = ctx.principal.restrictions
    if rules is not None:
        # A restricted token is shown only the services and routes it lists.
        services = [s for s in services if rules.admits_service(s.id)]
        routes = [r for r in routes if rules.admits_service(r.name, r.id)]
    data = [model_object(s, ctx.project) for s in services]
    data += [route_object(route, ctx.project) for route in routes]
    return {"object": "list", "data": data}


@router.get(f"{PREFIX}/models/{{model_id}}", responses=OPENAI_MODEL)
async def get_model(model_id: str, ctx: Context = scoped("inference:invoke")) -> Any:
    services = await ctx.cluster.inference.router.running_services(ctx.project)
    for service in services:
        if service.id == model_id:
            return model_object(service, ctx.project)
    route = await ctx.cluster.routes.find(ctx.project, model_id)
    if route is not None:
        return route_object(route, ctx.project)
    raise unknown_model(model_id, [service.id for service in services])


async def relay(ctx: Context, request: Request, engine_path: str) -> Response:
    """One invocation of a local service, plain or streamed, as the caller asked."""
    body = parse_request_body(await request.body())
    service_id = body.get("model")
    if not isinstance(service_id, str):
        raise InvalidInput("model must be the ID of a running service", field="model")
    if not service_id.startswith(SERVICE_ID_PREFIX):
        route = await ctx.cluster.routes.find(ctx.project, service_id)
        if route is not None:
            return await relay_route(ctx, request, route, engine_path, body)
    invocations = ctx.cluster.inference.invocations
    call: Opening | Awaitable[dict[str, Any]]
    if ctx.principal.restrictions is not None:
        return await relay_restricted(ctx, request, service_id, engine_path, body)
    if body.get("stream") is True:
        call = invocations.stream(ctx.project, service_id, engine_path, body)
    else:
        call = invocations.complete(ctx.project, service_id, engine_path, body)
    try:
        return await sse.relay(request, call)
    except NotFound as exc:
        # The usual mistake is a model's name: say what `model` is and which IDs work here.
        running = await ctx.cluster.inference.router.running_services(ctx.project)
        raise unknown_model(service_id, [service.id for service in running]) from exc


async def relay_restricted(
    ctx: Context, request: Request, service_id: str, engine_path: str, body: dict[str, Any]
) -> Response:
    """A restricted token's invocation of a local service: only a service it lists, held to
    its budgets (and its creators'), answered with its rate-limit headers."""
    check_service(ctx.principal, service_id)
    invocations, tokens, project = (
        ctx.cluster.inference.invocations,
        ctx.cluster.tokens,
        ctx.project,
    )
    call: Opening | Awaitable[dict[str, Any]]
    if body.get("stream") is True:
        call = tokens.local_stream(
            ctx.principal,
            service_id,
            engine_path,
            body,
            lambda sent: invocations.stream(project, service_id, engine_path, sent),
        )
    else:
        call = tokens.local(
            ctx.principal,
            service_id,
            engine_path,
            body,
            lambda sent: invocations.complete(project, service_id, engine_path, sent),
        )
    response = await sse.relay(request, call)
    sse.add_headers(response, tokens.rate_limits(ctx.principal, {}))
    return response


async def relay_route(
    ctx: Context, request: Request, route: Route, engine_path: str, body: dict[str, Any]
) -> Response:
    """One invocation through a route; the answer (or error) names the target that gave it,
    and the access log what was skipped."""
    routes = ctx.cluster.routes
    trace = RouteTrace(route.name)
    ask = Ask(ctx.principal, ctx.project, route, engine_path, body)
    streamed = body.get("stream") is True
    call: Opening | Awaitable[dict[str, Any]] = (
        routes.stream(ask, trace) if streamed else routes.complete(ask, trace)
    )
    try:
        response = await sse.relay(request, call)
    except FiccError as exc:
        response = error_response(request, exc)
    finally:
        request.scope[ROUTE_TRACE_SCOPE_KEY] = trace.log_fields()
    if trace.target is not None:
        sse.add_header(response, ROUTE_TARGET_HEADER, trace.target)
    return response


def _invocation(path: str) -> Callable[..., Awaitable[Response]]:
    async def endpoint(request: Request, ctx: Context = scoped("inference:invoke")) -> Any:
        return await relay(ctx, request, path)

    return endpoint


add_invocation_routes(router, PREFIX, _invocation)
