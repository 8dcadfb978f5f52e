"""What one streamed request to the engine costs the client's process: aiohttp (FICC's engine
client's library) beside a bare HTTP/1.1 exchange on one kept connection, parsed by httptools.

``python -m benchmarks.engine_clients`` (inside ``scripts/in-loopback-netns``) starts the mock
engine and, alternating the two twice, sends :data:`REQUESTS` streamed 2-token chats with each,
reading every byte of each answer; it prints CPU µs of this process per request. The bare
exchange is the floor any client pays (a write, the reads, the parse), not a client FICC could
use as it is: no TLS, no pool, no timeouts, no bounds.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

import aiohttp
import httptools
import uvloop

from benchmarks.bench_inference import MOCK_MODEL
from benchmarks.processes import mock_engine_running

REQUESTS: Final = 2000
WARM_UP: Final = 20
BODY: Final = json.dumps(
    {
        "model": MOCK_MODEL,
        "messages": [{"role": "user", "content": "Hi"}],
        "max_tokens": 2,
        "stream": True,
    }
).encode()
PATH: Final = "/v1/chat/completions"


async def _with_aiohttp(url: str) -> float:
    async with aiohttp.ClientSession(auto_decompress=False) as session:

        async def one() -> None:
            headers = {"content-type": "application/json"}
            async with session.post(url + PATH, data=BODY, headers=headers) as response:
                async for _ in response.content.iter_any():
                    pass

        for _ in range(WARM_UP):
            await one()
        started = time.process_time()
        for _ in range(REQUESTS):
            await one()
        return (time.process_time() - started) / REQUESTS * 1e6


class _Exchange(asyncio.Protocol):
    """One kept connection: each answer parsed by httptools, its end a future's result."""

    def __init__(self) -> None:
        self.ended: asyncio.Future[None] | None = None
        self.parser = httptools.HttpResponseParser(self)

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_body(self, body: bytes) -> None:
        return None

    def on_message_complete(self) -> None:
        if self.ended is not None:
            self.ended.set_result(None)


async def _bare(url: str) -> float:
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    loop = asyncio.get_running_loop()
    transport, exchange = await loop.create_connection(_Exchange, host, port)
    head = (
        f"POST {PATH} HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(BODY)}\r\n\r\n"
    ).encode()

    async def one() -> None:
        exchange.ended = loop.create_future()
        exchange.parser = httptools.HttpResponseParser(exchange)
        transport.write(head + BODY)
        await exchange.ended

    try:
        for _ in range(WARM_UP):
            await one()
        started = time.process_time()
        for _ in range(REQUESTS):
            await one()
        return (time.process_time() - started) / REQUESTS * 1e6
    finally:
        transport.close()


def measure() -> dict[str, list[float]]:
    with tempfile.TemporaryDirectory(prefix="ficc-clients-") as temporary, ExitStack() as stack:
        engine = mock_engine_running(stack, Path(temporary))
        found: dict[str, list[float]] = {"aiohttp_us": [], "bare_httptools_us": []}
        for _ in range(2):
            found["aiohttp_us"].append(uvloop.run(_with_aiohttp(engine.url)))
            found["bare_httptools_us"].append(uvloop.run(_bare(engine.url)))
        return found


if __name__ == "__main__":
    print(json.dumps(measure(), indent=1))
