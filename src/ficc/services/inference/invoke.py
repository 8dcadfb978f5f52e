"""One invocation of a service's OpenAI path: the local URL and a peer's ``inference.invoke``
both run it, so an OpenAI parameter or an engine quirk has one home.

In order: the request checked as OpenAI checks it; the service's replica with its spec's
runtime and options (from the router's memory, no transaction); what that runtime would not do
refused; the body the engine is sent; the answer, plain or streamed; the answer in OpenAI's
shape; and the caller's ``max_bytes`` (a grant's ``response_bytes``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Mapping
from dataclasses import dataclass

from ficc.base.errors import EngineUnavailable, LimitExceeded
from ficc.base.json_types import JSONObject
from ficc.domain import metering as m
from ficc.domain.inference import RuntimeName
from ficc.domain.openai_answers import error_event, shape_answer, sse_event
from ficc.domain.openai_requests import CHAT_COMPLETIONS_PATH, EMBEDDINGS_PATH
from ficc.domain.openai_response_answers import response_object
from ficc.domain.openai_response_events import ResponseEvents
from ficc.domain.openai_responses import RESPONSES_PATH, chat_request, check_invocation
from ficc.domain.openai_runtimes import RUNTIME_CAPABILITIES, check_capabilities, engine_body
from ficc.domain.routes import ADMISSION_STAGE
from ficc.protocol.canonical import canonical_json_and_compact_size
from ficc.services.inference.records import Endpoint
from ficc.services.inference.router import InvocationRouter
from ficc.services.metering import Tab
from ficc.services.ports import EngineEvent, EngineStream
from ficc.services.ports.peers import HeldChunk


class Invocations:
    """Invokes a running service of a project; ``max_bytes`` bounds the answer when given."""

    def __init__(self, router: InvocationRouter, *, join_seconds: float = 0.0) -> None:
        self._router = router
        self._join_seconds = join_seconds
        """How often at most a stream's pieces go on (0: each event as it came); see
        :func:`_coalesced`."""

    async def complete(
        self, project: str, service_id: str, path: str, body: Mapping[str, object]
    ) -> JSONObject:
        """The plain answer in OpenAI's shape."""
        plan, answer = await self._answer(project, service_id, path, body, None)
        if path == EMBEDDINGS_PATH:
            # Vectors averaged in a worker thread: tens of MiB of floats would hold the loop.
            return await asyncio.to_thread(plan.shape, body, answer)
        return plan.shape(body, answer)

    async def encoded(
        self,
        project: str,
        service_id: str,
        path: str,
        body: Mapping[str, object],
        *,
        max_bytes: int,
        tab: Tab | None = None,
    ) -> bytes:
        """The plain answer in OpenAI's shape as RFC 8785 JSON (as the wire carries it), whose
        compact JSON (as the caller's compatible URL sends it) is at most ``max_bytes``.

        The text is counted while it arrives (an answer whose text alone passes ``max_bytes``
        stops the engine at once); the shaped answer is measured from the one encoding that
        sends it on.
        """
        plan, answer = await self._answer(project, service_id, path, body, max_bytes, tab)
        if tab is not None:
            _take_usage(tab, answer.get("usage"), path)
        if path == EMBEDDINGS_PATH:
            # Averaged, encoded and measured in a worker thread, value by value: tens of MiB
            # of floats would otherwise hold the loop for seconds.
            content, size = await asyncio.to_thread(
                encode_shaped, plan.shape(body, answer), gradual=True
            )
        else:
            content, size = encode_shaped(plan.shape(body, answer))
        # Counted as the caller's compatible URL will send it (compact JSON, ASCII escapes).
        if size > max_bytes:
            raise LimitExceeded(
                f"the response is {size} bytes; the grant allows {max_bytes}",
                details={"limit": "response_bytes", "allowed": max_bytes},
            )
        return content

    @contextlib.asynccontextmanager
    async def stream(
        self,
        project: str,
        service_id: str,
        path: str,
        body: Mapping[str, object],
        *,
        max_bytes: int | None = None,
        tab: Tab | None = None,
    ) -> AsyncIterator[AsyncIterator[bytes]]:
        """The engine's events as server-sent events; leaving the block stops the engine.

        With ``max_bytes`` the bytes sent are counted: the event that would pass it is replaced
        by an error event naming ``response_bytes``, and the stream ends.
        """
        plan = await self._prepare(project, service_id, path, body)
        asked_usage = True
        if tab is not None and await self._admit(plan, path, body, tab):
            asked_usage = _ask_usage(plan)
        async with self._router.stream(plan.endpoint, plan.engine_path, plan.sent) as events:
            framed: AsyncGenerator[bytes, None]
            if plan.translated:
                framed = _typed(events, body, tab)
            elif path == RESPONSES_PATH:
                framed = _named(events, tab)
            elif tab is not None:
                framed = _metered(events, tab, asked_usage)
            else:
                framed = _relayed(events)
            bounded = _bounded(framed, max_bytes)
            async with (
                contextlib.aclosing(framed),
                contextlib.aclosing(bounded),
                contextlib.aclosing(_coalesced(bounded, events, self._join_seconds)) as chunks,
            ):
                yield chunks

    async def _answer(
        self,
        project: str,
        service_id: str,
        path: str,
        body: Mapping[str, object],
        max_bytes: int | None,
        tab: Tab | None = None,
    ) -> tuple[_Plan, JSONObject]:
        plan = await self._prepare(project, service_id, path, body)
        if tab is not None:
            await self._admit(plan, path, body, tab)
        answer = await self._router.complete(plan.endpoint, plan.engine_path, plan.sent, max_bytes)
        return plan, answer

    async def _admit(self, plan: _Plan, path: str, body: Mapping[str, object], tab: Tab) -> bool:
        """Count the prompt and reserve its tokens, before any engine work; the completion
        the engine is asked for is bounded by what the reservation leaves. Whether the grant
        limits tokens: a grant that does not costs the engine nothing more than before (its
        counts are the engine's usage where the answer carries one)."""
        if not tab.grant.terms.limits_tokens:
            await tab.admit(0, None)
            tab.engine_started = True
            return False
        text, items = m.prompt_text(path, body)
        endpoint = plan.endpoint
        counted = None
        if endpoint.runtime == RuntimeName.LLAMA_CPP:
            counted = await self._router.engines.count_tokens(endpoint, text)
        if counted is None:
            counted = m.estimated_tokens(text)
        prompt = counted + m.template_allowance(path, items)
        name, asked = m.requested_max_tokens(plan.sent)
        try:
            # Embeddings generate nothing: their input is all they reserve.
            bound = await tab.admit(prompt, 0 if path == EMBEDDINGS_PATH else asked)
        except LimitExceeded as exc:
            # Refused before any engine work, as the gate refuses: a route may move on.
            exc.details.setdefault("stage", ADMISSION_STAGE)
            raise
        if bound is not None and path != EMBEDDINGS_PATH and bound != asked:
            field = name or (
                "max_output_tokens" if plan.engine_path == RESPONSES_PATH else "max_tokens"
            )
            plan.sent[field] = bound
        tab.engine_started = True
        return True

    async def _prepare(
        self, project: str, service_id: str, path: str, body: Mapping[str, object]
    ) -> _Plan:
        """The replica and the body its engine is sent, or the refusal naming the parameter.

        A caller's body (a hostile peer's too) is checked as OpenAI checks it and against
        what the service's runtime honours: never a silent drop. A Responses request goes to
        an engine without that API as the chat request that answers it.
        """
        check_invocation(path, body)
        endpoint = await self._router.endpoint(project, service_id)
        translated = (
            path == RESPONSES_PATH and not RUNTIME_CAPABILITIES[endpoint.runtime].responses_api
        )
        engine_path, request = (
            (CHAT_COMPLETIONS_PATH, chat_request(body)) if translated else (path, body)
        )
        check_capabilities(endpoint.runtime, endpoint.options, engine_path, request)
        sent = engine_body(endpoint.runtime, engine_path, request)
        return _Plan(endpoint, engine_path, sent, translated)


