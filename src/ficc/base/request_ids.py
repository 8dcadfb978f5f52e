"""The ID of the request being served, in a context variable: the HTTP middleware sets it for
a request, the HyperNet adapter for a request a peer sent. Log records carry it, and a usage
record names the request by it on both clusters (the requester sends it with the request)."""

from __future__ import annotations

import contextvars

current_request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "ficc_request_id", default=None
)
