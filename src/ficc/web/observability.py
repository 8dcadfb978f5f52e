"""Every HTTP request gets an ID, an access log line and its place in the metrics.

The ID is the client's ``X-Request-ID`` when it is well formed, else a new one; it is set as
the request's context (so every log record and every request sent to a peer while it runs
carries it), stored in the ASGI scope (so the error handlers can name it) and returned in the
response's ``X-Request-ID``. Metrics label requests by route template (``/api/v1/models/{id}``),
never by raw path, so a scan of random URLs cannot grow the label set.
"""

from __future__ import annotations

import logging
import time
from typing import Final

from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ficc.adapters import metrics
from ficc.adapters.logs import current_request_id, new_request_id, well_formed_request_id

REQUEST_ID_HEADER: Final = "x-request-id"
REQUEST_ID_SCOPE_KEY: Final = "ficc.request_id"
UNMATCHED_ROUTE: Final = "unmatched"
KNOWN_METHODS: Final = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
"""Other methods are counted as ``other``: a client cannot grow the label set."""
SECRET_PATH_PARAMETERS: Final = ("{secret}",)
"""Path parameters that are credentials (a login link): logged as the template, never raw."""

access_log = logging.getLogger("ficc.access")
ROUTE_TRACE_SCOPE_KEY = "ficc.route"
"""Where a request through a route leaves what it did (its target, each skip and why) for
the access line."""


def request_id_of(scope: Scope) -> str | None:
    value = scope.get(REQUEST_ID_SCOPE_KEY)
    return value if isinstance(value, str) else None


def _incoming_request_id(scope: Scope) -> str | None:
    for name, value in scope.get("headers", ()):
        if name == b"x-request-id":
            text = value.decode("latin-1")
            return text if well_formed_request_id(text) else None
    return None


def loggable_path(path: str, route: str) -> str:
    if any(parameter in route for parameter in SECRET_PATH_PARAMETERS):
        return route
    return path


def route_template(routes: list[BaseRoute], scope: Scope) -> str:
    """The path template of the route that served ``scope``, or ``unmatched``.

    FastAPI records the route it chose in the scope; routes added to the application itself
    (the OpenAPI document) are matched here.
    """
    chosen_path = getattr(scope.get("route"), "path", None)
    if isinstance(chosen_path, str):
        return chosen_path
    for route in routes:
        match, _ = route.matches(scope)
        if match is Match.FULL:
            return str(getattr(route, "path", UNMATCHED_ROUTE))
    return UNMATCHED_ROUTE


class RequestObservability:
    """ASGI middleware: request ID, access log and HTTP metrics for every request."""

    def __init__(self, app: ASGIApp, routes: list[BaseRoute]) -> None:
        self.app = app
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = _incoming_request_id(scope) or new_request_id()
        scope[REQUEST_ID_SCOPE_KEY] = request_id
        token = current_request_id.set(request_id)
        started = time.perf_counter()
        status = 500
        header = (b"x-request-id", request_id.encode("ascii"))

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
                headers = [
                    item for item in message.get("headers", []) if item[0] != b"x-request-id"
                ]
                message = {**message, "headers": [*headers, header]}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            elapsed = time.perf_counter() - started
            route = route_template(self.routes, scope)
            method = str(scope["method"])
            method_label = method if method in KNOWN_METHODS else "other"
            path = loggable_path(str(scope["path"]), route)
            metrics.HTTP_REQUESTS.labels(method=method_label, route=route, status=str(status)).inc()
            metrics.HTTP_DURATION.labels(method=method_label, route=route).observe(elapsed)
            fields = {
                "method": method,
                "path": path,
                "route": route,
                "status": status,
                "duration_ms": round(elapsed * 1000, 3),
            }
            traced = scope.get(ROUTE_TRACE_SCOPE_KEY)
            suffix = ""
            if traced is not None:
                # The "route" field is the URL's template; a model route's own names follow.
                fields.update(
                    {
                        "model_route": traced["route"],
                        "route_target": traced["route_target"],
                        "route_skipped": traced["route_skipped"],
                    }
                )
                skipped = ", ".join(
                    f"{s['target']} {s['outcome']}" for s in traced["route_skipped"]
                )
                suffix = f" route {traced['route']} -> {traced['route_target']}" + (
                    f" (skipped: {skipped})" if skipped else ""
                )
            access_log.info(
                "%s %s %d %.1f ms%s",
                method,
                path,
                status,
                elapsed * 1000,
                suffix,
                extra=fields,
            )
            current_request_id.reset(token)
