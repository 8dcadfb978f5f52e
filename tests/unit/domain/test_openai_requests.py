"""OpenAI request bodies: bounded before decoding, each known parameter checked, others kept."""

from __future__ import annotations

import base64
import contextlib
import json
import struct
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ficc.base.errors import InvalidInput, TooLarge
from ficc.domain.inference import RuntimeName
from ficc.domain.openai_answers import shape_answer
from ficc.domain.openai_requests import (
    CHAT_COMPLETIONS_PATH,
    COMPLETIONS_PATH,
    EMBEDDINGS_PATH,
    MAX_NESTING_DEPTH,
    check_request,
    parse_request_body,
    usage_requested,
)
from ficc.domain.openai_runtimes import RUNTIME_CAPABILITIES, check_capabilities, engine_body

CHAT: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "Hi"}]}
COMPLETION: dict[str, Any] = {"model": "m", "prompt": "Once"}

BAD_CHAT_PARAMETERS: list[tuple[dict[str, Any], str]] = [
    ({"max_tokens": -3}, "max_tokens"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"max_tokens": True}, "max_tokens"),
    ({"max_tokens": 1.5}, "max_tokens"),
    ({"max_completion_tokens": 0}, "max_completion_tokens"),
    ({"n": 0}, "n"),
    ({"n": 129}, "n"),
    ({"temperature": 2.5}, "temperature"),
    ({"temperature": -0.1}, "temperature"),
    ({"temperature": "hot"}, "temperature"),
    ({"top_p": 1.5}, "top_p"),
    ({"presence_penalty": 3}, "presence_penalty"),
    ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ({"stop": 7}, "stop"),
    ({"stop": ["a", 1]}, "stop"),
    ({"logit_bias": {"abc": 1}}, "logit_bias"),
    ({"logit_bias": {"42": 101}}, "logit_bias"),
    ({"logit_bias": {"42": "x"}}, "logit_bias"),
    ({"logit_bias": [1]}, "logit_bias"),
    ({"messages": []}, "messages"),
    ({"messages": "Hi"}, "messages"),
    ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    ({"messages": [{"role": "user"}]}, "messages[0].content"),
    ({"messages": ["Hi"]}, "messages[0]"),
    ({"messages": [{"role": ["user"], "content": "x"}]}, "messages[0].role"),
    ({"response_format": {"type": ["text"]}}, "response_format"),
    ({"tool_choice": ["auto"]}, "tool_choice"),
    ({"stream": "yes"}, "stream"),
    ({"stream_options": {"include_usage": True}}, "stream_options"),
    ({"stream": True, "stream_options": {"include_usage": 1}}, "stream_options.include_usage"),
    ({"logprobs": 3}, "logprobs"),
    ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ({"top_logprobs": 2}, "top_logprobs"),
    ({"response_format": {"type": "yaml"}}, "response_format"),
    ({"tools": {"type": "function"}}, "tools"),
    ({"tool_choice": "sometimes"}, "tool_choice"),
    ({"seed": "1"}, "seed"),
    ({"user": 1}, "user"),
    ({"model": 1}, "model"),
]


@pytest.mark.parametrize(("change", "param"), BAD_CHAT_PARAMETERS)
def test_a_bad_chat_parameter_is_refused_naming_it(change: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        check_request(CHAT_COMPLETIONS_PATH, {**CHAT, **change})
    assert refused.value.details["field"] == param
    assert param in refused.value.message


@pytest.mark.parametrize(
    ("change", "param"),
    [
        ({"prompt": 5}, "prompt"),
        ({"prompt": []}, "prompt"),
        ({"prompt": ["a", 1]}, "prompt"),
        ({"logprobs": 6}, "logprobs"),
        ({"echo": "no"}, "echo"),
        ({"max_tokens": -3}, "max_tokens"),
        ({"best_of": 0}, "best_of"),
    ],
)
def test_a_bad_completion_parameter_is_refused_naming_it(
    change: dict[str, Any], param: str
) -> None:
    with pytest.raises(InvalidInput) as refused:
        check_request(COMPLETIONS_PATH, {**COMPLETION, **change})
    assert refused.value.details["field"] == param


def test_good_bodies_pass_and_unknown_fields_are_not_looked_at() -> None:
    chat = {
        **CHAT,
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "developer", "content": [{"type": "text", "text": "Hi"}]},
            {"role": "assistant", "content": None, "tool_calls": []},
            {"role": "tool", "content": "42", "tool_call_id": "c1"},
        ],
        "max_tokens": 1,
        "n": 128,
        "temperature": 0,
        "top_p": 1,
        "stop": ["a", "b", "c", "d"],
        "logit_bias": {"0": -100, "42": 100.0},
        "stream": True,
        "stream_options": {"include_usage": True},
        "logprobs": True,
        "top_logprobs": 20,
        "response_format": {"type": "json_object"},
        "tools": [{"type": "function", "function": {"name": "f"}}],
        "tool_choice": {"type": "function", "function": {"name": "f"}},
        "seed": -1,
        "max_tokens_typo": -3,
        "mirostat_mode": 2,
        "temperature_unknown": [[[]]],
    }
    before = json.dumps(chat, sort_keys=True)
    check_request(CHAT_COMPLETIONS_PATH, chat)
    assert json.dumps(chat, sort_keys=True) == before
    for prompt in ("x", ["x", "y"], [1, 2], [[1], [2, 3]]):
        check_request(COMPLETIONS_PATH, {**COMPLETION, "prompt": prompt, "logprobs": 5})
    check_request(CHAT_COMPLETIONS_PATH, {**CHAT, "max_tokens": None, "stop": None})


