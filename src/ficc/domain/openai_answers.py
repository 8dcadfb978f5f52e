"""OpenAI answers: a plain answer assembled from the engine's streamed chunks, and shaped as
OpenAI sends it where the runtime's engine answers otherwise.

Pure rules, no I/O: every engine is asked to stream (so a cancel stops it), and a plain caller
gets the object these functions join from the chunks. A streaming caller gets each event framed
by :func:`sse_event`, the one place that spells a server-sent event.
"""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Mapping
from typing import Any

from ficc.base.errors import EngineUnavailable, ErrorShape, FiccError, render
from ficc.domain.inference import RuntimeName
from ficc.domain.openai_requests import EMBEDDINGS_PATH
from ficc.domain.openai_runtimes import RUNTIME_CAPABILITIES


def _merge_logprobs(old: Any, new: Any) -> Any:
    """Streamed logprobs are lists split across chunks: join them, keep other fields."""
    if new is None:
        return old
    if old is None:
        return new
    if isinstance(old, dict) and isinstance(new, dict):
        merged = dict(old)
        for key, value in new.items():
            if isinstance(merged.get(key), list) and isinstance(value, list):
                merged[key] = merged[key] + value
            elif value is not None:
                merged[key] = value
        return merged
    return new


def _header(chunks: list[dict[str, Any]], obj: str) -> dict[str, Any]:
    if not chunks:
        raise EngineUnavailable("the engine sent no completion")
    first = chunks[0]
    result: dict[str, Any] = {
        "id": first.get("id"),
        "object": obj,
        "created": first.get("created"),
        "model": first.get("model"),
    }
    if first.get("system_fingerprint") is not None:
        result["system_fingerprint"] = first["system_fingerprint"]
    usage = next((c["usage"] for c in reversed(chunks) if c.get("usage")), None)
    if usage is not None:
        result["usage"] = usage
    return result


def _choices(chunk: dict[str, Any]) -> list[dict[str, Any]]:
    choices = chunk.get("choices") or []
    return [c for c in choices if isinstance(c, dict)]


def _merge_tool_calls(calls: dict[int, dict[str, Any]], deltas: list[Any]) -> None:
    for delta in deltas:
        if not isinstance(delta, dict):
            continue
        call = calls.setdefault(int(delta.get("index", len(calls))), {"function": {}})
        for key in ("id", "type"):
            if delta.get(key) is not None:
                call[key] = delta[key]
        _merge_function(call["function"], delta.get("function"))


def _merge_function(target: dict[str, Any], function: Any) -> None:
    """Arguments arrive in pieces; the name arrives once from OpenAI but in every delta from
    llama.cpp's server, so a name equal to the one held is not appended again."""
    if not isinstance(function, dict):
        return
    name = function.get("name")
    if name and name != target.get("name"):
        target["name"] = target.get("name", "") + name
    if function.get("arguments"):
        target["arguments"] = target.get("arguments", "") + function["arguments"]


