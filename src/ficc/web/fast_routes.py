"""The inference POST routes and the federated request route, dispatched without FastAPI's
routing and dependency injection.

Every chat or completion is one of these requests. FastAPI finds a route by trying each of
its ~80 routes in turn and then solves the route's dependencies, which took about a third of
the requester's CPU for a streamed chat through both clusters. Here the same routes are found
by their own compiled path, and served by the same endpoint function with the same ``scoped``
dependency (authentication, project, scopes), its errors rendered by the same functions as the
application's handlers. The context is solved before the endpoint reads the body, so only an
authenticated caller's body may pass the small limit (:mod:`ficc.web.limits`). Everything
outside the middleware (Host check, body limits, request ID, access log, metrics by route
template) applies as to any route; any other method or path goes on to FastAPI. The routes
stay FastAPI's for the OpenAPI document and the scope checks.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Receive, Scope, Send

from ficc.base.errors import FiccError
from ficc.web.errors import error_response, unexpected_error_response
from ficc.web.limits import AUTHENTICATED_KEY

FAST_PATH_KEY: Final = "ficc_fast_path"
REQUEST_PARAMETER: Final = "request"

E = TypeVar("E", bound=Callable[..., Awaitable[Response]])


def fast_path(endpoint: E) -> E:
    """Mark a POST endpoint as served by :class:`FastRoutes`.

    It must take only its path parameters, ``request`` and its ``scoped`` context, and return
    a Response: checked when the application is built.
    """
    setattr(endpoint, FAST_PATH_KEY, True)
    return endpoint


@dataclass(frozen=True)
class FastRoute:
    """One marked route: its FastAPI route, its context dependency and that parameter's name."""

    route: APIRoute
    context: Callable[[Request], Awaitable[Any]]
    context_name: str

    @classmethod
    def of(cls, route: APIRoute) -> FastRoute:
        dependencies = [
            d
            for d in route.dependant.dependencies
            if d.call is not None and hasattr(d.call, "required_scopes")
        ]
        if len(dependencies) != 1:
            raise TypeError(f"{route.path}: a fast route needs exactly one scoped context")
        (dependency,) = dependencies
        context_name = dependency.name
        assert dependency.call is not None
        assert context_name is not None
        expected = {REQUEST_PARAMETER, context_name, *route.param_convertors}
        taken = set(inspect.signature(route.endpoint).parameters)
        if taken != expected or route.methods != {"POST"}:
            raise TypeError(
                f"{route.path}: a fast route is POST only and takes exactly "
                f"{', '.join(sorted(expected))}"
            )
        return cls(route, dependency.call, context_name)

    async def serve(self, scope: Scope, receive: Receive, send: Send) -> bool:
        """Serve the request if it is this route's; False if it is not."""
        match = self.route.path_regex.match(scope["path"])
        if match is None:
            return False
        convertors = self.route.param_convertors
        params = {name: convertors[name].convert(text) for name, text in match.groupdict().items()}
        scope["route"] = self.route  # the metrics and the access log label it by its template
        scope["path_params"] = params
        request = Request(scope, receive, send)
        try:
            context = await self.context(request)
            scope[AUTHENTICATED_KEY] = True  # only now may the body pass the small limit
            arguments = {**params, REQUEST_PARAMETER: request, self.context_name: context}
            response: Response = await self.route.endpoint(**arguments)
        except FiccError as exc:
            response = error_response(request, exc)
        except Exception as exc:  # noqa: BLE001 - rendered and logged as the 500 handler does
            response = unexpected_error_response(request, exc)
        await response(scope, receive, send)
        return True


class FastRoutes:
    """ASGI middleware: the marked routes of ``routes`` served directly, the rest passed on."""

    def __init__(self, app: ASGIApp, *, routes: Sequence[BaseRoute]) -> None:
        self.app = app
        self.fast = tuple(
            FastRoute.of(route)
            for route in routes
            if isinstance(route, APIRoute) and getattr(route.endpoint, FAST_PATH_KEY, False)
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            for fast in self.fast:
                if await fast.serve(scope, receive, send):
                    return
        await self.app(scope, receive, send)
