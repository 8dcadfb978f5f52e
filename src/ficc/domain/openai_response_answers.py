"""OpenAI's Responses API on engines that serve chat completions only: the ``response`` object.

Pure rules, no I/O, no clock: the engine's plain chat answer to the translated request becomes
OpenAI's ``response`` object (:func:`response_object`), and a streamed one's envelope and usage
come from here too. IDs and times come from the engine's answer, so nothing here reads a clock
or draws randomness.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def response_id_base(chat_id: Any) -> str:
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


def response_envelope(
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
    base = response_id_base(answer.get("id"))
    response = response_envelope(body, f"resp_{base}", answer.get("created"), answer.get("model"))
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