def test_an_unknown_path_is_refused() -> None:
    with pytest.raises(InvalidInput):
        check_request("/v1/embeddings", CHAT)


@pytest.mark.parametrize(
    "raw",
    [
        b'{"a":' * 5000 + b"1" + b"}" * 5000,
        b"[" * 100_000,
        b'{"x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    ],
)
def test_a_body_nested_past_the_decoders_bound_is_refused_naming_the_depth(raw: bytes) -> None:
    with pytest.raises(InvalidInput) as refused:
        parse_request_body(raw)
    assert refused.value.details["field"] == "body"
    assert str(MAX_NESTING_DEPTH) in refused.value.message


def test_brackets_inside_strings_do_not_count_as_nesting() -> None:
    text = "[" * 10_000 + '\\"{'
    body = parse_request_body(json.dumps({"model": "m", "prompt": text}).encode())
    assert body["prompt"] == text


def test_the_deepest_allowed_body_decodes_and_one_level_more_is_refused() -> None:
    inner = b'{"a":' * (MAX_NESTING_DEPTH - 1) + b"1" + b"}" * (MAX_NESTING_DEPTH - 1)
    deepest = parse_request_body(inner)
    check_request(CHAT_COMPLETIONS_PATH, {**CHAT, "x": deepest})
    with pytest.raises(InvalidInput) as refused:
        check_request(CHAT_COMPLETIONS_PATH, {**CHAT, "x": [deepest]})
    assert str(MAX_NESTING_DEPTH) in refused.value.message


def test_a_decoded_body_nesting_too_deep_is_refused_by_the_check() -> None:
    deep: Any = 1
    for _ in range(MAX_NESTING_DEPTH + 1):
        deep = [deep]
    with pytest.raises(InvalidInput) as refused:
        check_request(CHAT_COMPLETIONS_PATH, {**CHAT, "extra": deep})
    assert refused.value.details["field"] == "body"


@pytest.mark.parametrize("raw", [b"", b"{", b"[1]", b'"x"', b'{"a": NaN}', b"\xff"])
def test_a_body_that_is_not_a_json_object_is_refused(raw: bytes) -> None:
    with pytest.raises(InvalidInput) as refused:
        parse_request_body(raw)
    assert refused.value.details["field"] == "body"


def test_a_body_over_the_size_bound_is_refused_before_anything_else() -> None:
    with pytest.raises(TooLarge):
        parse_request_body(b"[" * 101, max_bytes=100)


@given(st.binary(max_size=300))
def test_any_bytes_give_an_object_or_invalid_input(raw: bytes) -> None:
    with contextlib.suppress(InvalidInput):
        assert isinstance(parse_request_body(raw), dict)


def test_usage_is_requested_only_by_include_usage_true() -> None:
    assert usage_requested({"stream_options": {"include_usage": True}})
    assert not usage_requested({"stream_options": {"include_usage": False}})
    assert not usage_requested({"stream_options": None})
    assert not usage_requested({})


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=10,
)
KNOWN = [
    "messages",
    "prompt",
    "input",
    "max_tokens",
    "n",
    "temperature",
    "stop",
    "logit_bias",
    "tools",
    "encoding_format",
    "response_format",
    "tool_choice",
]


