"""OpenAI request bodies: bounded before decoding, each known parameter checked, others kept."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ficc.base.errors import InvalidInput, TooLarge
from ficc.domain.openai_requests import (
    CHAT_COMPLETIONS_PATH,
    COMPLETIONS_PATH,
    MAX_NESTING_DEPTH,
    check_request,
    nesting_depth_exceeds,
    parse_request_body,
    usage_requested,
)

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
def test_a_deeply_nested_body_is_refused_before_the_decoder_runs(raw: bytes) -> None:
    with pytest.raises(InvalidInput) as refused:
        parse_request_body(raw)
    assert refused.value.details["field"] == "body"
    assert str(MAX_NESTING_DEPTH) in refused.value.message


def test_brackets_inside_strings_do_not_count_as_nesting() -> None:
    text = "[" * 10_000 + '\\"{'
    body = parse_request_body(json.dumps({"model": "m", "prompt": text}).encode())
    assert body["prompt"] == text


def test_the_deepest_allowed_body_decodes() -> None:
    raw = b'{"a":' * MAX_NESTING_DEPTH + b"1" + b"}" * MAX_NESTING_DEPTH
    assert not nesting_depth_exceeds(raw)
    assert parse_request_body(raw)["a"]
    assert nesting_depth_exceeds(b"[" + raw + b"]")


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
KNOWN = ["messages", "prompt", "max_tokens", "n", "temperature", "stop", "logit_bias", "tools"]


@given(st.dictionaries(st.sampled_from(KNOWN) | st.text(max_size=4), JSON_VALUES, max_size=6))
def test_any_json_body_is_passed_or_refused_as_invalid_input(body: dict[str, Any]) -> None:
    for path in (CHAT_COMPLETIONS_PATH, COMPLETIONS_PATH):
        with contextlib.suppress(InvalidInput):
            check_request(path, body)
