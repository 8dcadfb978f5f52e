"""Request bodies: strict models, unknown fields refused. Pydantic lives only here, at the edge."""

from __future__ import annotations

from typing import Any, Final

from pydantic import BaseModel, ConfigDict

from ficc.domain.openai_requests import (
    CHAT_COMPLETIONS_PATH,
    COMPLETIONS_PATH,
    EMBEDDING_FORMATS,
    EMBEDDINGS_PATH,
    MAX_CHOICES,
    MAX_COMPLETION_LOGPROBS,
    MAX_EMBEDDING_INPUTS,
    MAX_STOP_SEQUENCES,
    MESSAGE_ROLES,
    RESPONSE_FORMATS,
    TOOL_CHOICES,
)
from ficc.domain.openai_responses import RESPONSES_PATH


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class TokenCreate(Strict):
    scopes: list[str]
    projects: list[str] | None = None
    lifetime: int | None = None
    peers: list[str] | None = None
    services: list[str] | None = None
    tokens: int | None = None
    tokens_per_minute: int | None = None
    requests_per_minute: int | None = None

    def restrictions(self) -> dict[str, Any]:
        names = ("peers", "services", "tokens", "tokens_per_minute", "requests_per_minute")
        return {name: getattr(self, name) for name in names}


class ProjectCreate(Strict):
    name: str


class SessionCreate(Strict):
    username: str
    password: str


class PasswordSet(Strict):
    password: str


class ModelCreate(Strict):
    name: str
    paths: list[str]


class ServiceReplace(Strict):
    revision: int
    spec: dict[str, Any]


class ServiceControl(Strict):
    revision: int
    operation: str
    acknowledge_unknown: bool = False


class PreviewRequest(Strict):
    spec: dict[str, Any]


class Configuration(Strict):
    agent_directory: str
    label: str | None = None


class OfferCreate(Strict):
    service: str
    scopes: list[str]
    ticket: str | None = None


class OfferApprove(Strict):
    revision: int
    grant: dict[str, Any]


class OfferFinish(Strict):
    receipt: str


class Refresh(Strict):
    grant: str | None = None


class Reconcile(Strict):
    grant: str | None = None


class Forget(Strict):
    erase_audit: bool = False
    """Turn the audit rows naming the peer, its offers and its grants into signed tombstones."""


class RemoteRequest(Strict):
    operation: str
    body: dict[str, Any] = {}
    mutation_id: str | None = None


class Acquire(Strict):
    model: str


# --- OpenAI request bodies, for the document -------------------------------------------------
# The compatible URLs read their bodies raw (ficc.domain.openai_requests checks them as OpenAI
# does and passes unknown parameters through), so these JSON Schemas only document them. Each
# rule written here is one that check refuses to break: what the document calls invalid, FICC
# refuses; the check is stricter in places (rules across parameters, the runtime's abilities).


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "null"}]}


def _integer(low: int, high: int | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "integer", "minimum": low}
    if high is not None:
        schema["maximum"] = high
    return _nullable(schema)


def _number(low: float, high: float) -> dict[str, Any]:
    return _nullable({"type": "number", "minimum": low, "maximum": high})


_TOKEN_IDS: Final = {"type": "array", "items": {"type": "integer"}}

_COMMON: Final[dict[str, Any]] = {
    "model": {"type": "string", "description": "A service ID (or, locally, a route's name)."},
    "stream": _nullable({"type": "boolean"}),
    "max_tokens": _integer(1),
    "max_completion_tokens": _integer(1),
    "n": _integer(1, MAX_CHOICES),
    "temperature": _number(0, 2),
    "top_p": _number(0, 1),
    "presence_penalty": _number(-2, 2),
    "frequency_penalty": _number(-2, 2),
    "seed": _integer(-(2**63), 2**63 - 1),
    "user": _nullable({"type": "string"}),
    "stop": {
        "anyOf": [
            {"type": "string"},
            {"type": "array", "items": {"type": "string"}, "maxItems": MAX_STOP_SEQUENCES},
            {"type": "null"},
        ]
    },
}

