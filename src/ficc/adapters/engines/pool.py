"""EngineConnector on EngineClient: one client per engine address, reused, evicted when idle.

Engines that FICC launches answer only to the random API key of their attempt; the runtime
that launched one tells this connector its key, and forgets the address when the engine stops.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from ficc.adapters.engines.client import EngineClient
from ficc.adapters.engines.sse import EngineStream
from ficc.services.ports import EngineAddress

MAX_IDLE_CLIENTS: Final = 32
"""Clients kept for reuse with no request in flight; the oldest beyond this are closed."""
IDLE_SECONDS: Final = 300.0
"""A client unused this long is closed at the next release (its engine may be long gone)."""


@dataclass
class _Entry:
    """A client and the requests now using it."""

    client: EngineClient
    users: int = 0
    idle_since: float = 0.0
    retired: bool = False


class EngineClients:
    """Keeps one EngineClient per (address, model name); creating a client costs milliseconds.

    The map is bounded: a client is closed once nothing uses it and it is retired (its engine
    stopped), idle for :data:`IDLE_SECONDS`, or beyond the :data:`MAX_IDLE_CLIENTS` newest.
    A client in use is never closed under its request.
    """

    def __init__(
        self,
        *,
        max_idle_clients: int = MAX_IDLE_CLIENTS,
        idle_seconds: float = IDLE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._entries: dict[tuple[str, str], _Entry] = {}
        self._draining: list[_Entry] = []
        """Retired clients replaced in the map while a request still used them."""
        self._api_keys: dict[str, str] = {}
        self._max_idle = max_idle_clients
        self._idle_seconds = idle_seconds
        self._clock = clock

    def __len__(self) -> int:
        """How many clients are open now."""
        return len(self._entries)

    async def set_api_key(self, base_url: str, api_key: str) -> None:
        """Requests to ``base_url`` carry ``api_key`` from now on (a new engine on that port)."""
        await self.forget(base_url)
        self._api_keys[base_url] = api_key

    async def forget(self, base_url: str) -> None:
        """The engine at ``base_url`` stopped: drop its key and close its clients once unused."""
        self._api_keys.pop(base_url, None)
        for (url, _), entry in self._entries.items():
            if url == base_url:
                entry.retired = True
        await self._prune()

    def _acquire(self, engine: EngineAddress) -> _Entry:
        base_url = engine.base_url
        key = (base_url, engine.model_name)
        entry = self._entries.get(key)
        if entry is not None and entry.retired:
            self._draining.append(entry)  # in use (else pruned): closed when its last use ends
            entry = None
        if entry is None:
            client = EngineClient(
                base_url, model=engine.model_name, api_key=self._api_keys.get(base_url)
            )
            entry = self._entries[key] = _Entry(client)
        entry.users += 1
        return entry

    async def _release(self, entry: _Entry) -> None:
        entry.users -= 1
        entry.idle_since = self._clock()
        if entry in self._draining and entry.users == 0:
            self._draining.remove(entry)
            await entry.client.aclose()
        await self._prune()

    async def _prune(self) -> None:
        now = self._clock()
        idle = [(key, e) for key, e in self._entries.items() if e.users == 0]
        idle.sort(key=lambda item: item[1].idle_since)
        surplus = len(idle) - self._max_idle
        closing = []
        for index, (key, entry) in enumerate(idle):
            if entry.retired or index < surplus or now - entry.idle_since >= self._idle_seconds:
                del self._entries[key]
                closing.append(entry.client)
        for client in closing:
            await client.aclose()

    async def open_stream(
        self, engine: EngineAddress, path: str, body: Mapping[str, Any]
    ) -> EngineStream:
        entry = self._acquire(engine)

        async def release() -> None:
            await self._release(entry)

        try:
            return await entry.client.open_stream(path, body, on_close=release)
        except BaseException:
            await release()
            raise

    async def complete(
        self,
        engine: EngineAddress,
        path: str,
        body: Mapping[str, Any],
        *,
        max_bytes: int | None = None,
    ) -> dict[str, Any]:
        entry = self._acquire(engine)
        try:
            return await entry.client.complete(path, body, max_bytes=max_bytes)
        finally:
            await self._release(entry)

    async def count_tokens(self, engine: EngineAddress, text: str) -> int | None:
        entry = self._acquire(engine)
        try:
            return await entry.client.count_tokens(text)
        finally:
            await self._release(entry)

    async def aclose(self) -> None:
        entries = [*self._entries.values(), *self._draining]
        self._entries.clear()
        self._draining.clear()
        for entry in entries:
            await entry.client.aclose()
