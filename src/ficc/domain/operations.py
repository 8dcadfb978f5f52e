"""Rules of the remote operations a grant carries: scopes, mutation IDs, bodies, paths.

The table of operations itself (``ficc.services.remote.table``) follows the Federation API
and contract §4; these are the pure checks its rows are made of.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import Any, Final

from ficc.base.errors import InvalidInput, PermissionDenied
from ficc.base.ids import parse_mutation_id
from ficc.domain.scopes import REMOTE_SCOPES

INVOKE: Final = "inference.invoke"
"""The operation that runs one OpenAI request on the grantor's service: metered, counted
against the grant's tokens, given its own timeout."""

ANY_SCOPE: Final = frozenset(REMOTE_SCOPES)
"""An operation any grant may carry (``operation.status``)."""


class Streaming(Enum):
    """Whether an operation answers with a stream of bytes instead of one JSON object."""

    NEVER = "never"
    ALWAYS = "always"
    WHEN_ASKED = "when_asked"
    """Only when the inner request asks for it (``"stream": true``), like an OpenAI call."""

    def streams(self, body: Mapping[str, Any]) -> bool:
        if self is Streaming.WHEN_ASKED:
            inner = body.get("body")
            return isinstance(inner, dict) and inner.get("stream") is True
        return self is Streaming.ALWAYS


INVOKE_PATHS: Final = frozenset(
    {"/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses"}
)
"""The inference paths a peer may reach; ``chat/completions`` is accepted for the first.
``/v1/responses`` is answered by chat completions where the runtime lacks the Responses API."""


def check_scope(operation: str, needed: frozenset[str], granted: frozenset[str]) -> None:
    """The grant must hold at least one of the scopes ``operation`` needs."""
    if not needed & granted:
        scope = sorted(needed)[0]
        raise PermissionDenied(
            f"the grant does not allow {operation}; it needs the scope {scope}",
            details={"missing_scope": scope, "operation": operation},
        )


def check_mutation_id(operation: str, mutation: bool, mutation_id: object) -> str | None:
    """Required (32 lowercase hex) for mutations, refused for everything else."""
    if mutation:
        if mutation_id is None:
            raise InvalidInput(
                f"{operation} requires a mutation_id (32 lowercase hex); save it before sending",
                field="mutation_id",
            )
        return parse_mutation_id(mutation_id)
    if mutation_id is not None:
        raise InvalidInput(f"{operation} takes no mutation_id", field="mutation_id")
    return None


def parse_body(value: object) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidInput("body must be a JSON object", field="body")
    return value


def only_fields(body: Mapping[str, Any], allowed: set[str], required: set[str]) -> None:
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise InvalidInput(f"body.{unknown[0]} is not a known field", field=f"body.{unknown[0]}")
    missing = sorted(required - set(body))
    if missing:
        raise InvalidInput(f"body.{missing[0]} is required", field=f"body.{missing[0]}")


def invoke_path(value: object) -> str:
    path = value if isinstance(value, str) else ""
    if not path.startswith("/"):
        path = "/" + path
    if not path.startswith("/v1/"):
        path = "/v1" + path
    if path not in INVOKE_PATHS:
        raise InvalidInput(
            f"path must be one of: {', '.join(sorted(INVOKE_PATHS))}", field="body.path"
        )
    return path
