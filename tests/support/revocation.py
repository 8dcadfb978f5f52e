"""Helpers for revocation tests: an engine that floods or holds, and a caller that stops reading.

The mock engine is a small HTTP server in a process of its own. Like llama.cpp's server it
serves one completion at a time, so a request it still serves blocks the next one. What a
request gets depends on its body's ``mock`` field: ``flood`` streams 16 KiB events as fast as
the reader takes them (up to ``FLOOD_LIMIT_BYTES``), ``hold`` sends nothing until the caller
goes, anything else is a short answer. ``GET /stats`` says how many bytes it wrote, how many
completions are open and how many callers went away before the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import socket
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
from tests.support.federation import wait_for

MOCK_MODEL = "mock-engine"
EVENT_CONTENT_BYTES = 16 * 1024
FLOOD_LIMIT_BYTES = 192 * 1024 * 1024
"""A flood ends by itself here, below the largest ``response_bytes`` a grant may allow."""
STALL_SECONDS = 0.5
"""A byte count that does not move for this long is a stall."""


# --- the engine (runs in its own process: python -m tests.support.revocation PORT) ----------


class _Engine:
    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.stats = {"bytes": 0, "open": 0, "served": 0, "gone": 0}

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            request_line, *header_lines = head.decode("latin-1").split("\r\n")
            method, path, _ = request_line.split(" ", 2)
            headers = {
                name.strip().lower(): value.strip()
                for name, _, value in (line.partition(":") for line in header_lines if line)
            }
            length = int(headers.get("content-length", "0"))
            body = json.loads(await reader.readexactly(length)) if length else {}
            if method == "GET" and path == "/v1/models":
                await _respond(writer, {"object": "list", "data": [{"id": MOCK_MODEL}]})
            elif method == "GET" and path == "/stats":
                await _respond(writer, self.stats)
            elif method == "POST" and path == "/v1/chat/completions":
                async with self.lock:
                    await self._complete(reader, writer, body)
            else:
                writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _complete(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, body: dict[str, Any]
    ) -> None:
        self.stats["open"] += 1
        try:
            mode = body.get("mock")
            if mode == "hold":
                await reader.read()  # nothing is sent until the caller closes
                self.stats["gone"] += 1
                return
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
            )
            if mode == "flood":
                event = _event("x" * EVENT_CONTENT_BYTES, None)
                while self.stats["bytes"] < FLOOD_LIMIT_BYTES:
                    writer.write(event)
                    self.stats["bytes"] += len(event)
                    await writer.drain()
            writer.write(_event("ok", "stop") + b"data: [DONE]\n\n")
            await writer.drain()
            self.stats["served"] += 1
        except ConnectionError:
            self.stats["gone"] += 1
        finally:
            self.stats["open"] -= 1


def _event(content: str, finish_reason: str | None) -> bytes:
    chunk = {
        "id": "mock",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": MOCK_MODEL,
        "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": finish_reason}],
    }
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


async def _respond(writer: asyncio.StreamWriter, value: Any) -> None:
    payload = json.dumps(value).encode()
    writer.write(
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n"
        + f"content-length: {len(payload)}\r\n\r\n".encode()
        + payload
    )
    await writer.drain()


async def _serve(port: int) -> None:
    engine = _Engine()
    server = await asyncio.start_server(engine.handle, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


# --- the test side --------------------------------------------------------------------------


@dataclass
class MockEngine:
    url: str
    process: subprocess.Popen[bytes]

    def stats(self) -> dict[str, int]:
        answer = httpx.get(f"{self.url}/stats", timeout=5)
        answer.raise_for_status()
        stats: dict[str, int] = answer.json()
        return stats

    def wait_stalled(self) -> int:
        """Until the open completion's bytes stop growing (the whole chain is blocked)."""
        last = {"bytes": -1, "since": time.monotonic()}

        def stalled() -> int | None:
            now = self.stats()
            assert now["open"] == 1, now
            if now["bytes"] != last["bytes"]:
                last.update(bytes=now["bytes"], since=time.monotonic())
                return None
            return now["bytes"] if time.monotonic() - last["since"] >= STALL_SECONDS else None

        return wait_for(stalled, seconds=60, what="the mock engine's writes stall")


@contextlib.contextmanager
def mock_engine(log: Path) -> Iterator[MockEngine]:
    """The mock engine on a free loopback port, stopped when the block ends."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with log.open("wb") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.revocation", str(port)],
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    engine = MockEngine(f"http://127.0.0.1:{port}", process)
    try:

        def answers() -> bool:
            try:
                return httpx.get(f"{engine.url}/v1/models", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(answers, seconds=30, what="the mock engine answers")
        yield engine
    finally:
        process.kill()
        process.wait()


class StalledCaller:
    """A POST whose caller reads the response's first bytes, then reads nothing more.

    Its receive buffer is small, so the server behind it is blocked soon after.
    """

    def __init__(self, base_url: str, path: str, token: str, body: dict[str, Any]) -> None:
        parts = urlsplit(base_url)
        payload = json.dumps(body).encode()
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.sock.connect((parts.hostname or "127.0.0.1", parts.port or 80))
        self.sock.sendall(
            f"POST {path} HTTP/1.1\r\nhost: {parts.netloc}\r\n"
            f"authorization: Bearer {token}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(payload)}\r\n\r\n".encode()
            + payload
        )

    def status(self) -> int:
        """The response's status, from its first line (the rest is left unread)."""
        first = self.sock.recv(12)
        return int(first.split()[1])

    def unread_bytes(self) -> int:
        buffer = bytearray(4)
        fcntl.ioctl(self.sock.fileno(), termios.FIONREAD, buffer)
        return int.from_bytes(buffer, sys.byteorder)

    def wait_stalled(self) -> int:
        """Until the bytes waiting unread stop growing: the server behind has stopped."""
        last = {"bytes": -1, "since": time.monotonic()}

        def stalled() -> int | None:
            now = self.unread_bytes()
            if now != last["bytes"]:
                last.update(bytes=now, since=time.monotonic())
                return None
            return now if time.monotonic() - last["since"] >= STALL_SECONDS * 2 else None

        return wait_for(stalled, seconds=60, what="the caller's unread bytes stop growing")

    def close(self) -> None:
        self.sock.close()


if __name__ == "__main__":
    asyncio.run(_serve(int(sys.argv[1])))
