"""Plain answers made from an engine's streams, and its embeddings decoded: each bounded as it
arrives, so an engine's answer cannot outgrow a grant's ``response_bytes`` or FICC's memory."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from ficc.adapters.engines.sse import MAX_ASSEMBLED_BYTES, MAX_ASSEMBLED_EVENTS, EngineStream
from ficc.base.errors import EngineUnavailable, LimitExceeded
from ficc.base.json_text import GRADUAL_JSON_BYTES, decode_gradually
from ficc.domain.openai_answers import (
    assemble_chat_completion,
    assemble_text_completion,
    chunk_text_bytes,
)
from ficc.domain.openai_requests import CHAT_COMPLETIONS_PATH


def _over_response_bytes(max_bytes: int) -> LimitExceeded:
    return LimitExceeded(
        f"the response would pass the grant's {max_bytes} response bytes",
        details={"limit": "response_bytes", "allowed": max_bytes},
    )


async def assembled_answer(
    stream: EngineStream, path: str, max_bytes: int | None
) -> dict[str, Any]:
    """The completion object of a chat or text stream. ``max_bytes``: the answer's text is
    counted while it arrives; once the text alone passes it, the whole answer would too, and
    the caller closes the stream (the engine stops) on the raise."""
    chunks: list[dict[str, Any]] = []
    size = 0
    text_bytes = 0
    async for event in stream:
        if event.done:
            continue
        size += len(event.data)
        if len(chunks) >= MAX_ASSEMBLED_EVENTS or size > MAX_ASSEMBLED_BYTES:
            raise EngineUnavailable(
                f"the engine's answer passed {MAX_ASSEMBLED_EVENTS} events or "
                f"{MAX_ASSEMBLED_BYTES} bytes; ask for a stream or fewer tokens"
            )
        payload = event.payload()
        text_bytes += chunk_text_bytes(payload)
        if max_bytes is not None and text_bytes > max_bytes:
            raise _over_response_bytes(max_bytes)
        chunks.append(payload)
    if path == CHAT_COMPLETIONS_PATH:
        return assemble_chat_completion(chunks)
    return assemble_text_completion(chunks)


async def finished_response(stream: EngineStream, max_bytes: int | None) -> dict[str, Any]:
    """The ``response`` of a Responses API stream, taken from its last event, which carries it
    whole; ``max_bytes`` bounds the events' text as it arrives."""
    size = 0
    async for event in stream:
        size += len(event.data)
        if size > MAX_ASSEMBLED_BYTES or (max_bytes is not None and size > 2 * max_bytes):
            # Each text arrives twice (its deltas, then the response): half the events'
            # bytes is a lower bound of the answer's.
            if max_bytes is not None and size <= MAX_ASSEMBLED_BYTES:
                raise _over_response_bytes(max_bytes)
            raise EngineUnavailable(
                f"the engine's answer passed {MAX_ASSEMBLED_BYTES} bytes; ask for a "
                "stream or fewer tokens"
            )
        if event.done:
            response = event.payload().get("response")
            if not isinstance(response, dict):
                raise EngineUnavailable("the engine's last event carries no response")
            return response
    raise EngineUnavailable("the engine ended the stream before it was complete")


def _joined_and_decoded_gradually(pieces: list[bytes]) -> Any:
    return decode_gradually(b"".join(pieces))


def embeddings_limit(max_bytes: int | None) -> int:
    """How much of an embeddings answer is read: the grant's ``response_bytes`` or FICC's."""
    return MAX_ASSEMBLED_BYTES if max_bytes is None else min(max_bytes, MAX_ASSEMBLED_BYTES)


async def decoded_embeddings(pieces: list[bytes], limit: int) -> dict[str, Any]:
    """An embeddings answer read within ``limit`` (one byte past it: over), as its object.
    One over a few MiB is joined and decoded in a worker thread, gradually, so the loop goes
    on: even copying it whole once would hold the loop for tens of milliseconds."""
    size = sum(len(piece) for piece in pieces)
    if size > limit and limit != MAX_ASSEMBLED_BYTES:
        raise LimitExceeded(
            f"the engine's embeddings passed the grant's {limit} response bytes",
            details={"limit": "response_bytes", "allowed": limit},
        )
    if size > MAX_ASSEMBLED_BYTES:
        raise EngineUnavailable(f"the engine's embeddings passed {MAX_ASSEMBLED_BYTES} bytes")
    try:
        if size > GRADUAL_JSON_BYTES:
            value = await asyncio.to_thread(_joined_and_decoded_gradually, pieces)
        else:
            value = json.loads(b"".join(pieces))
    except ValueError as exc:
        raise EngineUnavailable("the engine's embeddings are not JSON") from exc
    if not isinstance(value, dict) or not isinstance(value.get("data"), list):
        raise EngineUnavailable("the engine's embeddings are not a list object")
    return value