_MESSAGE: Final[dict[str, Any]] = {
    "type": "object",
    "required": ["role"],
    "properties": {
        "role": {"type": "string", "enum": sorted(MESSAGE_ROLES)},
        "content": {
            "anyOf": [
                {"type": "string"},
                {"type": "array", "items": {"type": "object"}},
                {"type": "null", "description": "Only an assistant's message may have none."},
            ]
        },
    },
}

_BODIES: Final[dict[str, dict[str, Any]]] = {
    CHAT_COMPLETIONS_PATH: {
        "title": "ChatCompletionRequest",
        "required": ["model", "messages"],
        "properties": {
            "messages": {"type": "array", "minItems": 1, "items": _MESSAGE},
            "logprobs": _nullable({"type": "boolean"}),
            "response_format": _nullable(
                {
                    "type": "object",
                    "required": ["type"],
                    "properties": {"type": {"type": "string", "enum": sorted(RESPONSE_FORMATS)}},
                }
            ),
            "tools": _nullable({"type": "array", "items": {"type": "object"}}),
            "tool_choice": {
                "anyOf": [
                    {"type": "string", "enum": sorted(TOOL_CHOICES)},
                    {"type": "object"},
                    {"type": "null"},
                ]
            },
        },
    },
    COMPLETIONS_PATH: {
        "title": "CompletionRequest",
        "required": ["model", "prompt"],
        "properties": {
            "prompt": {
                "anyOf": [
                    {"type": "string"},
                    {"type": "array", "minItems": 1, "items": {"type": "string"}},
                    {**_TOKEN_IDS, "minItems": 1},
                    {"type": "array", "minItems": 1, "items": _TOKEN_IDS},
                ]
            },
            "logprobs": _integer(0, MAX_COMPLETION_LOGPROBS),
            "echo": _nullable({"type": "boolean"}),
            "suffix": _nullable({"type": "string"}),
            "best_of": _integer(1, MAX_CHOICES),
        },
    },
    RESPONSES_PATH: {
        "title": "ResponseRequest",
        "required": ["model", "input"],
        "properties": {
            "input": {
                "anyOf": [
                    {"type": "string"},
                    {"type": "array", "minItems": 1, "items": {"type": "object"}},
                ]
            },
            "instructions": _nullable({"type": "string"}),
            "max_output_tokens": _integer(1),
            "store": {"enum": [False, None], "description": "FICC keeps no responses."},
            "background": {"enum": [False, None], "description": "Answers come at once."},
            "previous_response_id": {
                "type": "null",
                "description": "FICC keeps no responses: send the whole conversation in input.",
            },
            "conversation": {"type": "null", "description": "FICC keeps no conversations."},
        },
    },
    EMBEDDINGS_PATH: {
        "title": "EmbeddingRequest",
        "required": ["model", "input"],
        "properties": {
            "input": {
                "anyOf": [
                    {"type": "string", "minLength": 1},
                    {
                        "type": "array",
                        "minItems": 1,
                        "maxItems": MAX_EMBEDDING_INPUTS,
                        "items": {"type": "string", "minLength": 1},
                    },
                    {**_TOKEN_IDS, "minItems": 1, "maxItems": MAX_EMBEDDING_INPUTS},
                    {
                        "type": "array",
                        "minItems": 1,
                        "maxItems": MAX_EMBEDDING_INPUTS,
                        "items": {**_TOKEN_IDS, "minItems": 1},
                    },
                ]
            },
            "stream": {"enum": [False, None], "description": "Embeddings are never streamed."},
            "encoding_format": _nullable({"type": "string", "enum": sorted(EMBEDDING_FORMATS)}),
            "dimensions": _integer(1),
        },
    },
}


def openai_request(path: str) -> dict[str, Any]:
    """``openapi_extra`` of a compatible route: its JSON body, OpenAI's, for the engine ``path``."""
    body = _BODIES[path]
    schema = {
        "type": "object",
        "title": body["title"],
        "required": body["required"],
        "properties": {**_COMMON, **body["properties"]},
        "additionalProperties": True,
    }
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}
