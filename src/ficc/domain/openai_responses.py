"""OpenAI's Responses API (``POST /v1/responses``) on engines that serve chat completions only.

Pure rules, no I/O, no clock: a Responses request is checked as OpenAI checks it
(:func:`check_responses_request`), translated to a chat completions request
(:func:`chat_request`), and the engine's chat answer is turned back into a ``response`` object
(:func:`response_object`) or, streamed, its chunks into OpenAI's typed events
(:class:`ResponseEvents`). IDs and times come from the engine's answer, so nothing here reads a
clock or draws randomness.

FICC keeps no conversation state (``store: false`` semantics): ``previous_response_id``,
``conversation``, ``store: true`` and ``background: true`` are refused, naming the parameter.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from json.encoder import encode_basestring_ascii
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


def _base_id(chat_id: Any) -> str:
    """The response's ID from the engine's completion ID: unique as that one is."""
    text = chat_id if isinstance(chat_id, str) and chat_id else "0"
    return text.removeprefix("chatcmpl-").removeprefix("chatcmpl_")


def responses_usage(usage: Any) -> dict[str, Any] | None:
    """Chat's ``usage`` in the Responses API's names."""
    if not isinstance(usage, dict):
        return None
    prompt = int(usage.get("prompt_tokens") or 0)
    completion = int(usage.get("completion_tokens") or 0)
    details = usage.get("prompt_tokens_details") or {}
    cached = details.get("cached_tokens") or 0
    written = details.get("cache_write_tokens") or 0
    reasoning = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": int(cached), "cache_write_tokens": int(written)},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": int(reasoning)},
        "total_tokens": int(usage.get("total_tokens") or prompt + completion),
    }


def _envelope(
    body: Mapping[str, Any], response_id: str, created: Any, model: Any
) -> dict[str, Any]:
    """The ``response`` object's fields that echo the request, with nothing produced yet."""
    given = body.get("text")
    text: dict[str, Any] = given if isinstance(given, dict) else {}
    envelope: dict[str, Any] = {
        "id": response_id,
        "object": "response",
        "created_at": created if isinstance(created, int) else 0,
        "status": "in_progress",
        "background": False,
        "error": None,
        "incomplete_details": None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "metadata": body.get("metadata") if isinstance(body.get("metadata"), dict) else {},
        "model": model if isinstance(model, str) else body.get("model"),
        "output": [],
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": None,
        "reasoning": {"effort": None, "summary": None},
        "store": False,
        "temperature": body.get("temperature", 1.0),
        "text": {**text, "format": text.get("format") or {"type": "text"}},
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": [_echoed_tool(tool) for tool in body.get("tools") or []],
        "top_p": body.get("top_p", 1.0),
        "truncation": "disabled",
        "usage": None,
    }
    # OpenAI's schema has user as a string, never null: it is echoed only when given.
    if body.get("user") is not None:
        envelope["user"] = body["user"]
    return envelope


def _echoed_tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    """A request's function tool as the response echoes it: OpenAI's schema requires
    ``parameters`` and ``strict`` there (null when the request left them out)."""
    return {**tool, "parameters": tool.get("parameters"), "strict": tool.get("strict")}


def _finished(response: dict[str, Any], finish_reason: Any, usage: Any) -> dict[str, Any]:
    done = dict(response)
    if finish_reason == "length":
        done["status"] = "incomplete"
        done["incomplete_details"] = {"reason": "max_output_tokens"}
    else:
        done["status"] = "completed"
    done["usage"] = responses_usage(usage)
    return done


def _message_item(item_id: str, text: str, status: str) -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": [_text_part(text)] if status != "in_progress" else [],
    }


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _call_item(item_id: str, call: Mapping[str, Any], status: str) -> dict[str, Any]:
    function = call.get("function") or {}
    return {
        "id": item_id,
        "type": "function_call",
        "status": status,
        "call_id": call.get("id") or item_id,
        "name": function.get("name") or "",
        "arguments": function.get("arguments") or "",
    }