def assemble_chat_completion(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """Join ``chat.completion.chunk`` objects into one ``chat.completion``, with every field
    OpenAI's schema requires (``message.refusal`` and each choice's ``logprobs``, ``null`` when
    the engine sent none; a tool call's ``type``)."""
    result = _header(chunks, "chat.completion")
    merged: dict[int, dict[str, Any]] = {}
    tool_calls: dict[int, dict[int, dict[str, Any]]] = {}
    for chunk in chunks:
        for choice in _choices(chunk):
            index = int(choice.get("index", 0))
            slot = merged.setdefault(
                index,
                {
                    "role": None,
                    "content": [],
                    "finish_reason": None,
                    "logprobs": None,
                    "function_call": None,
                    "refusal": None,
                },
            )
            delta = choice.get("delta") or {}
            if delta.get("role"):
                slot["role"] = delta["role"]
            if delta.get("content"):
                slot["content"].append(delta["content"])
            if isinstance(delta.get("refusal"), str):
                slot["refusal"] = (slot["refusal"] or "") + delta["refusal"]
            if delta.get("tool_calls"):
                _merge_tool_calls(tool_calls.setdefault(index, {}), delta["tool_calls"])
            if isinstance(delta.get("function_call"), dict):
                # The deprecated form, which llama.cpp's server sends beside tool_calls.
                slot["function_call"] = slot["function_call"] or {}
                _merge_function(slot["function_call"], delta["function_call"])
            if choice.get("finish_reason") is not None:
                slot["finish_reason"] = choice["finish_reason"]
            slot["logprobs"] = _merge_logprobs(slot["logprobs"], choice.get("logprobs"))
    choices = []
    for index in sorted(merged):
        slot = merged[index]
        calls = [tool_calls[index][i] for i in sorted(tool_calls.get(index, {}))]
        message: dict[str, Any] = {
            "role": slot["role"] or "assistant",
            "content": "".join(slot["content"]) if slot["content"] or not calls else None,
            "refusal": slot["refusal"],
        }
        if calls:
            message["tool_calls"] = [{"type": "function", **call} for call in calls]
        if slot["function_call"] is not None:
            message["function_call"] = slot["function_call"]
        choices.append(
            {
                "index": index,
                "message": message,
                "logprobs": slot["logprobs"],
                "finish_reason": slot["finish_reason"],
            }
        )
    result["choices"] = choices
    return result


def assemble_text_completion(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """Join streamed ``text_completion`` objects into one."""
    result = _header(chunks, "text_completion")
    merged: dict[int, dict[str, Any]] = {}
    for chunk in chunks:
        for choice in _choices(chunk):
            index = int(choice.get("index", 0))
            slot = merged.setdefault(index, {"text": [], "finish_reason": None, "logprobs": None})
            if choice.get("text"):
                slot["text"].append(choice["text"])
            if choice.get("finish_reason") is not None:
                slot["finish_reason"] = choice["finish_reason"]
            slot["logprobs"] = _merge_logprobs(slot["logprobs"], choice.get("logprobs"))
    result["choices"] = [
        {
            "index": index,
            "text": "".join(merged[index]["text"]),
            "logprobs": merged[index]["logprobs"],
            "finish_reason": merged[index]["finish_reason"],
        }
        for index in sorted(merged)
    ]
    return result


def chunk_text_bytes(chunk: Mapping[str, Any]) -> int:
    """The bytes of text a streamed chunk adds to its answer: a lower bound of what it adds
    to the assembled JSON (which also carries the envelope and escapes)."""
    total = 0
    for choice in chunk.get("choices") or ():
        if not isinstance(choice, dict):
            continue
        delta = choice.get("delta")
        text = delta.get("content") if isinstance(delta, dict) else choice.get("text")
        if isinstance(text, str):
            total += len(text.encode())
    return total


def _mean(vectors: list[Any]) -> list[float]:
    """One vector from a model without pooling, which answers one vector per token."""
    if not vectors or not all(isinstance(v, list) and v for v in vectors):
        raise EngineUnavailable("the engine answered an embedding with no values")
    width = len(vectors[0])
    return [sum(float(v[i]) for v in vectors) / len(vectors) for i in range(width)]


def _base64_floats(vector: list[float]) -> str:
    """OpenAI's base64 embedding: the little-endian float32 values, encoded."""
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")


def shape_answer(
    runtime: RuntimeName, path: str, body: Mapping[str, Any], answer: dict[str, Any]
) -> dict[str, Any]:
    """The engine's plain answer in OpenAI's shape, undoing what :func:`engine_body` changed.

    llama.cpp answers a model without pooling (the example model) with one vector per token:
    FICC averages them into the one vector OpenAI returns, and encodes it in base64 when asked.
    """
    if path != EMBEDDINGS_PATH or not RUNTIME_CAPABILITIES[runtime].translated:
        return answer
    encoded = body.get("encoding_format") == "base64"
    data = []
    for item in answer.get("data") or []:
        vector = item.get("embedding") if isinstance(item, dict) else None
        if isinstance(vector, list) and vector and isinstance(vector[0], list):
            vector = _mean(vector)
        if encoded and isinstance(vector, list):
            vector = _base64_floats([float(x) for x in vector])
        data.append({**item, "embedding": vector})
    return {**answer, "data": data}


def sse_event(data: str) -> bytes:
    """One server-sent event carrying ``data`` (an engine's event, relayed as it came)."""
    return b"data: " + data.encode() + b"\n\n"


def error_event(error: FiccError) -> bytes:
    """The event that ends a stream with ``error``: OpenAI's error shape with FICC's details."""
    return sse_event(json.dumps(render(error, ErrorShape.EVENT)))
