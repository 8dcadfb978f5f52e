"""The Responses API translated to chat completions and back, without HTTP.

Tables: requests refused (naming the parameter) or translated, chat answers turned into
``response`` objects, and streamed chat chunks turned into OpenAI's typed events in order, with
``sequence_number`` counting from 0.
"""

from __future__ import annotations

import json
from typing import Any, Final

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.support.openai_schemas import assert_matches

from ficc.base.errors import InvalidInput
from ficc.domain.openai_response_answers import response_object
from ficc.domain.openai_response_events import ResponseEvents, typed_event
from ficc.domain.openai_responses import chat_request, check_responses_request

BASE: dict[str, Any] = {"model": "svc_x", "input": "Hi"}


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"previous_response_id": "resp_1"}, "previous_response_id"),
        ({"conversation": "conv_1"}, "conversation"),
        ({"store": True}, "store"),
        ({"store": "no"}, "store"),
        ({"background": True}, "background"),
        ({"input": None}, "input"),
        ({"input": []}, "input"),
        ({"input": 3}, "input"),
        ({"input": ["Hi"]}, "input[0]"),
        ({"input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
        ({"input": [{"role": "user", "content": 1}]}, "input[0].content"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_file"}]}]},
            "input[0].content[0].type",
        ),
        ({"input": [{"type": "item_reference", "id": "x"}]}, "input[0].type"),
        ({"input": [{"type": "function_call", "call_id": "c", "name": "f"}]}, "input[0].arguments"),
        ({"input": [{"type": "function_call_output", "output": "x"}]}, "input[0].call_id"),
        ({"instructions": 5}, "instructions"),
        ({"max_output_tokens": 0}, "max_output_tokens"),
        ({"max_output_tokens": 1.5}, "max_output_tokens"),
        ({"temperature": 3}, "temperature"),
        ({"top_p": -0.1}, "top_p"),
        ({"text": "json"}, "text"),
        ({"text": {"format": {"type": "yaml"}}}, "text.format"),
        ({"text": {"format": {"type": "json_schema", "schema": {}}}}, "text.format.name"),
        ({"text": {"format": {"type": "json_schema", "name": "a"}}}, "text.format.schema"),
        ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
        ({"tools": [{"type": "function"}]}, "tools[0].name"),
        ({"tools": {}}, "tools"),
        ({"tool_choice": "sometimes"}, "tool_choice"),
        ({"tool_choice": {"type": "function"}}, "tool_choice"),
        ({"stream": "yes"}, "stream"),
        ({"model": 7}, "model"),
    ],
)
def test_a_request_openai_or_statelessness_refuses_names_its_parameter(
    extra: dict[str, Any], param: str
) -> None:
    with pytest.raises(InvalidInput) as caught:
        check_responses_request({**BASE, **extra})
    assert caught.value.details["field"] == param
    assert caught.value.message.startswith(f"Invalid '{param}': ")


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"store": False, "stream": True, "instructions": "Be brief.", "max_output_tokens": 8},
        {"temperature": 0, "top_p": 1, "top_k": 40, "metadata": {"a": "b"}},
        {"text": {"format": {"type": "json_schema", "name": "a", "schema": {"type": "object"}}}},
        {
            "tools": [{"type": "function", "name": "f"}],
            "tool_choice": {"type": "function", "name": "f"},
        },
        {
            "input": [
                {
                    "type": "message",
                    "role": "developer",
                    "content": [{"type": "input_text", "text": "x"}],
                }
            ]
        },
    ],
)
def test_a_request_openai_accepts_passes(extra: dict[str, Any]) -> None:
    check_responses_request({**BASE, **extra})


