"""The plain answer joined from an engine's streamed chunks: table tests, no HTTP."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ficc.base.errors import EngineUnavailable
from ficc.domain.openai_answers import assemble_chat_completion, assemble_text_completion


def _chat(*choices: dict[str, Any], **head: Any) -> dict[str, Any]:
    return {"id": "c", "created": 7, "model": "m", **head, "choices": list(choices)}


def _delta(index: int = 0, finish: str | None = None, **delta: Any) -> dict[str, Any]:
    return {"index": index, "delta": delta, "finish_reason": finish}


@pytest.mark.parametrize(
    ("chunks", "message", "finish"),
    [
        (
            [_chat(_delta(role="assistant", content="He")), _chat(_delta(0, "stop", content="y"))],
            {"role": "assistant", "content": "Hey"},
            "stop",
        ),
        ([_chat(_delta(content="x"))], {"role": "assistant", "content": "x"}, None),
        ([_chat(_delta(0, "length"))], {"role": "assistant", "content": ""}, "length"),
        (
            [_chat(_delta(role="assistant", content="")), _chat(_delta(content=None))],
            {"role": "assistant", "content": ""},
            None,
        ),
        (
            [
                _chat(_delta(function_call={"name": "f", "arguments": "{"})),
                _chat(_delta(function_call={"arguments": "}"})),
            ],
            {"role": "assistant", "content": "", "function_call": {"name": "f", "arguments": "{}"}},
            None,
        ),
        (
            [_chat("not a choice", _delta(content="ok"))],
            {"role": "assistant", "content": "ok"},
            None,
        ),
    ],
)
def test_a_chat_answer_joins_its_deltas_in_order(
    chunks: list[dict[str, Any]], message: dict[str, Any], finish: str | None
) -> None:
    choice = assemble_chat_completion(chunks)["choices"][0]
    message = {**message, "refusal": None}
    assert choice == {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}


CHAT_COMPLETION_REQUIRED = {"id", "object", "created", "model", "choices"}
CHOICE_REQUIRED = {"index", "message", "logprobs", "finish_reason"}
MESSAGE_REQUIRED = {"role", "content", "refusal"}
TOOL_CALL_REQUIRED = {"id", "type", "function"}
"""What OpenAI's published OpenAPI document requires of ``CreateChatCompletionResponse``, its
choices, ``ChatCompletionResponseMessage`` and ``ChatCompletionMessageToolCall``."""


def test_a_chat_answer_has_every_field_openais_schema_requires() -> None:
    """A plain answer lacked ``message.refusal`` (required, nullable)."""
    plain = assemble_chat_completion([_chat(_delta(0, "stop", role="assistant", content="Hi"))])
    assert set(plain) >= CHAT_COMPLETION_REQUIRED
    (choice,) = plain["choices"]
    assert set(choice) >= CHOICE_REQUIRED
    assert set(choice["message"]) >= MESSAGE_REQUIRED
    assert choice["message"]["refusal"] is None
    call = {"index": 0, "id": "call_1", "function": {"name": "f", "arguments": "{}"}}
    tools = assemble_chat_completion([_chat(_delta(0, "tool_calls", tool_calls=[call]))])
    (message,) = [c["message"] for c in tools["choices"]]
    assert (message["content"], message["refusal"]) == (None, None)
    (made,) = message["tool_calls"]
    assert set(made) >= TOOL_CALL_REQUIRED
    assert made["type"] == "function"


def test_a_streamed_refusal_is_joined_into_the_messages_refusal() -> None:
    chunks = [_chat(_delta(refusal="I can")), _chat(_delta(0, "stop", refusal="not."))]
    message = assemble_chat_completion(chunks)["choices"][0]["message"]
    assert message["refusal"] == "I cannot."


@pytest.mark.parametrize(
    ("chunks", "header"),
    [
        (
            [_chat(_delta(content="a"))],
            {"id": "c", "object": "chat.completion", "created": 7, "model": "m"},
        ),
        (
            [_chat(_delta(content="a"), system_fingerprint="fp"), _chat(_delta(content="b"))],
            {
                "id": "c",
                "object": "chat.completion",
                "created": 7,
                "model": "m",
                "system_fingerprint": "fp",
            },
        ),
        (
            [
                _chat(_delta(content="a"), usage={"total_tokens": 1}),
                {**_chat(), "usage": {"total_tokens": 3}},
                {**_chat(), "usage": None},
            ],
            {
                "id": "c",
                "object": "chat.completion",
                "created": 7,
                "model": "m",
                "usage": {"total_tokens": 3},
            },
        ),
    ],
)
def test_a_chat_answer_takes_its_header_from_the_first_chunk_and_usage_from_the_last(
    chunks: list[dict[str, Any]], header: dict[str, Any]
) -> None:
    answer = assemble_chat_completion(chunks)
    assert {k: v for k, v in answer.items() if k != "choices"} == header


@pytest.mark.parametrize("assemble", [assemble_chat_completion, assemble_text_completion])
def test_no_chunk_at_all_is_an_engine_failure_not_an_empty_answer(assemble: Any) -> None:
    with pytest.raises(EngineUnavailable):
        assemble([])


@pytest.mark.parametrize(
    ("pieces", "text", "finish"),
    [
        ([("a", None), ("b", "stop")], "ab", "stop"),
        ([("", None), (None, "length")], "", "length"),
        ([("x", None)], "x", None),
    ],
)
def test_a_text_answer_joins_its_pieces(
    pieces: list[tuple[str | None, str | None]], text: str, finish: str | None
) -> None:
    chunks = [
        {"id": "t", "created": 1, "model": "m", "choices": [{"text": t, "finish_reason": f}]}
        for t, f in pieces
    ]
    answer = assemble_text_completion(chunks)
    assert answer["object"] == "text_completion"
    assert answer["choices"] == [
        {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
    ]


def test_streamed_tool_calls_are_joined_into_one_message() -> None:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": "c1",
            "created": 1,
            "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    call = {"index": 0, "id": "t1", "type": "function", "function": {"name": "get"}}
    chunks = [
        chunk({"role": "assistant", "tool_calls": [call]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]}),
        chunk({}, "tool_calls"),
    ]
    message = assemble_chat_completion(chunks)["choices"][0]["message"]
    assert message["content"] is None
    assert message["tool_calls"] == [
        {
            "id": "t1",
            "type": "function",
            "function": {"name": "get", "arguments": '{"city": "Paris"}'},
        }
    ]
    assert json.loads(message["tool_calls"][0]["function"]["arguments"]) == {"city": "Paris"}


def test_llama_cpps_streamed_tool_call_repeating_its_name_is_joined_as_its_plain_answer() -> None:
    """llama.cpp's server repeats the name and id in every delta, and sends function_call too."""

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": "c",
            "created": 1,
            "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
        }

    def piece(arguments: str) -> dict[str, Any]:
        function = {"name": "get_weather", "arguments": arguments}
        call = {"index": 0, "id": "call_0", "type": "function", "function": function}
        return chunk(
            {"role": None, "content": None, "function_call": function, "tool_calls": [call]}
        )

    chunks = [
        chunk({"role": "assistant", "content": None}),
        piece("{"),
        piece('"city": '),
        piece('"Paris"}'),
        chunk({}, "tool_calls"),
    ]
    choice = assemble_chat_completion(chunks)["choices"][0]
    arguments = '{"city": "Paris"}'
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"] == {
        "role": "assistant",
        "content": None,
        "refusal": None,
        "tool_calls": [
            {
                "id": "call_0",
                "type": "function",
                "function": {"name": "get_weather", "arguments": arguments},
            }
        ],
        "function_call": {"name": "get_weather", "arguments": arguments},
    }


