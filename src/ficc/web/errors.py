"""Errors at the HTTP boundary: FiccError → status and the contract's envelope, once.

Under the OpenAI-compatible URLs the same errors take OpenAI's shape. Nothing internal leaks:
unexpected exceptions are logged with a request id and answered with that id only.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ficc.adapters.logs import current_request_id, new_request_id
from ficc.base import errors as e
from ficc.web.observability import REQUEST_ID_HEADER, request_id_of

log = logging.getLogger("ficc.web")

OPENAI_PATH = re.compile(r"^/api/v1/(inference|federation/peers/[^/]+)/v1(/|$)")


def _is_openai_path(path: str) -> bool:
    return OPENAI_PATH.match(path) is not None


def envelope(error: e.FiccError) -> dict[str, Any]:
    """FICC's envelope of ``error`` (see :func:`ficc.base.errors.render`)."""
    return e.render(error, e.ErrorShape.FICC)


def error_body(error: e.FiccError, path: str, request_id: str | None) -> dict[str, Any]:
    """The body answering ``error`` on ``path``: OpenAI's shape under the compatible URLs,
    FICC's envelope (with the request's ID) everywhere else."""
    if _is_openai_path(path):
        return e.render(error, e.ErrorShape.OPENAI)
    added = None if request_id is None else {"request_id": request_id}
    return e.render(error, e.ErrorShape.FICC, details=added)


def error_response(request: Request, error: e.FiccError) -> JSONResponse:
    status = error.status
    body = error_body(error, request.url.path, request_id_of(request.scope))
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else {}
    if isinstance(error, e.LimitExceeded) and "retry_after_seconds" in error.details:
        headers["Retry-After"] = str(error.details["retry_after_seconds"])
    return JSONResponse(body, status_code=status, headers=headers or None)


def _field_of(location: tuple[Any, ...] | list[Any]) -> str:
    parts = [str(part) for part in location if part not in ("body", "query", "path", "header")]
    text = ""
    for part in parts:
        text += f"[{part}]" if part.isdigit() else (f".{part}" if text else part)
    return text or "body"


def validation_error(exc: RequestValidationError) -> e.InvalidInput:
    """The first problem, in one sentence naming the field and the rule."""
    problems = exc.errors()
    if not problems:
        return e.InvalidInput("the request body is invalid", field="body")
    first = problems[0]
    kind = str(first.get("type", ""))
    field = _field_of(first.get("loc", ()))
    if kind == "json_invalid":
        return e.InvalidInput("the request body is not valid JSON", field="body")
    if kind == "extra_forbidden":
        return e.InvalidInput(f"{field} is not a known field", field=field)
    if kind == "missing":
        return e.InvalidInput(f"{field} is required", field=field)
    message = str(first.get("msg", "is invalid"))
    return e.InvalidInput(f"{field}: {message}", field=field)


def unexpected_error_response(request: Request, exc: Exception) -> JSONResponse:
    """A 500 naming only the request ID; the exception is logged under that ID."""
    # Outside the request middleware: the ID is read from the scope it left.
    request_id = request_id_of(request.scope) or new_request_id()
    current_request_id.set(request_id)
    log.error("unhandled error in request %s", request_id, exc_info=exc)
    error = e.FiccError(
        f"internal error; the server log has the details under request id {request_id}",
        details={"request_id": request_id},
    )
    body = error_body(error, request.url.path, None)  # its details name the request ID
    return JSONResponse(body, status_code=500, headers={REQUEST_ID_HEADER: request_id})


def install_error_handlers(app: FastAPI) -> None:
    async def on_ficc_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, e.FiccError)
        return error_response(request, exc)

    async def on_validation_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        return error_response(request, validation_error(exc))

    async def on_http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        error: e.FiccError
        if exc.status_code == 404:
            error = e.NotFound("no such route")
        elif exc.status_code == 405:
            error = e.InvalidInput("this method is not allowed on this route", field="method")
        else:
            error = e.InvalidInput("the request was refused", field="request")
        response = error_response(request, error)
        if exc.status_code == 405:
            response.status_code = 405
        return response

    async def on_unexpected(request: Request, exc: Exception) -> JSONResponse:
        return unexpected_error_response(request, exc)

    app.add_exception_handler(e.FiccError, on_ficc_error)
    app.add_exception_handler(RequestValidationError, on_validation_error)
    app.add_exception_handler(StarletteHTTPException, on_http_error)
    app.add_exception_handler(Exception, on_unexpected)
