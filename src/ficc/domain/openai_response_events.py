"""OpenAI's Responses API on engines that serve chat completions only: the typed events.

Pure rules, no I/O, no clock: a streamed chat answer's chunks become the Responses API's typed
server-sent events (:class:`ResponseEvents`), written as the bytes sent.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from json.encoder import encode_basestring_ascii
from typing import Any, Final

from ficc.domain.openai_response_answers import (
    response_envelope,
    response_id_base,
    responses_usage,
)

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
    """A message item of :func:`~ficc.domain.openai_response_answers.response_object`, as
    :func:`_json` spells it."""
    content = b"[" + _part_bytes(text) + b"]" if status != "in_progress" else b"[]"
    return (
        b'{"id":' + item_id + b',"type":"message","role":"assistant","status":'
        + _string(status) + b',"content":' + content + b"}"
    )  # fmt: skip


def _part_bytes(text: str) -> bytes:
    """An output text part, as :func:`_json` spells it."""
    return b'{"type":"output_text","text":' + _string(text) + b',"annotations":[],"logprobs":[]}'


def _call_bytes(item_id: str, call: Mapping[str, Any], status: str) -> bytes:
    """A function call item, as :func:`_json` spells it (the engine's call ID may be any value)."""
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
            self.base = response_id_base(chunk.get("id"))
            echoed = response_envelope(
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
