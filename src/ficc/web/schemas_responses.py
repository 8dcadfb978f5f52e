"""Response shapes of the main /api/v1 routes, for the OpenAPI document only.

Routes keep returning their plain JSON (so the bytes on the wire never depend on these models);
the models are named in ``responses=`` and a test validates real answers against them, so the
document cannot drift from what the server says. Unknown fields are refused: a field added to an
answer must be added here too. Open values (manifests, options, details) are free-form objects.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict

from ficc.web.api_docs import OPENAI_ERROR_RESPONSES

Time = str
"""An RFC 3339 UTC time."""


class Shape(BaseModel):
    model_config = ConfigDict(extra="forbid")


class OpenObject(BaseModel):
    """A JSON object whose fields depend on the operation (documented in docs/)."""

    model_config = ConfigDict(extra="allow")


class TokenCreated(Shape):
    id: str
    token: str
    scopes: list[str]
    projects: list[str]
    expires_at: Time | None
    peers: list[str] | None
    services: list[str] | None
    tokens: int | None
    tokens_per_minute: int | None
    requests_per_minute: int | None


class TokenUsed(Shape):
    requests: int
    prompt_tokens: int
    completion_tokens: int


class TokenRemaining(Shape):
    """The least the token's rules and its creators' leave (null: not limited so)."""

    tokens: int | None
    tokens_per_minute: int | None
    requests_per_minute: int | None


class Token(Shape):
    id: str
    state: str
    scopes: list[str]
    projects: list[str]
    owner: bool
    created_by: str | None
    created_at: Time
    expires_at: Time | None
    revoked_at: Time | None
    peers: list[str] | None
    services: list[str] | None
    tokens: int | None
    tokens_per_minute: int | None
    requests_per_minute: int | None
    used: TokenUsed | None
    """Null for a token no rule restricts (nothing is metered for it)."""
    remaining: TokenRemaining | None


class TokenList(Shape):
    tokens: list[Token]


class SessionCreated(Shape):
    user: str
    csrf_token: str


class Session(Shape):
    user: str
    csrf_token: str | None
    scopes: list[str]
    local_owner: bool


class LoginLink(Shape):
    url: str
    expires_in: int


class Project(Shape):
    name: str
    created_at: Time


class ProjectList(Shape):
    projects: list[Project]


class Model(Shape):
    id: str
    name: str
    format: str
    manifest: dict[str, Any]
    sha256: str
    size_bytes: int
    provenance: dict[str, Any] | None
    created_at: Time


class ModelList(Shape):
    models: list[Model]


class NodeList(Shape):
    nodes: list[dict[str, Any]]


class ServiceSpec(Shape):
    name: str
    model: str
    runtime: str
    node: str | None
    replicas: int
    options: dict[str, Any]
    restart: str


class Replica(Shape):
    attempt: str
    replica: int
    state: str
    pid: int | None
    port: int | None
    exit_code: int | None
    log_tail: str | None
    """The engine's last log lines, one string; null until the replica has ended."""
    created_at: Time
    ended_at: Time | None


class Service(Shape):
    id: str
    spec: ServiceSpec
    node: str | None
    state: str
    desired: str
    revision: int
    error: str | None
    created_by_grant: str | None
    unknown_attempts: int
    replicas: list[Replica]
    created_at: Time
    updated_at: Time


class ServiceList(Shape):
    services: list[Service]


class RouteTarget(Shape):
    """A local service (no ``peer``) or a peer's granted service."""

    peer: str | None = None
    service: str
    weight: int
    max_in_flight: int | None


class Route(Shape):
    """A route: one model name over ordered targets."""

    id: str
    name: str
    policy: Literal["priority", "least-busy"]
    targets: list[RouteTarget]


class RouteList(Shape):
    routes: list[Route]


class AuditPeer(Shape):
    hypernet_id: str
    cluster_key: str | None


class AuditEntry(Shape):
    seq: int
    at: Time
    project: str | None
    actor: str
    action: str
    target: str | None
    peer: AuditPeer | None
    details: dict[str, Any]


class AuditPage(Shape):
    entries: list[AuditEntry]


def answer(model: type[BaseModel], status: int = 200) -> dict[int | str, dict[str, Any]]:
    """``responses=`` for a route whose ``status`` answer has ``model``'s shape."""
    return {status: {"model": model, "description": model.__doc__ or model.__name__}}


NO_CONTENT: Final[dict[int | str, dict[str, Any]]] = {204: {"description": "Done; no body."}}


class OpenAIModel(Shape):
    """A service as OpenAI's ``model`` object."""

    id: str
    object: Literal["model"]
    created: int
    owned_by: str


class OpenAIModelList(Shape):
    """The services a ``model`` may name, as OpenAI lists models."""

    object: Literal["list"]
    data: list[OpenAIModel]


SERVER_SENT_EVENT: Final[dict[str, Any]] = {
    "type": "object",
    "description": "One event of the stream (before OpenAPI 3.2, `schema` describes each event).",
    "required": ["data"],
    "properties": {
        "data": {
            "type": "string",
            "description": "An OpenAI chunk or error object as JSON; `[DONE]` ends the stream.",
        },
        "event": {"type": "string"},
        "id": {"type": "string"},
    },
}
OPENAI_ANSWER: Final[dict[int | str, dict[str, Any]]] = {
    200: {
        "model": OpenObject,
        "description": "The engine's OpenAI-compatible answer, or its event stream.",
        "content": {"text/event-stream": {"schema": SERVER_SENT_EVENT}},
    },
}
OPENAI_INVOCATION: Final = {**OPENAI_ANSWER, **OPENAI_ERROR_RESPONSES}
"""An OpenAI-compatible route's invocation: the engine's answer, or OpenAI's error shape."""
OPENAI_MODELS: Final = {**answer(OpenAIModelList), **OPENAI_ERROR_RESPONSES}
OPENAI_MODEL: Final = {**answer(OpenAIModel), **OPENAI_ERROR_RESPONSES}
