"""JSON request bodies read by the route itself, after it authenticated the caller.

A FastAPI body parameter is read and decoded before the route's dependencies run, so before
authentication; a route that takes large bodies reads its body here instead. JSON over
:data:`GRADUAL_JSON_BYTES` is decoded in a worker thread by the standard library's Python
scanner, which lets the event loop run every few milliseconds (its C decoder would hold the
interpreter for the whole body).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, TypeVar

from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError
from starlette.requests import Request

from ficc.base.errors import InvalidInput
from ficc.base.json_text import GRADUAL_JSON_BYTES, decode_gradually
from ficc.web.errors import validation_error

M = TypeVar("M", bound=BaseModel)


async def decode_json(raw: bytes) -> Any:
    """``raw`` as JSON; a large body in a worker thread. Malformed text is ``invalid_request``."""
    try:
        if len(raw) > GRADUAL_JSON_BYTES:
            return await asyncio.to_thread(decode_gradually, raw)
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise InvalidInput("the request body is not valid JSON", field="body") from exc


async def read_json_body(request: Request, model: type[M]) -> M:
    """The request's body checked against ``model``, refused as FastAPI refuses a body."""
    value = await decode_json(await request.body())
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        errors = [{**error, "loc": ("body", *error["loc"])} for error in exc.errors()]
        raise validation_error(RequestValidationError(errors)) from exc


def json_body_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The OpenAPI ``requestBody`` of a route that reads ``model`` itself."""
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": model.model_json_schema()}},
        }
    }
