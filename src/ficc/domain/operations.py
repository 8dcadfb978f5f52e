"""The remote operations a grant can carry: which scope each needs, which ones mutate.

The table follows the Federation API and contract §4.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from ficc.base.errors import InvalidInput, PermissionDenied
from ficc.base.ids import parse_mutation_id
from ficc.domain.scopes import REMOTE_SCOPES

ANY_SCOPE: Final = frozenset(REMOTE_SCOPES)

OPERATION_SCOPES: Final[Mapping[str, frozenset[str]]] = {
    "discover": frozenset({"discover"}),
    "inference.prepare": frozenset({"inference:manage"}),
    "inference.preview": frozenset({"inference:manage"}),
    "inference.get": frozenset({"inference:invoke", "inference:manage"}),
    "inference.create": frozenset({"inference:manage"}),
    "inference.replace": frozenset({"inference:manage"}),
    "inference.control": frozenset({"inference:manage"}),
    "inference.invoke": frozenset({"inference:invoke"}),
    "models.manifest": frozenset({"models:read", "models:transfer"}),
    "models.range": frozenset({"models:transfer"}),
    "models.create": frozenset({"models:manage"}),
    "models.remove": frozenset({"models:manage"}),
    "resources": frozenset({"resources:read"}),
    "operation.status": ANY_SCOPE,
}
"""Operation → the scopes of which the grant must hold at least one."""

MUTATIONS: Final = frozenset(
    {
        "inference.create",
        "inference.replace",
        "inference.control",
        "models.create",
        "models.remove",
    }
)

INVOKE_PATHS: Final = frozenset({"/v1/chat/completions", "/v1/completions", "/v1/embeddings"})
"""The inference paths a peer may reach; ``chat/completions`` is accepted for the first."""


def parse_operation_name(value: object) -> str:
    if not isinstance(value, str) or value not in OPERATION_SCOPES:
        raise InvalidInput(
            f"operation must be one of: {', '.join(sorted(OPERATION_SCOPES))}",
            field="operation",
        )
    return value


def check_scope(operation: str, granted: frozenset[str]) -> None:
    needed = OPERATION_SCOPES[operation]
    if not needed & granted:
        scope = sorted(needed)[0]
        raise PermissionDenied(
            f"the grant does not allow {operation}; it needs the scope {scope}",
            details={"missing_scope": scope, "operation": operation},
        )


def check_mutation_id(operation: str, mutation_id: object) -> str | None:
    """Required (32 lowercase hex) for mutations, refused for everything else."""
    if operation in MUTATIONS:
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
