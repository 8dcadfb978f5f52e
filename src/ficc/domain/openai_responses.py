"""OpenAI's Responses API (``POST /v1/responses``) on engines that serve chat completions only:
the request.

Pure rules, no I/O, no clock: a Responses request is checked as OpenAI checks it
(:func:`check_responses_request`) and translated to a chat completions request
(:func:`chat_request`). The engine's chat answer becomes a ``response`` object in
:mod:`ficc.domain.openai_response_answers` and, streamed, its chunks OpenAI's typed events in
:mod:`ficc.domain.openai_response_events`.

FICC keeps no conversation state (``store: false`` semantics): ``previous_response_id``,
``conversation``, ``store: true`` and ``background: true`` are refused, naming the parameter.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from ficc.base.errors import InvalidInput
from ficc.domain.openai_requests import (
    CHAT_COMPLETIONS_PATH,
    MAX_NESTING_DEPTH,
    RESPONSE_FORMATS,
    TOOL_CHOICES,
    check_request,
    value_depth_exceeds,
)

RESPONSES_PATH: Final = "/v1/responses"

INPUT_ROLES: Final = frozenset({"user", "assistant", "system", "developer"})
TEXT_PART_TYPES: Final = frozenset({"input_text", "output_text", "text"})
INPUT_ITEM_TYPES: Final = frozenset({"message", "function_call", "function_call_output"})

TERMINAL_EVENTS: Final = frozenset({"response.completed", "response.incomplete", "response.failed"})
"""The events that end a Responses stream; OpenAI sends no ``[DONE]`` after them."""

STATEFUL: Final = ("previous_response_id", "conversation")
"""Parameters that name state kept by the server; FICC keeps none."""

RESPONSES_ONLY: Final = frozenset(
    {
        "input",
        "instructions",
        "max_output_tokens",
        "text",
        "tools",
        "tool_choice",
        "store",
        "metadata",
        "parallel_tool_calls",
        "truncation",
        "include",
        "reasoning",
        "service_tier",
        "previous_response_id",
        "conversation",
        "background",
        "stream_options",
        "prompt",
        "prompt_cache_key",
        "safety_identifier",
        "max_tool_calls",
        "top_logprobs",
    }
)
"""Fields with no chat counterpart sent as they are: translated or left out. Any other field
(``top_k``, ``seed``, ``user``...) reaches the engine untouched, as on the chat URL."""


def _invalid(param: str, rule: str) -> InvalidInput:
    return InvalidInput(f"Invalid '{param}': {rule}", field=param)


def _type_name(value: Any) -> str:
    return type(value).__name__


def _check_integer(body: Mapping[str, Any], param: str, low: int) -> None:
    value = body.get(param)
    if value is None:
        return
    if not isinstance(value, int) or isinstance(value, bool):
        raise _invalid(param, f"expected an integer, but got {_type_name(value)} instead")
    if value < low:
        raise _invalid(param, f"integer below minimum value; expected >= {low}, got {value}")


def _check_string(body: Mapping[str, Any], param: str, where: str | None = None) -> None:
    value = body.get(param)
    if value is not None and not isinstance(value, str):
        name = where or param
        raise _invalid(name, f"expected a string, but got {_type_name(value)} instead")


def _check_content(where: str, content: Any) -> None:
    if isinstance(content, str):
        return
    if not isinstance(content, list) or not all(isinstance(part, dict) for part in content):
        raise _invalid(where, "expected a string or an array of content parts")
    for index, part in enumerate(content):
        kind = part.get("type")
        if kind in TEXT_PART_TYPES:
            if not isinstance(part.get("text"), str):
                raise _invalid(f"{where}[{index}].text", "expected a string")
        elif kind == "input_image":
            if not isinstance(part.get("image_url"), str):
                raise _invalid(f"{where}[{index}].image_url", "expected a URL string")
        else:
            raise _invalid(
                f"{where}[{index}].type", "expected input_text, output_text or input_image"
            )


def _check_item(index: int, item: Any) -> None:
    where = f"input[{index}]"
    if not isinstance(item, dict):
        raise _invalid(where, "expected an object")
    kind = item.get("type", "message")
    if kind not in INPUT_ITEM_TYPES:
        allowed = ", ".join(sorted(INPUT_ITEM_TYPES))
        raise _invalid(f"{where}.type", f"expected one of {allowed} (FICC keeps no items)")
    if kind == "message":
        role = item.get("role")
        if role not in INPUT_ROLES:
            raise _invalid(f"{where}.role", f"expected one of {', '.join(sorted(INPUT_ROLES))}")
        _check_content(f"{where}.content", item.get("content"))
        return
    if not isinstance(item.get("call_id"), str):
        raise _invalid(f"{where}.call_id", "expected a string")
    if kind == "function_call":
        for key in ("name", "arguments"):
            if not isinstance(item.get(key), str):
                raise _invalid(f"{where}.{key}", "expected a string")
    elif not isinstance(item.get("output"), str | list):
        raise _invalid(f"{where}.output", "expected a string or an array of content parts")


def _check_format(text: Any) -> None:
    if text is None:
        return
    if not isinstance(text, dict):
        raise _invalid("text", "expected an object")
    fmt = text.get("format")
    if fmt is None:
        return
    if not isinstance(fmt, dict) or fmt.get("type") not in RESPONSE_FORMATS:
        allowed = ", ".join(sorted(RESPONSE_FORMATS))
        raise _invalid("text.format", f"expected an object whose type is one of {allowed}")
    if fmt["type"] == "json_schema":
        if not isinstance(fmt.get("name"), str) or not fmt["name"]:
            raise _invalid("text.format.name", "expected a non-empty string")
        if not isinstance(fmt.get("schema"), dict):
            raise _invalid("text.format.schema", "expected a JSON schema object")


def _check_tools(body: Mapping[str, Any]) -> None:
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list) or not all(isinstance(tool, dict) for tool in tools):
            raise _invalid("tools", "expected an array of tool objects")
        for index, tool in enumerate(tools):
            if tool.get("type") != "function":
                raise _invalid(
                    f"tools[{index}].type",
                    "only function tools are served (FICC hosts no built-in tools)",
                )
            if not isinstance(tool.get("name"), str) or not tool["name"]:
                raise _invalid(f"tools[{index}].name", "expected a non-empty string")
            if tool.get("parameters") is not None and not isinstance(tool["parameters"], dict):
                raise _invalid(f"tools[{index}].parameters", "expected a JSON schema object")
    choice = body.get("tool_choice")
    if choice is None or (isinstance(choice, str) and choice in TOOL_CHOICES):
        return
    if (
        not isinstance(choice, dict)
        or choice.get("type") != "function"
        or not isinstance(choice.get("name"), str)
    ):
        raise _invalid(
            "tool_choice", 'expected none, auto, required or {"type": "function", "name": ...}'
        )


def check_responses_request(body: Mapping[str, Any]) -> None:
    """Refuse a Responses request OpenAI would refuse, or one that needs stored state."""
    if value_depth_exceeds(body):
        raise InvalidInput(
            f"the request body nests objects and arrays deeper than {MAX_NESTING_DEPTH} levels",
            field="body",
        )
    for param in STATEFUL:
        if body.get(param) is not None:
            raise _invalid(
                param,
                "FICC keeps no responses or conversations (store is always false); send the "
                "whole conversation in input",
            )
    for param in ("stream", "store", "background", "parallel_tool_calls"):
        value = body.get(param)
        if value is not None and not isinstance(value, bool):
            raise _invalid(param, f"expected a boolean, but got {_type_name(value)} instead")
    if body.get("store") is True:
        raise _invalid("store", "FICC keeps no responses; store must be false or left out")
    if body.get("background") is True:
        raise _invalid("background", "FICC answers in the foreground only")
    _check_string(body, "model")
    _check_string(body, "instructions")
    value = body.get("input")
    if isinstance(value, str):
        pass
    elif isinstance(value, list) and value:
        for index, item in enumerate(value):
            _check_item(index, item)
    else:
        raise _invalid("input", "expected a string or a non-empty array of input items")
    _check_integer(body, "max_output_tokens", 1)
    _check_format(body.get("text"))
    _check_tools(body)
    # What chat shares with Responses (temperature, top_p, user...) is checked as chat checks it.
    check_request(CHAT_COMPLETIONS_PATH, _shared(body, [{"role": "user", "content": ""}]))


def check_invocation(path: str, body: Mapping[str, Any]) -> None:
    """The request checked as OpenAI checks one for ``path``, Responses API included."""
    if path == RESPONSES_PATH:
        check_responses_request(body)
    else:
        check_request(path, body)


def _shared(body: Mapping[str, Any], messages: list[dict[str, Any]]) -> dict[str, Any]:
    sent = {key: value for key, value in body.items() if key not in RESPONSES_ONLY}
    sent["messages"] = messages
    return sent


def _text_of(content: Any) -> Any:
    """A Responses content as a chat content: a string when it is text only."""
    if isinstance(content, str):
        return content
    if all(part.get("type") in TEXT_PART_TYPES for part in content):
        return "".join(part["text"] for part in content)
    parts: list[dict[str, Any]] = []
    for part in content:
        if part.get("type") == "input_image":
            parts.append({"type": "image_url", "image_url": {"url": part["image_url"]}})
        else:
            parts.append({"type": "text", "text": part["text"]})
    return parts


def _messages(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Instructions first (as a system message), then each input item as chat knows it."""
    messages: list[dict[str, Any]] = []
    if body.get("instructions"):
        messages.append({"role": "system", "content": body["instructions"]})
    value = body["input"]
    if isinstance(value, str):
        messages.append({"role": "user", "content": value})
        return messages
    for item in value:
        kind = item.get("type", "message")
        if kind == "message":
            # developer is OpenAI's new name of system; chat-only engines know system.
            role = "system" if item["role"] == "developer" else item["role"]
            messages.append({"role": role, "content": _text_of(item["content"])})
        elif kind == "function_call":
            call = {
                "id": item["call_id"],
                "type": "function",
                "function": {"name": item["name"], "arguments": item["arguments"]},
            }
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant" and "tool_calls" in last:
                last["tool_calls"].append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        else:
            output = item["output"]
            text = output if isinstance(output, str) else _text_of(output)
            messages.append({"role": "tool", "tool_call_id": item["call_id"], "content": text})
    return messages


