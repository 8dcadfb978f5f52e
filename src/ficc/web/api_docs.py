"""The OpenAPI document at ``/api/v1/openapi.json`` and a page at ``/api/v1/docs`` that lists it.

The page is rendered on the server from the document itself: no JavaScript and nothing from a
CDN, so it works on a machine without internet access and under a strict content policy. Every
API route also documents the contract's error envelope for its 4xx and 5xx answers.
"""

from __future__ import annotations

import html
from typing import Any, Final

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from pydantic import BaseModel

API_PREFIX: Final = "/api/v1"
OPENAPI_URL: Final = f"{API_PREFIX}/openapi.json"
DOCS_URL: Final = f"{API_PREFIX}/docs"
HTTP_METHODS: Final = ("get", "put", "post", "patch", "delete")

router = APIRouter(tags=["operations"])


class ErrorBody(BaseModel):
    code: str
    message: str
    details: dict[str, Any]


class ErrorEnvelope(BaseModel):
    """The contract's error shape (CONTRACT §2)."""

    error: ErrorBody


def _refusals(envelope: type[BaseModel], description: str) -> dict[int | str, dict[str, Any]]:
    """``responses=`` documenting every 4xx and 5xx answer as ``envelope``."""
    refused: dict[str, Any] = {"model": envelope, "description": description}
    return {"4XX": refused, "5XX": refused}


ERROR_RESPONSES: Final = _refusals(ErrorEnvelope, "Refused: the error envelope.")
"""Documented on every API route: any refusal has the contract's error envelope."""


class OpenAIError(BaseModel):
    message: str
    type: str
    code: str | None
    param: str | None
    """The request parameter the error names, where it names one."""


class OpenAIErrorEnvelope(BaseModel):
    """OpenAI's error shape, which the OpenAI-compatible URLs answer in (CONTRACT §4)."""

    error: OpenAIError


OPENAI_ERROR_RESPONSES: Final = _refusals(OpenAIErrorEnvelope, "Refused: OpenAI's error shape.")
"""In place of :data:`ERROR_RESPONSES` on the OpenAI-compatible routes."""


def _operation_rows(document: dict[str, Any]) -> str:
    rows = []
    for path, item in sorted(document.get("paths", {}).items()):
        for method in HTTP_METHODS:
            operation = item.get(method)
            if operation is None:
                continue
            body = operation.get("requestBody", {}).get("content", {}).get("application/json", {})
            schema = body.get("schema", {}).get("$ref", "").rsplit("/", 1)[-1]
            rows.append(
                "<tr><td><code>{}</code></td><td><code>{}</code></td><td>{}</td><td>{}</td></tr>".format(
                    method.upper(),
                    html.escape(path),
                    html.escape(str(operation.get("summary", ""))),
                    html.escape(schema),
                )
            )
    return "\n".join(rows)


@router.get(DOCS_URL, response_class=HTMLResponse, include_in_schema=False)
async def docs(request: Request) -> HTMLResponse:
    document = request.app.openapi()
    title = html.escape(f"{document['info']['title']} {document['info']['version']} API")
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>body{{font-family:sans-serif;margin:2em}}td,th{{padding:.2em .8em;text-align:left}}
tr:nth-child(even){{background:#f4f4f4}}</style></head>
<body><h1>{title}</h1>
<p>The machine-readable document is <a href="{OPENAPI_URL}">{OPENAPI_URL}</a>.
Errors use the envelope <code>{{"error": {{"code", "message", "details"}}}}</code>.</p>
<table><thead><tr><th>Method</th><th>Path</th><th>Summary</th><th>Request body</th></tr></thead>
<tbody>
{_operation_rows(document)}
</tbody></table></body></html>"""
    return HTMLResponse(page)
