"""Request body limits, enforced before a handler reads the body (ASGI middleware).

Every body is read within 1 MiB until the request is authenticated. Only the federated
request routes take more (a grant's largest ``request_bytes`` and its envelope), and only once
their route has authenticated the caller (:data:`AUTHENTICATED_KEY`, set by
:mod:`ficc.web.fast_routes`): nobody unauthenticated makes this server read, hold or decode
more than 1 MiB.
"""

from __future__ import annotations

import json
import re
from typing import Final

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ficc.base.errors import TooLarge
from ficc.base.units import MiB
from ficc.domain.grants import MAX_REQUEST_BYTES
from ficc.web.errors import error_body
from ficc.web.observability import request_id_of

DEFAULT_MAX_BODY_BYTES: Final = 1 * MiB
FEDERATED_REQUEST_PATHS: Final = re.compile(
    r"^/api/v1/federation/peers/[^/]+/(request|v1/chat/completions|v1/completions)$"
)
"""The routes whose body travels to a peer under a grant."""
FEDERATED_MAX_BODY_BYTES: Final = MAX_REQUEST_BYTES + MiB
"""A grant's largest ``request_bytes`` and the envelope around it."""
AUTHENTICATED_KEY: Final = "ficc_authenticated"
"""Set in the ASGI scope once the route authenticated the caller, before it reads the body."""


class BodyLimit:
    """Refuse a body over the limit with 413: from Content-Length, or while it streams.

    The federated request routes follow the largest body a grant may allow instead, once
    their caller is authenticated; until then (and on every other route) 1 MiB.
    """

    def __init__(self, app: ASGIApp, *, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        small = self.max_body_bytes
        large = small
        if FEDERATED_REQUEST_PATHS.match(scope.get("path", "")):
            large = max(small, FEDERATED_MAX_BODY_BYTES)
        declared = 0
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = large + 1
                if declared > large:
                    await _refuse(send, large, scope)
                    return
        received = 0
        limit = small

        def current_limit() -> int:
            return large if scope.get(AUTHENTICATED_KEY) is True else small

        async def limited_receive() -> Message:
            nonlocal received, limit
            limit = current_limit()
            if declared > limit:
                raise _BodyTooLarge  # announced over what this caller may send: read nothing
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise _BodyTooLarge
            return message

        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except _BodyTooLarge:
            if not started:
                await _refuse(send, limit, scope)


class _BodyTooLarge(Exception):
    pass


async def _refuse(send: Send, limit: int, scope: Scope) -> None:
    error = TooLarge(
        f"the request body exceeds the limit of {limit} bytes",
        details={"limit": "body_bytes", "max_bytes": limit},
    )
    body = json.dumps(error_body(error, scope["path"], request_id_of(scope))).encode()
    await send(
        {
            "type": "http.response.start",
            "status": error.status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