@pytest.mark.parametrize(
    ("request_body", "chat"),
    [
        (
            {"model": "m", "input": "Hi"},
            {"model": "m", "messages": [{"role": "user", "content": "Hi"}]},
        ),
        (
            {"model": "m", "input": "Hi", "instructions": "Be brief.", "max_output_tokens": 8,
             "temperature": 0, "top_p": 0.5, "store": False, "top_k": 40, "metadata": {}},
            {"model": "m", "temperature": 0, "top_p": 0.5, "top_k": 40, "max_tokens": 8,
             "messages": [{"role": "system", "content": "Be brief."},
                          {"role": "user", "content": "Hi"}]},
        ),
        (
            {"input": [
                {"role": "developer", "content": "Rules."},
                {"type": "message", "role": "user",
                 "content": [{"type": "input_text", "text": "a"},
                             {"type": "input_text", "text": "b"}]},
                {"role": "user", "content": [{"type": "input_text", "text": "see"},
                                             {"type": "input_image", "image_url": "data:x"}]},
                {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                {"type": "function_call", "call_id": "c2", "name": "g", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "42"},
            ]},
            {"messages": [
                {"role": "system", "content": "Rules."},
                {"role": "user", "content": "ab"},
                {"role": "user", "content": [
                    {"type": "text", "text": "see"},
                    {"type": "image_url", "image_url": {"url": "data:x"}}]},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}},
                    {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "{}"}},
                ]},
                {"role": "tool", "tool_call_id": "c1", "content": "42"},
            ]},
        ),
        (
            {"input": "Hi", "stream": True,
             "text": {"format": {"type": "json_schema", "name": "a", "schema": {"type": "object"},
                                 "strict": True}},
             "tools": [{"type": "function", "name": "f", "description": "d",
                        "parameters": {"type": "object"}}],
             "tool_choice": {"type": "function", "name": "f"}},
            {"messages": [{"role": "user", "content": "Hi"}], "stream": True,
             "stream_options": {"include_usage": True},
             "response_format": {"type": "json_schema", "json_schema": {
                 "name": "a", "schema": {"type": "object"}, "strict": True}},
             "tools": [{"type": "function", "function": {
                 "name": "f", "description": "d", "parameters": {"type": "object"}}}],
             "tool_choice": {"type": "function", "function": {"name": "f"}}},
        ),
        (
            {"input": "Hi", "text": {"format": {"type": "json_object"}}, "tool_choice": "none"},
            {"messages": [{"role": "user", "content": "Hi"}],
             "response_format": {"type": "json_object"}, "tool_choice": "none"},
        ),
    ],
)  # fmt: skip
def test_a_request_becomes_the_chat_request_that_answers_it(
    request_body: dict[str, Any], chat: dict[str, Any]
) -> None:
    check_responses_request(request_body)
    assert chat_request(request_body) == chat


CHAT_USAGE = {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}
USAGE = {
    "input_tokens": 5,
    "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
    "output_tokens": 3,
    "output_tokens_details": {"reasoning_tokens": 0},
    "total_tokens": 8,
}


def _answer(message: dict[str, Any], finish: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-abc",
        "object": "chat.completion",
        "created": 1700,
        "model": "smol",
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": CHAT_USAGE,
    }


def test_a_chat_answer_becomes_a_completed_response_with_usage() -> None:
    body = {"model": "svc_x", "input": "Hi", "instructions": "Be brief.", "max_output_tokens": 9}
    response = response_object(body, _answer({"role": "assistant", "content": "Hello"}, "stop"))
    assert response == {
        "id": "resp_abc",
        "object": "response",
        "created_at": 1700,
        "status": "completed",
        "background": False,
        "error": None,
        "incomplete_details": None,
        "instructions": "Be brief.",
        "max_output_tokens": 9,
        "metadata": {},
        "model": "smol",
        "output": [
            {
                "id": "msg_abc",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [
                    {"type": "output_text", "text": "Hello", "annotations": [], "logprobs": []}
                ],
            }
        ],
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "reasoning": {"effort": None, "summary": None},
        "store": False,
        "temperature": 1.0,
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": USAGE,
    }