@dataclass(frozen=True)
class _Plan:
    """Where an invocation goes: the replica, the engine's path and body, and whether the
    answer is translated back (a Responses request answered by chat completions)."""

    endpoint: Endpoint
    engine_path: str
    sent: JSONObject
    translated: bool

    def shape(self, body: Mapping[str, object], answer: JSONObject) -> JSONObject:
        """The engine's plain answer in the shape the caller asked for."""
        if self.translated:
            return response_object(body, answer)
        return shape_answer(self.endpoint.runtime, self.engine_path, body, answer)


async def _relayed(events: AsyncIterable[EngineEvent]) -> AsyncGenerator[bytes, None]:
    """Each engine event framed once, as it came."""
    async for event in events:
        yield sse_event(event.data)


async def _metered(
    events: AsyncIterable[EngineEvent], tab: Tab, asked_usage: bool
) -> AsyncGenerator[bytes, None]:
    """:func:`_relayed`, counting: each chunk after the first (the role) is one token, as
    llama.cpp's server and OpenAI stream them, until the engine's usage chunk (asked for by
    the grantor, passed on only when the caller asked for it) gives the true counts. Only an
    event naming a usage is parsed."""
    sent = 0
    async for event in events:
        data = event.data
        if '"usage"' in data and '"usage":null' not in data and not event.done:
            payload = event.payload()
            if not payload.get("choices") and _take_usage(tab, payload.get("usage"), ""):
                if asked_usage:
                    yield sse_event(data)
                continue
        if not event.done:
            sent += 1
            tab.completion_tokens = max(sent - 1, 0)
        yield sse_event(data)


def _ask_usage(plan: _Plan) -> bool:
    """Ask the engine for its usage chunk; whether the caller asked for it already."""
    options = plan.sent.get("stream_options")
    asked = isinstance(options, dict) and options.get("include_usage") is True
    if not asked and plan.engine_path != RESPONSES_PATH:
        # check_request made stream_options an object when present.
        kept = options if isinstance(options, dict) else {}
        plan.sent["stream_options"] = {**kept, "include_usage": True}
    return asked