def response_object(body: Mapping[str, Any], answer: Mapping[str, Any]) -> dict[str, Any]:
    """The ``response`` object for the engine's plain chat answer to :func:`chat_request`."""
    base = _base_id(answer.get("id"))
    response = _envelope(body, f"resp_{base}", answer.get("created"), answer.get("model"))
    choices = answer.get("choices") or [{}]
    choice = choices[0] if isinstance(choices[0], dict) else {}
    message = choice.get("message") or {}
    status = "incomplete" if choice.get("finish_reason") == "length" else "completed"
    output: list[dict[str, Any]] = []
    if message.get("content") or not message.get("tool_calls"):
        output.append(_message_item(f"msg_{base}", message.get("content") or "", status))
    for index, call in enumerate(message.get("tool_calls") or []):
        output.append(_call_item(f"fc_{base}_{index}", call, "completed"))
    response["output"] = output
    return _finished(response, choice.get("finish_reason"), answer.get("usage"))


_ENCODER: Final = json.JSONEncoder(separators=(",", ":"))
"""``json.dumps(value, separators=(",", ":"))`` without building an encoder per call: compact,
with ASCII escapes, as the compatible URLs send every answer."""


def _json(value: Any) -> bytes:
    return _ENCODER.encode(value).encode("ascii")


def _string(text: str) -> bytes:
    """A string as :func:`_json` spells it, by the C function that encoder calls."""
    return encode_basestring_ascii(text).encode("ascii")


def typed_event(event: Mapping[str, Any]) -> bytes:
    """One typed server-sent event as OpenAI sends them: ``event:`` names its ``type``."""
    return b"event: " + str(event["type"]).encode() + b"\n" + b"data: " + _json(event) + b"\n\n"


class _Template:
    """A JSON object encoded once but for the fields named ``variable``, spelled at each
    :meth:`render`: the ``response`` object's echo of the request (its instructions, tools and
    schema, which may be long) is encoded once per stream, not once per event carrying it."""

    def __init__(self, value: Mapping[str, Any], variable: frozenset[str]) -> None:
        self._fixed: list[bytes] = []
        """The text before each variable field's value (and after the last one)."""
        self._names: list[str] = []
        fixed: dict[str, Any] = {}
        text = b"{"
        for key, item in value.items():
            if key not in variable:
                fixed[key] = item
                continue
            if fixed:
                text += _json(fixed)[1:-1] + b","
                fixed = {}
            self._fixed.append(text + _string(key) + b":")
            self._names.append(key)
            text = b","
        if fixed:
            text += _json(fixed)[1:-1]
        self._fixed.append(text.removesuffix(b",") + b"}")

    def render(self, values: Mapping[str, bytes]) -> bytes:
        """The object, ``values`` holding each variable field's encoded value."""
        parts: list[bytes] = []
        for fixed, name in zip(self._fixed[:-1], self._names, strict=True):
            parts += (fixed, values[name])
        parts.append(self._fixed[-1])
        return b"".join(parts)


_PRODUCED: Final = frozenset({"status", "incomplete_details", "output", "usage"})
"""The ``response`` object's fields that the answer fills in; the others echo the request."""
_IN_PROGRESS: Final = {
    "status": b'"in_progress"',
    "incomplete_details": b"null",
    "output": b"[]",
    "usage": b"null",
}
_CUT: Final = b'{"reason":"max_output_tokens"}'


def _head(kind: str) -> bytes:
    """An event's bytes up to its sequence number: the ``event:`` line and the data's start."""
    return f'event: {kind}\ndata: {{"type":"{kind}","sequence_number":'.encode()


_CREATED: Final = _head("response.created")
_IN_PROGRESS_EVENT: Final = _head("response.in_progress")
_ITEM_ADDED: Final = _head("response.output_item.added")
_ITEM_DONE: Final = _head("response.output_item.done")
_PART_ADDED: Final = _head("response.content_part.added")
_PART_DONE: Final = _head("response.content_part.done")
_TEXT_DELTA: Final = _head("response.output_text.delta")
_TEXT_DONE: Final = _head("response.output_text.done")
_ARGUMENTS_DELTA: Final = _head("response.function_call_arguments.delta")
_ARGUMENTS_DONE: Final = _head("response.function_call_arguments.done")
_COMPLETED: Final = _head("response.completed")
_INCOMPLETE: Final = _head("response.incomplete")
_EMPTY_PART: Final = b'"part":{"type":"output_text","text":"","annotations":[],"logprobs":[]}'


