"""The official client's calls, made on the engine itself and on FICC's compatible URLs.

A compatible URL answers as the API it imitates: the same fields with the same values as the
engine's own plain answer (ids and timestamps aside), usage included, and OpenAI's 400 shape for
each parameter OpenAI refuses. Answers are compared at temperature 0 after the engine's prompt
cache is warm: llama.cpp answers the first call for a prompt slightly differently.
"""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
PROMPT = "The capital of France is"
CHAT_ARGS: dict[str, Any] = {"messages": QUESTION, "max_tokens": 12, "temperature": 0}
COMPLETION_ARGS: dict[str, Any] = {"prompt": PROMPT, "max_tokens": 6, "temperature": 0}
VOLATILE = frozenset({"id", "created", "model", "system_fingerprint"})
"""Differs between two calls or names the model as each URL knows it."""

BAD_PARAMETERS: list[tuple[dict[str, Any], str]] = [
    ({"max_tokens": -3}, "max_tokens"),
    ({"max_completion_tokens": 0}, "max_completion_tokens"),
    ({"n": 0}, "n"),
    ({"n": 129}, "n"),
    ({"temperature": 2.5}, "temperature"),
    ({"top_p": 1.5}, "top_p"),
    ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ({"logit_bias": {"42": 101}}, "logit_bias"),
    ({"logit_bias": {"hello": 1}}, "logit_bias"),
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "robot", "content": "Hi"}]}, "messages[0].role"),
]
DEEP_BODIES = [b'{"a":' * 5000 + b"1" + b"}" * 5000, b"[" * 100_000]


def client_on(
    base_url: str, api_key: str = "unused", http_client: httpx.Client | None = None
) -> OpenAI:
    """The official client on ``base_url``; it never retries on its own."""
    return OpenAI(
        base_url=base_url, api_key=api_key, max_retries=0, timeout=120, http_client=http_client
    )


def stable(answer: Any) -> dict[str, Any]:
    """An answer as a dict without the fields that differ between two calls."""
    data = answer.model_dump(exclude_none=False) if hasattr(answer, "model_dump") else answer
    return {key: value for key, value in data.items() if key not in VOLATILE}


def warm(engine: OpenAI, model: str) -> None:
    """One call per prompt so that later calls are answered from a warm prompt cache."""
    engine.chat.completions.create(model=model, **CHAT_ARGS)
    engine.completions.create(model=model, **COMPLETION_ARGS)


def plain_chat(client: OpenAI, model: str) -> dict[str, Any]:
    return stable(client.chat.completions.create(model=model, **CHAT_ARGS))


def plain_completion(client: OpenAI, model: str) -> dict[str, Any]:
    return stable(client.completions.create(model=model, **COMPLETION_ARGS))


def streamed_chat_with_usage(client: OpenAI, model: str) -> tuple[str, str | None, Any]:
    """The streamed text, finish reason and the final usage chunk's usage (None if absent)."""
    pieces: list[str] = []
    finish = None
    usage = None
    chunks = 0
    with client.chat.completions.create(
        model=model, stream=True, stream_options={"include_usage": True}, **CHAT_ARGS
    ) as stream:
        for chunk in stream:
            chunks += 1
            if chunk.usage is not None:
                assert chunk.choices == [], "usage comes in a chunk of its own"
                usage = chunk.usage.model_dump()
                continue
            if chunk.choices:
                pieces.append(chunk.choices[0].delta.content or "")
                finish = chunk.choices[0].finish_reason or finish
    assert chunks > 1
    return "".join(pieces), finish, usage


def streamed_chat_without_usage(client: OpenAI, model: str) -> list[Any]:
    """Every chunk's usage field of a stream that did not ask for usage."""
    with client.chat.completions.create(model=model, stream=True, **CHAT_ARGS) as stream:
        return [chunk.usage for chunk in stream]


def assert_refused_naming(client: OpenAI, model: str, change: dict[str, Any], param: str) -> None:
    """A 400 in OpenAI's shape whose ``param`` is the bad parameter."""
    arguments = {**CHAT_ARGS, **change}
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model=model, **arguments)
    body = refused.value.body
    assert isinstance(body, dict), body
    assert body["type"] == "invalid_request_error"
    assert body["param"] == param
    assert param.split("[")[0] in body["message"]
    assert set(body) >= {"message", "type", "param", "code"}


def assert_deep_body_refused(url: str, token: str) -> None:
    """A deeply nested body is a 400 naming the body, not a 500."""
    for raw in DEEP_BODIES:
        response = httpx.post(
            url,
            content=raw,
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
            timeout=60,
        )
        assert response.status_code == 400, response.text[:300]
        error = response.json()["error"]
        assert error["type"] == "invalid_request_error"
        assert error["param"] == "body"


# --- parameters a runtime honours, refuses, or FICC makes up for ----------------------------

