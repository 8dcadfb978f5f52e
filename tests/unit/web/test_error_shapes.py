"""An unexpected error is answered in the shape the OpenAPI document gives its route: OpenAI's
under the OpenAI-compatible URLs, the contract's envelope elsewhere; only the request ID told."""

from __future__ import annotations

import json

import pytest
from starlette.requests import Request

from ficc.web.api_docs import ErrorEnvelope, OpenAIErrorEnvelope
from ficc.web.errors import unexpected_error_response


def _request(path: str) -> Request:
    return Request(
        {"type": "http", "method": "POST", "path": path, "headers": [], "query_string": b""}
    )


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/inference/v1/embeddings",
        "/api/v1/federation/peers/per_x/v1/chat/completions",
    ],
)
def test_a_bug_under_a_compatible_url_is_answered_in_openais_shape(path: str) -> None:
    response = unexpected_error_response(_request(path), RuntimeError("secret detail"))
    body = json.loads(bytes(response.body))
    assert response.status_code == 500
    error = OpenAIErrorEnvelope.model_validate(body).error
    assert (error.type, error.code, error.param) == ("server_error", "internal", None)
    assert response.headers["x-request-id"] in error.message
    assert "secret detail" not in bytes(response.body).decode()


def test_a_bug_elsewhere_is_answered_in_the_contracts_envelope() -> None:
    response = unexpected_error_response(_request("/api/v1/tokens"), RuntimeError("secret"))
    body = json.loads(bytes(response.body))
    envelope = ErrorEnvelope.model_validate(body)
    assert response.status_code == 500
    assert envelope.error.details == {"request_id": response.headers["x-request-id"]}
    assert "secret" not in bytes(response.body).decode()