def chat_request(body: Mapping[str, Any]) -> dict[str, Any]:
    """The chat completions request that answers a checked Responses request.

    A stream asks for usage (``response.completed`` carries it); other fields FICC does not
    know pass through as on the chat URL.
    """
    chat = _shared(body, _messages(body))
    if body.get("max_output_tokens") is not None:
        chat["max_tokens"] = body["max_output_tokens"]
    fmt = (body.get("text") or {}).get("format")
    if isinstance(fmt, dict) and fmt["type"] == "json_schema":
        schema = {"name": fmt["name"], "schema": fmt["schema"]}
        if fmt.get("strict") is not None:
            schema["strict"] = fmt["strict"]
        chat["response_format"] = {"type": "json_schema", "json_schema": schema}
    elif isinstance(fmt, dict) and fmt["type"] == "json_object":
        chat["response_format"] = {"type": "json_object"}
    if body.get("tools"):
        chat["tools"] = [_chat_tool(tool) for tool in body["tools"]]
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        chat["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
    elif choice is not None:
        chat["tool_choice"] = choice
    if body.get("stream") is True:
        chat["stream_options"] = {"include_usage": True}
    return chat


def _chat_tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    function: dict[str, Any] = {"name": tool["name"]}
    for key in ("description", "parameters", "strict"):
        if tool.get(key) is not None:
            function[key] = tool[key]
    return {"type": "function", "function": function}