def test_choices_and_their_logprobs_are_assembled_each_under_its_own_index() -> None:
    def token(text: str) -> dict[str, Any]:
        return {"content": [{"token": text, "logprob": -0.5, "bytes": None, "top_logprobs": []}]}

    def chunk(index: int, text: str, finish: str | None = None) -> dict[str, Any]:
        choice = {
            "index": index,
            "delta": {"content": text},
            "logprobs": token(text),
            "finish_reason": finish,
        }
        return {"id": "c", "created": 1, "model": "m", "choices": [choice]}

    chunks = [chunk(1, "B"), chunk(0, "A"), chunk(1, "b", "stop"), chunk(0, "a", "length")]
    choices = assemble_chat_completion(chunks)["choices"]
    assert [c["index"] for c in choices] == [0, 1]
    assert [c["message"]["content"] for c in choices] == ["Aa", "Bb"]
    assert [c["finish_reason"] for c in choices] == ["length", "stop"]
    assert [t["token"] for t in choices[1]["logprobs"]["content"]] == ["B", "b"]

    def text_chunk(index: int, text: str, offset: int) -> dict[str, Any]:
        logprobs = {
            "tokens": [text],
            "text_offset": [offset],
            "token_logprobs": [-1.0],
            "top_logprobs": [{text: -1.0}],
        }
        choice = {"index": index, "text": text, "logprobs": logprobs, "finish_reason": None}
        return {"id": "t", "created": 1, "model": "m", "choices": [choice]}

    text = assemble_text_completion(
        [text_chunk(0, " of", 11), text_chunk(1, "x", 0), text_chunk(0, " the", 14)]
    )
    first = text["choices"][0]
    assert first["text"] == " of the"
    assert first["logprobs"] == {
        "tokens": [" of", " the"],
        "text_offset": [11, 14],
        "token_logprobs": [-1.0, -1.0],
        "top_logprobs": [{" of": -1.0}, {" the": -1.0}],
    }
    assert text["choices"][1]["text"] == "x"
