"""An engine's refusal as the caller's error: its own 4xx a 4xx naming the parameter, a prompt
past the context OpenAI's ``context_length_exceeded``, a failure its own code."""

from __future__ import annotations

import json

import aiohttp
import pytest

from ficc.adapters.engines.errors import status_error, transport_error
from ficc.base import errors as e


def _openai_error(message: str, param: str | None = None, code: str | None = None) -> bytes:
    body = {"message": message, "type": "invalid_request_error", "param": param, "code": code}
    return json.dumps({"error": body}).encode()


def test_an_engines_400_names_the_parameter_it_names() -> None:
    error = status_error(400, _openai_error("temperature must be at most 2", "temperature"))
    assert type(error) is e.InvalidInput
    assert error.status == 400
    assert error.details == {"engine_status": 400, "field": "temperature"}
    assert e.render(error, e.ErrorShape.OPENAI)["error"]["param"] == "temperature"


def test_llama_cpps_validation_500_is_a_400_naming_the_parameter() -> None:
    text = (
        "1 validation error:\n  {'type': 'literal_error', 'loc': ('body', 'messages', 0, "
        "'role'), 'msg': 'Input should be 'system'', 'input': 'developer'}"
    )
    error = status_error(500, json.dumps({"error": {"message": text}}).encode())
    assert isinstance(error, e.InvalidInput)
    assert error.details["field"] == "messages[0].role"


@pytest.mark.parametrize(
    "body",
    [
        # llama.cpp's server, asked plainly.
        _openai_error(
            "This model's maximum context length is 2048 tokens. However, you requested 3004 "
            "tokens (3000 in the messages, 4 in the completion).",
            "messages",
            "context_length_exceeded",
        ),
        # vLLM's older shape, without a code.
        json.dumps(
            {
                "object": "error",
                "message": "This model's maximum context length is 2048 tokens. However, you "
                "requested 3004 tokens in the messages.",
                "type": "BadRequestError",
                "param": None,
                "code": 400,
            }
        ).encode(),
    ],
)
def test_a_prompt_past_the_context_is_context_length_exceeded(body: bytes) -> None:
    error = status_error(400, body)
    assert isinstance(error, e.ContextLengthExceeded)
    assert (error.code, error.status, error.details["field"]) == (
        "context_length_exceeded",
        400,
        "messages",
    )


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        (500, e.EngineUnavailable),
        (503, e.EngineUnavailable),
        (401, e.EngineUnavailable),
        (429, e.LimitExceeded),
        (413, e.TooLarge),
        (404, e.InvalidInput),
    ],
)
def test_other_answers_keep_who_can_act_on_them(status: int, cls: type[e.FiccError]) -> None:
    """A failed or misconfigured engine is the operator's (503, never ``peer_unreachable``);
    what the caller sent is the caller's (4xx)."""
    error = status_error(status, _openai_error("no"))
    assert type(error) is cls
    assert error.code != "peer_unreachable"


def test_a_parameter_name_that_is_not_a_path_is_not_shown() -> None:
    error = status_error(400, _openai_error("bad", "/srv/models/x.gguf"))
    assert "field" not in error.details


@pytest.mark.parametrize(
    ("failure", "message"),
    [
        (aiohttp.ConnectionTimeoutError(), "the engine did not answer in time"),
        (aiohttp.SocketTimeoutError(), "the engine did not answer in time"),
        (TimeoutError(), "the engine did not answer in time"),
        (aiohttp.ServerDisconnectedError(), "the connection to the engine broke"),
        (aiohttp.ClientPayloadError("cut"), "the connection to the engine broke"),
    ],
)
def test_an_http_failure_is_the_engine_being_unavailable(
    failure: aiohttp.ClientError | TimeoutError, message: str
) -> None:
    error = transport_error(failure)
    assert type(error) is e.EngineUnavailable
    assert error.message == message