def _message_bytes(item_id: bytes, text: str, status: str) -> bytes:
    """:func:`_message_item` as :func:`_json` spells it."""
    content = b"[" + _part_bytes(text) + b"]" if status != "in_progress" else b"[]"
    return (
        b'{"id":' + item_id + b',"type":"message","role":"assistant","status":'
        + _string(status) + b',"content":' + content + b"}"
    )  # fmt: skip


def _part_bytes(text: str) -> bytes:
    """:func:`_text_part` as :func:`_json` spells it."""
    return b'{"type":"output_text","text":' + _string(text) + b',"annotations":[],"logprobs":[]}'


def _call_bytes(item_id: str, call: Mapping[str, Any], status: str) -> bytes:
    """:func:`_call_item` as :func:`_json` spells it (the engine's call ID may be any value)."""
    function = call.get("function") or {}
    return (
        b'{"id":' + _string(item_id) + b',"type":"function_call","status":' + _string(status)
        + b',"call_id":' + _json(call.get("id") or item_id)
        + b',"name":' + _json(function.get("name") or "")
        + b',"arguments":' + _json(function.get("arguments") or "") + b"}"
    )  # fmt: skip


@dataclass
class _Call:
    item_id: str
    output_index: int
    call: dict[str, Any]
    where: bytes
    """The ``item_id`` and ``output_index`` of its events, encoded once."""


