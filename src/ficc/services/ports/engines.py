"""The engines' port: OpenAI-compatible engines called in streaming mode, event by event."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Protocol

from ficc.base.json_types import JSONObject


class EngineEvent(Protocol):
    """One server-sent event from an engine."""

    @property
    def data(self) -> str: ...
    @property
    def done(self) -> bool: ...
    def payload(self) -> JSONObject:
        """The event's JSON object, parsed at most once whoever asks (the relay, usage
        counting, metering); EngineUnavailable if it is not one."""
        ...


class EngineStream(Protocol):
    """An open streamed engine response; closing it stops the generation."""

    def __aiter__(self) -> AsyncIterator[EngineEvent]: ...
    async def aclose(self) -> None: ...
    def ready(self) -> bool:
        """Whether the next event has already arrived (taking it will not wait)."""
        ...

    def ended(self) -> bool:
        """Whether the stream's last event has been taken (none follows)."""
        ...


class EngineAddress(Protocol):
    """Where an engine answers and the model name it answers to: an invocation's endpoint
    and a replica's handle are each one."""

    @property
    def base_url(self) -> str: ...
    @property
    def model_name(self) -> str: ...


class EngineConnector(Protocol):
    """Calls OpenAI-compatible engines, always in streaming mode."""

    async def open_stream(
        self, engine: EngineAddress, path: str, body: Mapping[str, object]
    ) -> EngineStream: ...
    async def complete(
        self,
        engine: EngineAddress,
        path: str,
        body: Mapping[str, object],
        *,
        max_bytes: int | None = None,
    ) -> JSONObject:
        """A plain answer; with ``max_bytes``, LimitExceeded as soon as the events received
        would pass it (counted as a stream of them would be sent: ``data: …`` lines)."""
        ...

    async def count_tokens(self, engine: EngineAddress, text: str) -> int | None:
        """The tokens of ``text`` by the engine's tokenizer, before any generation; None
        where the engine has no tokenizer FICC can ask."""
        ...

    async def aclose(self) -> None: ...
