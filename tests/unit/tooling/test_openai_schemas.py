"""The trimmed OpenAI schemas the real-client tier validates against can fail, and read
OpenAI's 3.0-style ``nullable`` as null."""

from __future__ import annotations

from typing import Any

from tests.support.openai_schemas import nullable_as_null, schema_errors

ANSWER: dict[str, Any] = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1700,
    "model": "smol",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Hi", "refusal": None},
            "logprobs": None,
            "finish_reason": "stop",
        }
    ],
}


def test_a_chat_answer_without_refusal_breaks_openais_schema() -> None:
    assert schema_errors("CreateChatCompletionResponse", ANSWER) == []
    (choice,) = ANSWER["choices"]
    lacking = {**ANSWER, "choices": [{**choice, "message": {"role": "assistant", "content": "Hi"}}]}
    (error,) = schema_errors("CreateChatCompletionResponse", lacking)
    assert error == "choices/0/message: 'refusal' is a required property"


def test_a_nullable_finish_reason_may_be_null_and_nothing_else_off_its_enum() -> None:
    chunk = {**ANSWER, "object": "chat.completion.chunk"}
    chunk["choices"] = [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": None}]
    assert schema_errors("CreateChatCompletionStreamResponse", chunk) == []
    chunk["choices"][0]["finish_reason"] = "tired"
    assert schema_errors("CreateChatCompletionStreamResponse", chunk)
    assert nullable_as_null({"type": "string", "enum": ["stop"], "nullable": True}) == {
        "type": ["string", "null"],
        "enum": ["stop", None],
    }
    assert nullable_as_null({"$ref": "#/x", "nullable": True}) == {
        "anyOf": [{"$ref": "#/x"}, {"type": "null"}]
    }