@dataclass
class ResponseEvents:
    """Chat completion chunks in, the Responses API's typed events out, as the bytes sent.

    States: nothing sent; ``response.created`` sent (on the first chunk); a message item open
    (text arriving); function call items open (arguments arriving); ended (``response.completed``
    or ``response.incomplete`` sent at the engine's ``[DONE]``). A text item is closed before
    the first call item opens, so items never interleave. Every event carries the next
    ``sequence_number``.

    Each event is spelled as ``json.dumps(event, separators=(",", ":"))`` spells the object
    OpenAI's schema gives it, but without building it: a delta is a template around the
    engine's text, what every event repeats (an item's ID, the request's echo) is encoded once.
    """

    body: Mapping[str, Any]
    sequence: int = 0
    base: str | None = None
    """The response's ID less its ``resp_`` prefix, once the first chunk named it."""
    envelope: _Template | None = None
    output: list[bytes] = field(default_factory=list)
    """The finished items, encoded."""
    text: list[str] | None = None
    """The open message item's text so far; None when no message item is open."""
    where: bytes = b""
    """The open message item's ``item_id``, ``output_index`` and ``content_index``, encoded."""
    calls: dict[int, _Call] = field(default_factory=dict)
    finish_reason: Any = None
    usage: Any = None
    ended: bool = False

    def _event(self, head: bytes, fields: bytes) -> bytes:
        frame = head + str(self.sequence).encode() + b"," + fields + b"}\n\n"
        self.sequence += 1
        return frame

    def feed(self, chunk: Mapping[str, Any]) -> bytes:
        """The events one engine chunk makes, framed."""
        if self.ended:
            return b""
        events: list[bytes] = []
        if self.base is None:
            self.base = _base_id(chunk.get("id"))
            echoed = _envelope(
                self.body, f"resp_{self.base}", chunk.get("created"), chunk.get("model")
            )
            self.envelope = _Template(echoed, _PRODUCED)
            response = b'"response":' + self.envelope.render(_IN_PROGRESS)
            events.append(self._event(_CREATED, response))
            events.append(self._event(_IN_PROGRESS_EVENT, response))
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        choices = chunk.get("choices") or []
        choice = choices[0] if choices and isinstance(choices[0], dict) else {}
        delta = choice.get("delta") or {}
        content = delta.get("content")
        if isinstance(content, str) and content and not self.calls:
            self._text_delta(content, events)
        for call_delta in delta.get("tool_calls") or []:
            if isinstance(call_delta, dict):
                self._call_delta(call_delta, events)
        if choice.get("finish_reason") is not None:
            self.finish_reason = choice["finish_reason"]
        return events[0] if len(events) == 1 else b"".join(events)

    def _text_delta(self, content: str, events: list[bytes]) -> None:
        if self.text is None:
            self.text = []
            item_id = _string(f"msg_{self.base}")
            index = str(len(self.output)).encode()
            self.where = (
                b'"item_id":' + item_id + b',"output_index":' + index + b',"content_index":0'
            )
            item = _message_bytes(item_id, "", "in_progress")
            events.append(self._event(_ITEM_ADDED, b'"output_index":' + index + b',"item":' + item))
            events.append(self._event(_PART_ADDED, self.where + b"," + _EMPTY_PART))
        self.text.append(content)
        events.append(
            self._event(
                _TEXT_DELTA, self.where + b',"delta":' + _string(content) + b',"logprobs":[]'
            )
        )

    def _close_text(self, events: list[bytes]) -> None:
        if self.text is None:
            return
        text, self.text = "".join(self.text), None
        index = str(len(self.output)).encode()
        status = "incomplete" if self.finish_reason == "length" else "completed"
        item = _message_bytes(_string(f"msg_{self.base}"), text, status)
        self.output.append(item)
        where = self.where
        events.append(
            self._event(_TEXT_DONE, where + b',"text":' + _string(text) + b',"logprobs":[]')
        )
        events.append(self._event(_PART_DONE, where + b',"part":' + _part_bytes(text)))
        events.append(self._event(_ITEM_DONE, b'"output_index":' + index + b',"item":' + item))

    def _call_delta(self, delta: Mapping[str, Any], events: list[bytes]) -> None:
        self._close_text(events)
        key = int(delta.get("index", len(self.calls)))
        function = delta.get("function") or {}
        held = self.calls.get(key)
        if held is None:
            item_id = f"fc_{self.base}_{key}"
            output_index = len(self.output) + len(self.calls)
            where = (
                b'"item_id":' + _string(item_id) + b',"output_index":' + str(output_index).encode()
            )
            held = _Call(item_id, output_index, {"function": {}}, where)
            self.calls[key] = held
            if delta.get("id"):
                held.call["id"] = delta["id"]
            name = function.get("name") if isinstance(function, dict) else None
            if isinstance(name, str):
                held.call["function"]["name"] = name
            item = _call_bytes(item_id, {**held.call, "function": {"name": name}}, "in_progress")
            events.append(
                self._event(
                    _ITEM_ADDED,
                    b'"output_index":' + str(output_index).encode() + b',"item":' + item,
                )
            )
        elif delta.get("id") and "id" not in held.call:
            held.call["id"] = delta["id"]
        arguments = function.get("arguments") if isinstance(function, dict) else None
        if isinstance(arguments, str) and arguments:
            target = held.call["function"]
            target["arguments"] = target.get("arguments", "") + arguments
            events.append(
                self._event(_ARGUMENTS_DELTA, held.where + b',"delta":' + _string(arguments))
            )

    def finish(self) -> bytes:
        """The closing events, at the engine's ``[DONE]``: every open item done, then the
        finished response with its usage."""
        if self.ended:
            return b""
        events = [self.feed({})] if self.base is None else []
        self._close_text(events)
        for key in sorted(self.calls):
            held = self.calls[key]
            item = _call_bytes(held.item_id, held.call, "completed")
            self.output.append(item)
            function = held.call["function"]
            events.append(
                self._event(
                    _ARGUMENTS_DONE,
                    held.where
                    + b',"name":'
                    + _string(function.get("name") or "")
                    + b',"arguments":'
                    + _string(function.get("arguments") or ""),
                )
            )
            index = str(held.output_index).encode()
            events.append(self._event(_ITEM_DONE, b'"output_index":' + index + b',"item":' + item))
        self.ended = True
        assert self.envelope is not None
        cut = self.finish_reason == "length"
        response = self.envelope.render(
            {
                "status": b'"incomplete"' if cut else b'"completed"',
                "incomplete_details": _CUT if cut else b"null",
                "output": b"[" + b",".join(self.output) + b"]",
                "usage": _json(responses_usage(self.usage)),
            }
        )
        events.append(self._event(_INCOMPLETE if cut else _COMPLETED, b'"response":' + response))
        return b"".join(events)
