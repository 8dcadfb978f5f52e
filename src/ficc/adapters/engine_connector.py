"""EngineConnector on EngineClient: one client per engine address, made once, reused."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ficc.adapters.engine_client import EngineClient, EngineStream


class EngineClients:
    """Keeps one EngineClient per (address, model name); creating a client costs milliseconds."""

    def __init__(self) -> None:
        self._clients: dict[tuple[str, str], EngineClient] = {}

    def _client(self, base_url: str, model: str) -> EngineClient:
        key = (base_url, model)
        client = self._clients.get(key)
        if client is None:
            client = self._clients[key] = EngineClient(base_url, model=model)
        return client

    async def open_stream(
        self, base_url: str, model: str, path: str, body: Mapping[str, Any]
    ) -> EngineStream:
        return await self._client(base_url, model).open_stream(path, body)

    async def complete(
        self,
        base_url: str,
        model: str,
        path: str,
        body: Mapping[str, Any],
        *,
        max_bytes: int | None = None,
    ) -> dict[str, Any]:
        return await self._client(base_url, model).complete(path, body, max_bytes=max_bytes)

    async def aclose(self) -> None:
        clients = list(self._clients.values())
        self._clients.clear()
        for client in clients:
            await client.aclose()
