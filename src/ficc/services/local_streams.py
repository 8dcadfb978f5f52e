"""Counting what a local stream sent a restricted token's caller: its events and bytes, and
the engine's usage chunk where it sent one (what the token is charged when no usage came)."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass

from ficc.domain import metering as m


@dataclass
class Counted:
    """What a local stream sent: events (each after the first one token) and bytes, and the
    engine's usage chunk where it sent one."""

    events: int = 0
    sent_bytes: int = 0
    usage: tuple[int, int] | None = None
    ended: bool = False

    @property
    def counts(self) -> tuple[int, int]:
        return self.usage if self.usage is not None else (0, max(self.events - 1, 0))

    async def count(self, chunks: AsyncIterator[bytes]) -> AsyncGenerator[bytes, None]:
        async for chunk in chunks:
            self.sent_bytes += len(chunk)
            self.events += chunk.count(b"data: ") - chunk.count(b"data: [DONE]")
            if b'"usage"' in chunk:
                self._take_usage(chunk)
            yield chunk
        self.ended = True

    def _take_usage(self, chunk: bytes) -> None:
        for line in chunk.split(b"\n"):
            if not line.startswith(b"data: {"):
                continue
            try:
                payload = json.loads(line[len(b"data: ") :])
            except ValueError:
                continue
            told = m.parse_told(payload.get("usage")) if isinstance(payload, dict) else None
            if told is not None:
                self.usage = told