def test_an_answer_cut_by_the_limit_is_incomplete_and_a_tool_call_is_a_function_call_item() -> None:
    cut = response_object(BASE, _answer({"role": "assistant", "content": "Hel"}, "length"))
    assert cut["status"] == "incomplete"
    assert cut["incomplete_details"] == {"reason": "max_output_tokens"}
    assert cut["output"][0]["status"] == "incomplete"
    call = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a":1}'}}
    called = response_object(
        BASE, _answer({"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls")
    )
    assert called["output"] == [
        {
            "id": "fc_abc_0",
            "type": "function_call",
            "status": "completed",
            "call_id": "call_1",
            "name": "f",
            "arguments": '{"a":1}',
        }
    ]


def _chunk(delta: dict[str, Any] | None, finish: str | None = None, **extra: Any) -> dict[str, Any]:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return {"id": "chatcmpl-abc", "created": 1700, "model": "smol", "choices": choices, **extra}


def _events(frames: bytes) -> list[dict[str, Any]]:
    """The events of ``frames``, each checked to be spelled as :func:`typed_event` spells the
    object it carries (``json.dumps``, compact, ASCII escapes): the bytes are built without it."""
    events: list[dict[str, Any]] = []
    for frame in frames.split(b"\n\n")[:-1]:
        event = json.loads(frame.split(b"\ndata: ", 1)[1])
        assert frame + b"\n\n" == typed_event(event)
        events.append(event)
    assert frames.endswith(b"\n\n") or not frames
    return events


def _stream(body: dict[str, Any], chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    state = ResponseEvents(body)
    return _events(b"".join(state.feed(chunk) for chunk in chunks) + state.finish())


def _run(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return _stream({"model": "svc_x", "input": "Hi", "stream": True}, chunks)


def test_streamed_text_becomes_openais_typed_events_in_order() -> None:
    events = _run(
        [
            _chunk({"role": "assistant", "content": ""}),
            _chunk({"content": "Hel"}),
            _chunk({"content": "lo"}),
            _chunk({}, "stop"),
            _chunk(None, usage=CHAT_USAGE),
        ]
    )
    assert [event["type"] for event in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [event["sequence_number"] for event in events] == list(range(len(events)))
    assert events[0]["response"]["status"] == "in_progress"
    assert [e["delta"] for e in events if e["type"] == "response.output_text.delta"] == [
        "Hel",
        "lo",
    ]
    assert events[6]["text"] == "Hello"
    assert all(e.get("item_id", "msg_abc") == "msg_abc" for e in events)
    done = events[-1]["response"]
    assert done["status"] == "completed"
    assert done["usage"] == USAGE
    assert done["output"] == [events[8]["item"]]
    assert done["output"][0]["content"][0]["text"] == "Hello"


def test_a_stream_cut_by_the_limit_ends_with_response_incomplete() -> None:
    events = _run([_chunk({"content": "Hel"}, "length"), _chunk(None, usage=CHAT_USAGE)])
    assert events[-1]["type"] == "response.incomplete"
    assert events[-1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    assert events[-1]["response"]["usage"] == USAGE


def test_streamed_tool_calls_become_function_call_items_after_the_text() -> None:
    # llama.cpp's server sends the name in every delta: it is kept once.
    def call(arguments: str, **extra: Any) -> dict[str, Any]:
        return {"index": 0, "function": {"name": "f", "arguments": arguments}, **extra}

    events = _run(
        [
            _chunk({"content": "Sure"}),
            _chunk({"tool_calls": [call("", id="call_1", type="function")]}),
            _chunk({"tool_calls": [call('{"a":')]}),
            _chunk({"tool_calls": [call("1}")]}, "tool_calls"),
        ]
    )
    assert [event["type"] for event in events][5:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    added = events[8]
    assert added["output_index"] == 1
    assert added["item"] == {
        "id": "fc_abc_0",
        "type": "function_call",
        "status": "in_progress",
        "call_id": "call_1",
        "name": "f",
        "arguments": "",
    }
    assert events[11]["arguments"] == '{"a":1}'
    output = events[-1]["response"]["output"]
    assert [item["type"] for item in output] == ["message", "function_call"]
    assert output[1]["arguments"] == '{"a":1}'
    assert events[-1]["response"]["usage"] is None


def test_a_stream_with_no_chunk_still_opens_and_closes_and_ends_once() -> None:
    state = ResponseEvents(BASE)
    events = _events(state.finish())
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "response.completed",
    ]
    assert [e["sequence_number"] for e in events] == [0, 1, 2]
    assert state.finish() == b""
    assert state.feed(_chunk({"content": "late"})) == b""


GOLDEN_BODY: dict[str, Any] = {
    "model": "svc_x",
    "input": "Hi",
    "stream": True,
    "instructions": "Be brief.",
    "temperature": 0.7,
    "user": "u",
    "tools": [{"type": "function", "name": "f"}],
}
GOLDEN_CHUNKS: list[dict[str, Any]] = [
    _chunk({"role": "assistant", "content": ""}),
    _chunk({"content": 'é\n"\x7f'}),
    _chunk(
        {
            "tool_calls": [
                {"index": 0, "id": "call_1", "function": {"name": "f", "arguments": '{"a":'}}
            ]
        }
    ),
    _chunk({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}, "tool_calls"),
    _chunk(None, usage=CHAT_USAGE),
]
GOLDEN_STREAM: Final = (
    'event: response.created\ndata: {"type":"response.created","sequence_number":0,'
    '"response":{"id":"resp_abc","object":"response","created_at":1700,'
    '"status":"in_progress","background":false,"error":null,"incomplete_details":null,'
    '"instructions":"Be brief.","max_output_tokens":null,"metadata":{},"model":"smol",'
    '"output":[],"parallel_tool_calls":true,"previous_response_id":null,'
    '"reasoning":{"effort":null,"summary":null},"store":false,"temperature":0.7,'
    '"text":{"format":{"type":"text"}},"tool_choice":"auto","tools":[{"type":"function",'
    '"name":"f","parameters":null,"strict":null}],"top_p":1.0,"truncation":"disabled",'
    '"usage":null,"user":"u"}}\n\n'
    'event: response.in_progress\ndata: {"type":"response.in_progress","sequence_number":1,'
    '"response":{"id":"resp_abc","object":"response","created_at":1700,'
    '"status":"in_progress","background":false,"error":null,"incomplete_details":null,'
    '"instructions":"Be brief.","max_output_tokens":null,"metadata":{},"model":"smol",'
    '"output":[],"parallel_tool_calls":true,"previous_response_id":null,'
    '"reasoning":{"effort":null,"summary":null},"store":false,"temperature":0.7,'
    '"text":{"format":{"type":"text"}},"tool_choice":"auto","tools":[{"type":"function",'
    '"name":"f","parameters":null,"strict":null}],"top_p":1.0,"truncation":"disabled",'
    '"usage":null,"user":"u"}}\n\n'
    'event: response.output_item.added\ndata: {"type":"response.output_item.added",'
    '"sequence_number":2,"output_index":0,"item":{"id":"msg_abc","type":"message",'
    '"role":"assistant","status":"in_progress","content":[]}}\n\n'
    'event: response.content_part.added\ndata: {"type":"response.content_part.added",'
    '"sequence_number":3,"item_id":"msg_abc","output_index":0,"content_index":0,'
    '"part":{"type":"output_text","text":"","annotations":[],"logprobs":[]}}\n\n'
    'event: response.output_text.delta\ndata: {"type":"response.output_text.delta",'
    '"sequence_number":4,"item_id":"msg_abc","output_index":0,"content_index":0,'
    '"delta":"\\u00e9\\n\\"\\u007f","logprobs":[]}\n\n'
    'event: response.output_text.done\ndata: {"type":"response.output_text.done",'
    '"sequence_number":5,"item_id":"msg_abc","output_index":0,"content_index":0,'
    '"text":"\\u00e9\\n\\"\\u007f","logprobs":[]}\n\n'
    'event: response.content_part.done\ndata: {"type":"response.content_part.done",'
    '"sequence_number":6,"item_id":"msg_abc","output_index":0,"content_index":0,'
    '"part":{"type":"output_text","text":"\\u00e9\\n\\"\\u007f","annotations":[],'
    '"logprobs":[]}}\n\n'
    'event: response.output_item.done\ndata: {"type":"response.output_item.done",'
    '"sequence_number":7,"output_index":0,"item":{"id":"msg_abc","type":"message",'
    '"role":"assistant","status":"completed","content":[{"type":"output_text",'
    '"text":"\\u00e9\\n\\"\\u007f","annotations":[],"logprobs":[]}]}}\n\n'
    'event: response.output_item.added\ndata: {"type":"response.output_item.added",'
    '"sequence_number":8,"output_index":1,"item":{"id":"fc_abc_0","type":"function_call",'
    '"status":"in_progress","call_id":"call_1","name":"f","arguments":""}}\n\n'
    "event: response.function_call_arguments.delta\n"
    'data: {"type":"response.function_call_arguments.delta",'
    '"sequence_number":9,"item_id":"fc_abc_0","output_index":1,"delta":"{\\"a\\":"}\n\n'
    "event: response.function_call_arguments.delta\n"
    'data: {"type":"response.function_call_arguments.delta",'
    '"sequence_number":10,"item_id":"fc_abc_0","output_index":1,"delta":"1}"}\n\n'
    "event: response.function_call_arguments.done\n"
    'data: {"type":"response.function_call_arguments.done",'
    '"sequence_number":11,"item_id":"fc_abc_0","output_index":1,"name":"f",'
    '"arguments":"{\\"a\\":1}"}\n\n'
    'event: response.output_item.done\ndata: {"type":"response.output_item.done",'
    '"sequence_number":12,"output_index":1,"item":{"id":"fc_abc_0","type":"function_call",'
    '"status":"completed","call_id":"call_1","name":"f","arguments":"{\\"a\\":1}"}}\n\n'
    'event: response.completed\ndata: {"type":"response.completed","sequence_number":13,'
    '"response":{"id":"resp_abc","object":"response","created_at":1700,"status":"completed",'
    '"background":false,"error":null,"incomplete_details":null,"instructions":"Be brief.",'
    '"max_output_tokens":null,"metadata":{},"model":"smol","output":[{"id":"msg_abc",'
    '"type":"message","role":"assistant","status":"completed",'
    '"content":[{"type":"output_text","text":"\\u00e9\\n\\"\\u007f","annotations":[],'
    '"logprobs":[]}]},{"id":"fc_abc_0","type":"function_call","status":"completed",'
    '"call_id":"call_1","name":"f","arguments":"{\\"a\\":1}"}],"parallel_tool_calls":true,'
    '"previous_response_id":null,"reasoning":{"effort":null,"summary":null},"store":false,'
    '"temperature":0.7,"text":{"format":{"type":"text"}},"tool_choice":"auto",'
    '"tools":[{"type":"function","name":"f","parameters":null,"strict":null}],"top_p":1.0,'
    '"truncation":"disabled","usage":{"input_tokens":5,'
    '"input_tokens_details":{"cached_tokens":0,"cache_write_tokens":0},"output_tokens":3,'
    '"output_tokens_details":{"reasoning_tokens":0},"total_tokens":8},"user":"u"}}\n\n'
)
"""What encoding each event object one by one (``json.dumps``, compact, ASCII escapes) sent."""


def test_a_stream_is_spelled_byte_for_byte_as_its_event_objects_encoded_one_by_one() -> None:
    """The events are written from byte templates, not built and encoded: held, key order,
    escapes and all, to the bytes that encoding OpenAI's event objects gave."""
    state = ResponseEvents(GOLDEN_BODY)
    frames = b"".join(state.feed(chunk) for chunk in GOLDEN_CHUNKS) + state.finish()
    assert frames.decode("ascii") == GOLDEN_STREAM


_TEXTS = st.text(max_size=6)
_DELTAS = st.one_of(
    st.fixed_dictionaries({"content": _TEXTS}),
    st.fixed_dictionaries(
        {
            "tool_calls": st.lists(
                st.fixed_dictionaries(
                    {"index": st.integers(0, 2)},
                    optional={
                        "id": _TEXTS,
                        "function": st.fixed_dictionaries(
                            {}, optional={"name": _TEXTS, "arguments": _TEXTS}
                        ),
                    },
                ),
                max_size=2,
            )
        }
    ),
)


@given(
    st.lists(
        st.tuples(_DELTAS, st.sampled_from([None, "stop", "length"]), st.booleans()), max_size=6
    )
)
def test_any_stream_is_spelled_as_its_event_objects_and_numbered_in_order(
    chunks: list[tuple[dict[str, Any], str | None, bool]],
) -> None:
    events = _run(
        [
            _chunk(delta, finish, **({"usage": CHAT_USAGE} if usage else {}))
            for delta, finish, usage in chunks
        ]
    )
    assert [event["sequence_number"] for event in events] == list(range(len(events)))
    assert events[-1]["type"] in ("response.completed", "response.incomplete")


def test_a_typed_event_names_its_type_on_the_event_line() -> None:
    frame = typed_event({"type": "response.output_text.delta", "sequence_number": 3, "delta": "é"})
    head, data, end = frame.split(b"\n", 2)
    assert head == b"event: response.output_text.delta"
    assert json.loads(data.removeprefix(b"data: ")) == {
        "type": "response.output_text.delta",
        "sequence_number": 3,
        "delta": "é",
    }
    assert end == b"\n"


TOOL_BODY: dict[str, Any] = {
    "model": "svc_x",
    "input": "Weather in Paris?",
    "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
    "tool_choice": {"type": "function", "name": "f"},
}


def test_every_response_and_streamed_event_matches_openais_published_schemas() -> None:
    """The usage lacked ``input_tokens_details.cache_write_tokens``, the echoed tools their
    ``strict`` and ``parameters``, and ``response.function_call_arguments.done`` its ``name``:
    each required by OpenAI's schemas."""
    call = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    answers = [
        (BASE, _answer({"role": "assistant", "content": "Hello"}, "stop")),
        (BASE, _answer({"role": "assistant", "content": "Hel"}, "length")),
        (TOOL_BODY, _answer({"role": "assistant", "content": None, "tool_calls": [call]}, "stop")),
    ]
    for body, answer in answers:
        assert_matches("Response", response_object(body, answer))
    streams = [
        (BASE, [_chunk({"content": "Hel"}), _chunk({}, "stop"), _chunk(None, usage=CHAT_USAGE)]),
        (BASE, [_chunk({"content": "Hel"}, "length")]),
        (
            TOOL_BODY,
            [
                _chunk({"content": "Sure"}),
                _chunk({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "f"}}]}),
                _chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}, "stop"),
                _chunk(None, usage=CHAT_USAGE),
            ],
        ),
    ]
    for body, chunks in streams:
        events = _stream(body, chunks)
        for event in events:
            assert_matches("ResponseStreamEvent", event)
        assert_matches("Response", events[-1]["response"])