@given(st.dictionaries(st.sampled_from(KNOWN) | st.text(max_size=4), JSON_VALUES, max_size=6))
def test_any_json_body_is_passed_or_refused_as_invalid_input(body: dict[str, Any]) -> None:
    for path in (CHAT_COMPLETIONS_PATH, COMPLETIONS_PATH, EMBEDDINGS_PATH):
        with contextlib.suppress(InvalidInput):
            check_request(path, body)


# --- embeddings, and what each runtime does with what passed ------------------------------

EMBEDDING: dict[str, Any] = {"model": "m", "input": "Hello"}
LLAMA = RuntimeName.LLAMA_CPP
TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {}}}
NAMED = {"type": "function", "function": {"name": "get_weather"}}


@pytest.mark.parametrize(
    ("change", "param"),
    [
        ({"input": ""}, "input"),
        ({"input": []}, "input"),
        ({"input": ["a", 1]}, "input"),
        ({"input": ["a"] * 2049}, "input"),
        ({"encoding_format": "hex"}, "encoding_format"),
        ({"encoding_format": {}}, "encoding_format"),
        ({"encoding_format": ["float"]}, "encoding_format"),
        ({"dimensions": 0}, "dimensions"),
        ({"stream": True}, "stream"),
    ],
)
def test_a_bad_embeddings_parameter_is_refused_naming_it(
    change: dict[str, Any], param: str
) -> None:
    with pytest.raises(InvalidInput) as refused:
        check_request(EMBEDDINGS_PATH, {**EMBEDDING, **change})
    assert refused.value.details["field"] == param


def test_a_json_schema_format_needs_a_named_schema() -> None:
    for bad, param in [
        ({"type": "json_schema"}, "response_format.json_schema"),
        (
            {"type": "json_schema", "json_schema": {"schema": {}}},
            "response_format.json_schema.name",
        ),
        (
            {"type": "json_schema", "json_schema": {"name": "x", "schema": []}},
            "response_format.json_schema.schema",
        ),
    ]:
        with pytest.raises(InvalidInput) as refused:
            check_request(CHAT_COMPLETIONS_PATH, {**CHAT, "response_format": bad})
        assert refused.value.details["field"] == param


@pytest.mark.parametrize(
    ("path", "change", "param"),
    [
        (CHAT_COMPLETIONS_PATH, {"n": 2}, "n"),
        (COMPLETIONS_PATH, {"n": 3}, "n"),
        (COMPLETIONS_PATH, {"best_of": 2}, "best_of"),
        (CHAT_COMPLETIONS_PATH, {"tools": [TOOL]}, "tool_choice"),
        (CHAT_COMPLETIONS_PATH, {"tools": [TOOL], "tool_choice": "auto"}, "tool_choice"),
        (CHAT_COMPLETIONS_PATH, {"tools": [TOOL], "tool_choice": "required"}, "tool_choice"),
        (EMBEDDINGS_PATH, {"dimensions": 8}, "dimensions"),
        (EMBEDDINGS_PATH, {"input": [[1, 2, 3]]}, "input"),
        (EMBEDDINGS_PATH, {"input": [1, 2, 3]}, "input"),
    ],
)
def test_what_llama_cpp_would_drop_silently_is_refused_naming_it(
    path: str, change: dict[str, Any], param: str
) -> None:
    base = (
        EMBEDDING
        if path == EMBEDDINGS_PATH
        else CHAT
        if path == CHAT_COMPLETIONS_PATH
        else COMPLETION
    )
    body = {**base, **change}
    check_request(path, body)
    options = {"embeddings": True} if path == EMBEDDINGS_PATH else {}
    with pytest.raises(InvalidInput) as refused:
        check_capabilities(LLAMA, options, path, body)
    assert refused.value.details["field"] == param
    assert "llama.cpp" in refused.value.message
    # The runtimes that honour it take it.
    for runtime in (RuntimeName.VLLM, RuntimeName.OPENAI):
        check_capabilities(runtime, {}, path, body)


def test_what_llama_cpp_honours_passes() -> None:
    for body in [
        {**CHAT, "n": 1, "logprobs": True, "top_logprobs": 2, "seed": 7, "user": "u"},
        {**CHAT, "tools": [TOOL], "tool_choice": NAMED},
        {**CHAT, "tools": [TOOL], "tool_choice": "none"},
        {**CHAT, "response_format": {"type": "json_object"}},
    ]:
        check_capabilities(LLAMA, {}, CHAT_COMPLETIONS_PATH, body)
    check_capabilities(LLAMA, {}, COMPLETIONS_PATH, {**COMPLETION, "logprobs": 2, "best_of": 1})
    check_capabilities(LLAMA, {"embeddings": True}, EMBEDDINGS_PATH, {**EMBEDDING, "input": ["a"]})