def _take_usage(tab: Tab, usage: object, path: str) -> bool:
    """The engine's counts, when it gave them; whether it did."""
    if not isinstance(usage, dict):
        return False
    prompt = usage.get("prompt_tokens", usage.get("input_tokens"))
    completion = usage.get("completion_tokens", usage.get("output_tokens", 0))
    if not isinstance(prompt, int) or not isinstance(completion, int):
        return False
    tab.prompt_tokens = prompt
    tab.completion_tokens = 0 if path == EMBEDDINGS_PATH else completion
    return True


async def _named(
    events: AsyncIterable[EngineEvent], tab: Tab | None = None
) -> AsyncGenerator[bytes, None]:
    """A Responses stream passed through, each event framed with its ``event:`` name (its
    ``type``), as OpenAI frames them; a ``[DONE]`` is not passed on (OpenAI sends none)."""
    async for event in events:
        if event.data == "[DONE]":
            continue
        payload = event.payload()
        if tab is not None:
            tab.completion_tokens += 1
            response = payload.get("response")
            if event.done and isinstance(response, dict):
                _take_usage(tab, response.get("usage"), "")
        kind = payload.get("type")
        yield b"event: " + str(kind).encode() + b"\n" + sse_event(event.data)


async def _typed(
    events: AsyncIterable[EngineEvent], body: Mapping[str, object], tab: Tab | None = None
) -> AsyncGenerator[bytes, None]:
    """Chat chunks as the Responses API's typed events; the engine's ``[DONE]`` ends them.

    The events one chunk makes go on together, as one piece (one frame to a peer): a Responses
    stream has about twice as many events as the chat stream it comes from.
    """
    state = ResponseEvents(body)
    async for event in events:
        produced = state.finish() if event.done else state.feed(event.payload())
        if tab is not None:
            tab.completion_tokens += 0 if event.done else 1
            if state.usage is not None:
                _take_usage(tab, state.usage, "")
        if produced:
            yield produced


async def _bounded(
    chunks: AsyncIterator[bytes], max_bytes: int | None
) -> AsyncGenerator[bytes, None]:
    """The chunks, counted as they go against ``max_bytes``."""
    sent = 0
    async for chunk in chunks:
        if max_bytes is not None and sent + len(chunk) > max_bytes:
            yield error_event(
                LimitExceeded(
                    f"the response would pass the grant's {max_bytes} response bytes",
                    details={"limit": "response_bytes", "allowed": max_bytes},
                )
            )
            return
        sent += len(chunk)
        yield chunk


async def _coalesced(
    chunks: AsyncIterator[bytes], events: EngineStream, join_seconds: float = 0.0
) -> AsyncGenerator[bytes, None]:
    """The chunks, those the engine had already sent while the last went on joined into one
    piece (the same bytes): when whoever reads falls behind the engine, each write to it
    carries all that waited, not one event. The first goes on alone, whatever waits behind
    it: the time to the first token is never the time to the whole answer.

    With ``join_seconds``, a piece goes on at most that often: after each, what the engine
    sends in the next ``join_seconds`` gathers in its connection and goes on together. A
    stream slower than that gets each event as it comes; a faster one pays each hop's
    per-write cost once a window, not once a token, and no event waits longer than the
    window. Nothing waits when the next event is already here, nor once the engine's last
    event is out: what follows it is this cluster's own (a translation's closing events),
    made without waiting on anyone, and goes on with it as one last piece.
    """
    waiting: list[bytes] = []
    first = True
    async for chunk in chunks:
        waiting.append(chunk)
        if first or not (events.ready() or events.ended()):
            first = False
            yield waiting[0] if len(waiting) == 1 else b"".join(waiting)
            waiting = []
            if join_seconds and not events.ready() and not events.ended():
                await asyncio.sleep(join_seconds)
    if waiting:
        # Nothing more is awaited from the engine: a transport may hold it for what follows.
        yield HeldChunk(b"".join(waiting))


def encoded_answer(
    runtime: RuntimeName,
    path: str,
    body: Mapping[str, object],
    answer: JSONObject,
    *,
    gradual: bool = False,
) -> tuple[bytes, int]:
    """The answer in OpenAI's shape as RFC 8785 JSON, and the size of its compact JSON (what
    ``response_bytes`` counts); ``gradual`` in a worker thread."""
    return encode_shaped(shape_answer(runtime, path, body, answer), gradual=gradual)


def encode_shaped(shaped: JSONObject, *, gradual: bool = False) -> tuple[bytes, int]:
    """A shaped answer as RFC 8785 JSON and the size of its compact JSON.

    An engine's answer the wire cannot carry (a NaN, an integer past 2**53) is the engine's
    failure.
    """
    try:
        return canonical_json_and_compact_size(shaped, gradual=gradual)
    except ValueError as exc:
        raise EngineUnavailable("the engine's answer holds a value JSON cannot carry") from exc