LOGPROB_CHAT_ARGS: dict[str, Any] = {**CHAT_ARGS, "logprobs": True, "top_logprobs": 2}
LOGPROB_COMPLETION_ARGS: dict[str, Any] = {**COMPLETION_ARGS, "logprobs": 2}
CITY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
}
JSON_SCHEMA_FORMAT: dict[str, Any] = {
    "type": "json_schema",
    "json_schema": {"name": "city", "schema": CITY_SCHEMA},
}
ENGINE_SCHEMA_FORMAT: dict[str, Any] = {"type": "json_object", "schema": CITY_SCHEMA}
"""What llama.cpp's server knows instead of OpenAI's ``json_schema`` (which it answers 500)."""
WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather of a city",
        "parameters": CITY_SCHEMA,
    },
}
NAMED_TOOL_CHOICE: dict[str, Any] = {"type": "function", "function": {"name": "get_weather"}}
TOOL_CHAT_ARGS: dict[str, Any] = {
    **CHAT_ARGS,
    "max_tokens": 30,
    "tools": [WEATHER_TOOL],
    "tool_choice": NAMED_TOOL_CHOICE,
}
LLAMA_CPP_REFUSALS: list[tuple[str, dict[str, Any], str]] = [
    ("chat", {"n": 2}, "n"),
    ("completions", {"n": 2}, "n"),
    ("completions", {"best_of": 2}, "best_of"),
    ("chat", {"tools": [WEATHER_TOOL]}, "tool_choice"),
    ("chat", {"tools": [WEATHER_TOOL], "tool_choice": "auto"}, "tool_choice"),
    ("chat", {"tools": [WEATHER_TOOL], "tool_choice": "required"}, "tool_choice"),
]
"""What llama.cpp's server would drop silently (one choice whatever n; tools unseen by the
model unless one is named): a 400 naming the parameter instead."""
EMBEDDING_INPUT = ["The capital of France", "Paris"]


def without_tool_call_ids(answer: dict[str, Any]) -> dict[str, Any]:
    """An answer whose tool-call IDs (made from the response's ID) are blanked."""
    choices = []
    for choice in answer["choices"]:
        message = dict(choice["message"])
        message["tool_calls"] = [
            {**call, "id": None} for call in message.get("tool_calls") or []
        ] or None
        choices.append({**choice, "message": message})
    return {**answer, "choices": choices}


def assert_runtime_refusal(
    client: OpenAI, model: str, kind: str, change: dict[str, Any], param: str
) -> None:
    """A 400 in OpenAI's shape naming ``param`` and the runtime that cannot honour it."""
    if kind == "chat":
        create: Any = client.chat.completions.create
        arguments = {**CHAT_ARGS, **change}
    else:
        create = client.completions.create
        arguments = {**COMPLETION_ARGS, **change}
    with pytest.raises(openai.BadRequestError) as refused:
        create(model=model, **arguments)
    body = refused.value.body
    assert isinstance(body, dict), body
    assert body["type"] == "invalid_request_error"
    assert body["param"] == param
    assert "llama.cpp" in body["message"]


def pooled_engine_embeddings(engine_url: str, api_key: str, model: str) -> dict[str, Any]:
    """The engine's own embeddings answer, its per-token vectors averaged as FICC does."""
    answer = httpx.post(
        f"{engine_url}/v1/embeddings",
        json={"model": model, "input": EMBEDDING_INPUT},
        headers={"Authorization": f"Bearer {api_key}"},
        timeout=60,
    )
    assert answer.status_code == 200, answer.text[:300]
    value: dict[str, Any] = answer.json()
    for item in value["data"]:
        vectors = item["embedding"]
        if vectors and isinstance(vectors[0], list):
            width = len(vectors[0])
            item["embedding"] = [
                sum(float(v[i]) for v in vectors) / len(vectors) for i in range(width)
            ]
    return value


def assert_same_embeddings(got: dict[str, Any], expected: dict[str, Any]) -> None:
    """Field by field; vectors within float32's precision (the client asks for base64)."""
    assert got["object"] == "list"
    assert got["usage"] == expected["usage"]
    assert [(d["object"], d["index"]) for d in got["data"]] == [
        (d["object"], d["index"]) for d in expected["data"]
    ]
    for mine, theirs in zip(got["data"], expected["data"], strict=True):
        assert len(mine["embedding"]) == len(theirs["embedding"]) > 0
        assert mine["embedding"] == pytest.approx(theirs["embedding"], rel=1e-5, abs=1e-6)


def assert_models_shape(listing: dict[str, Any]) -> None:
    """OpenAI's model list: exactly its four fields per model, ``created`` a real time."""
    assert listing["object"] == "list"
    for item in listing["data"]:
        assert set(item) == {"id", "object", "created", "owned_by"}
        assert item["object"] == "model"
        assert isinstance(item["created"], int)
        assert item["created"] > 1_600_000_000


def counted_from_text(answer: dict[str, Any]) -> dict[str, Any]:
    """An answer whose completion count is left out: under a grammar (a JSON schema, a named
    tool) llama.cpp's tokens re-tokenize more compactly than generated, and FICC counts the
    answer's text (docs/openai-compat.md, Usage)."""
    usage = {
        k: v for k, v in answer["usage"].items() if k not in ("completion_tokens", "total_tokens")
    }
    return {**answer, "usage": usage}