def test_a_llama_cpp_embeddings_service_serves_embeddings_only() -> None:
    with pytest.raises(InvalidInput) as refused:
        check_capabilities(LLAMA, {"embeddings": True}, CHAT_COMPLETIONS_PATH, CHAT)
    assert refused.value.details["field"] == "model"
    assert "embeddings only" in refused.value.message
    with pytest.raises(InvalidInput) as refused:
        check_capabilities(LLAMA, {}, EMBEDDINGS_PATH, EMBEDDING)
    assert refused.value.details["field"] == "model"
    assert "options.embeddings" in refused.value.message


def test_every_runtime_has_its_capabilities_in_the_one_table() -> None:
    assert set(RUNTIME_CAPABILITIES) == set(RuntimeName)


def test_a_json_schema_reaches_llama_cpp_as_its_json_object_with_schema() -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    body = {
        **CHAT,
        "response_format": {"type": "json_schema", "json_schema": {"name": "c", "schema": schema}},
    }
    sent = engine_body(LLAMA, CHAT_COMPLETIONS_PATH, body)
    assert sent["response_format"] == {"type": "json_object", "schema": schema}
    assert body["response_format"]["type"] == "json_schema", "the caller's body is not changed"
    assert engine_body(RuntimeName.VLLM, CHAT_COMPLETIONS_PATH, body) == body


def test_llama_cpp_embeddings_are_pooled_and_encoded_as_openai_answers_them() -> None:
    body = {**EMBEDDING, "encoding_format": "base64"}
    assert "encoding_format" not in engine_body(LLAMA, EMBEDDINGS_PATH, body)
    per_token = {
        "object": "list",
        "data": [{"object": "embedding", "index": 0, "embedding": [[1.0, 2.0], [3.0, 4.0]]}],
    }
    pooled = shape_answer(LLAMA, EMBEDDINGS_PATH, EMBEDDING, per_token)
    assert pooled["data"] == [{"object": "embedding", "index": 0, "embedding": [2.0, 3.0]}]
    encoded = shape_answer(LLAMA, EMBEDDINGS_PATH, body, per_token)["data"][0]["embedding"]
    assert struct.unpack("<2f", base64.b64decode(encoded)) == (2.0, 3.0)
    flat = {"object": "list", "data": [{"object": "embedding", "index": 0, "embedding": [0.5]}]}
    assert shape_answer(LLAMA, EMBEDDINGS_PATH, EMBEDDING, flat) == flat


def test_a_developer_message_reaches_engines_that_know_only_system_as_system() -> None:
    """llama.cpp's server refused ``developer`` (OpenAI's current name for the system
    role) with a 500 that reached the caller as 502 ``peer_unreachable``."""
    body = {
        "model": "m",
        "messages": [
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": "Hi"},
        ],
    }
    check_request(CHAT_COMPLETIONS_PATH, body)
    for runtime in (RuntimeName.LLAMA_CPP, RuntimeName.VLLM):
        sent = engine_body(runtime, CHAT_COMPLETIONS_PATH, body)
        assert [m["role"] for m in sent["messages"]] == ["system", "user"]
        assert sent["messages"][0]["content"] == "Be brief."
    assert body["messages"][0]["role"] == "developer"  # the caller's body is left as it was
    fronted = engine_body(RuntimeName.OPENAI, CHAT_COMPLETIONS_PATH, body)
    assert fronted["messages"][0]["role"] == "developer"


def test_max_completion_tokens_reaches_llama_cpp_as_the_max_tokens_it_honours() -> None:
    """llama.cpp's server ignores ``max_completion_tokens``, OpenAI's current name for
    ``max_tokens``, which LangChain's ChatOpenAI sends: its answers ran past the limit."""
    body = {**CHAT, "max_completion_tokens": 8}
    sent = engine_body(LLAMA, CHAT_COMPLETIONS_PATH, body)
    assert sent["max_tokens"] == 8
    assert "max_completion_tokens" not in sent
    assert body == {**CHAT, "max_completion_tokens": 8}, "the caller's body is not changed"
    both = engine_body(LLAMA, CHAT_COMPLETIONS_PATH, {**body, "max_tokens": 5})
    assert both["max_tokens"] == 5, "the smaller bound holds"
    assert engine_body(RuntimeName.VLLM, CHAT_COMPLETIONS_PATH, body) == body
