"""Helpers for upstream-URL tests: a hostile OpenAI-compatible server on loopback, memory
sampling, and the rows a refused request must leave unchanged."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

PIECE = b"a" * 65536
SEND_LIMIT_BYTES = 512 * 1024 * 1024
"""A hostile server stops here in any case, so a client that never stops reading still ends."""


@dataclass(frozen=True)
class EngineAt:
    """An engine's address for the engine clients, where a test has no replica handle."""

    base_url: str
    model_name: str


@dataclass
class Hostile:
    """What the hostile server sent before its client closed the connection."""

    url: str
    sent_bytes: int = 0
    closed_by_client: int = 0
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)

    async def wait_closed_by_client(self, count: int, seconds: float = 10.0) -> None:
        """Until ``count`` connections were closed by the client (fails after ``seconds``)."""
        async with asyncio.timeout(seconds), self.changed:
            await self.changed.wait_for(lambda: self.closed_by_client >= count)


async def _serve(hostile: Hostile, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
    request = await reader.readuntil(b"\r\n\r\n")
    path = request.split(b" ", 2)[1]
    if path == b"/v1/models":
        head, opening = b"HTTP/1.1 200 OK\r\nContent-Type: application/json", b'{"data": ["'
    elif path == b"/error/v1/models":
        head, opening = b"HTTP/1.1 500 Internal Server Error", b"failure "
    else:
        head, opening = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream", b"data: "
    try:
        writer.write(head + b"\r\nConnection: close\r\n\r\n" + opening)
        while hostile.sent_bytes < SEND_LIMIT_BYTES:
            writer.write(PIECE)
            await writer.drain()
            hostile.sent_bytes += len(PIECE)
    except (ConnectionError, OSError):
        async with hostile.changed:
            hostile.closed_by_client += 1
            hostile.changed.notify_all()
    finally:
        writer.close()


@contextlib.asynccontextmanager
async def hostile_upstream() -> AsyncIterator[Hostile]:
    """A loopback server whose every answer is endless: one line, one body, never a newline."""
    hostile = Hostile(url="")

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _serve(hostile, reader, writer)

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    hostile.url = f"http://127.0.0.1:{port}"
    async with server:
        yield hostile


def rss_mib() -> float:
    """This process's resident memory now."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS in /proc/self/status")


@contextlib.asynccontextmanager
async def peak_rss_growth() -> AsyncIterator[list[float]]:
    """Sample resident memory while the block runs; yields [growth in MiB] once it ends."""
    baseline = rss_mib()
    peak = [baseline]
    stop = asyncio.Event()

    async def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], rss_mib())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.005)

    sampler = asyncio.create_task(sample())
    growth: list[float] = []
    try:
        yield growth
    finally:
        stop.set()
        await sampler
        growth.append(max(peak[0], rss_mib()) - baseline)


def table_rows(state_dir: Path, table: str) -> list[tuple[object, ...]]:
    """Every row of a table of a cluster's SQLite database, in a stable order."""
    with contextlib.closing(sqlite3.connect(state_dir / "ficc.db")) as connection:
        query = f"SELECT * FROM {table}"  # noqa: S608 - table names come from the tests
        return sorted(connection.execute(query).fetchall(), key=repr)
