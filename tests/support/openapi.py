"""Real answers checked against the OpenAPI document's response schemas (the pydantic models)."""

from __future__ import annotations

from typing import Any

import httpx

from ficc.web import schemas_responses

API_PREFIX = "/api/v1"


def documented_model(document: dict[str, Any], method: str, path: str, status: int) -> type[Any]:
    """The response model the document names for ``method path`` answering ``status``."""
    operation = document["paths"][path][method.lower()]
    schema = operation["responses"][str(status)]["content"]["application/json"]["schema"]
    name = schema["$ref"].rsplit("/", 1)[-1]
    model: type[Any] = getattr(schemas_responses, name)
    return model


def check_answer(document: dict[str, Any], path: str, response: httpx.Response) -> dict[str, Any]:
    """Validate a 2xx answer of the route template ``path`` against its documented model."""
    assert 200 <= response.status_code < 300, response.text
    model = documented_model(document, response.request.method, path, response.status_code)
    body: dict[str, Any] = response.json()
    model.model_validate(body)
    return body
