"""The HTTP connections to one engine, on aiohttp: timeouts, kept connections, bounded reads.

aiohttp costs about a fifth of httpx's CPU per streamed request and under half per streamed
chunk (``docs/benchmarks.md``). A connection goes back to the pool only when its answer was
read to its end and the caller judged it clean; any other answer closes its connection, so a
caller that goes away mid-stream closes the engine's socket (the engine stops generating), and
a connection an engine may have left dead after a failed answer carries no later request.
Two of aiohttp's private hooks are overridden for that (``_HeldResponse``, ``_KeptConnector``);
the pin holds them, and ``tests/integration/inference/test_engine_connections.py`` fails if
either stops working.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

import aiohttp
from aiohttp.abc import AbstractStreamWriter
from aiohttp.client_proto import ResponseHandler
from aiohttp.client_reqrep import ConnectionKey
from aiohttp.http_writer import StreamWriter
from yarl import URL

from ficc.adapters.engines.errors import transport_error

KEEPALIVE_CONNECTIONS: Final = 16
"""Idle connections kept per engine client for the next requests; one released beyond these is
closed."""
KEEPALIVE_SECONDS: Final = 2.0
"""An idle connection is closed after this: under the 5 s after which uvicorn and llama.cpp's
server close one, so a kept connection is never one the engine is closing."""
MAX_ERROR_BODY_BYTES: Final = 16 * 1024
OK: Final = 200


@dataclass(frozen=True)
class EngineTimeout:
    """How long each step of an exchange with an engine may take, in seconds.

    ``read`` bounds the silence between two reads (the answer's head included): a long prompt
    on a CPU takes minutes. ``write`` bounds each write of the request's body; ``pool`` the wait
    for a free connection on top of ``connect``.
    """

    connect: float = 5.0
    read: float = 300.0
    write: float = 30.0
    pool: float = 5.0

    @classmethod
    def each(cls, seconds: float) -> EngineTimeout:
        """The same bound for every step (a health check's)."""
        return cls(connect=seconds, read=seconds, write=seconds, pool=seconds)

    def for_aiohttp(self) -> aiohttp.ClientTimeout:
        # aiohttp arms sock_read once the body is written and again at each read.
        return aiohttp.ClientTimeout(
            total=None,
            connect=self.connect + self.pool,
            sock_connect=self.connect,
            sock_read=self.read,
        )


DEFAULT_TIMEOUT: Final = EngineTimeout()


class _KeptConnector(aiohttp.TCPConnector):
    """aiohttp's connector, keeping at most :data:`KEEPALIVE_CONNECTIONS` idle per engine
    (aiohttp itself keeps every released connection until its keep-alive runs out)."""

    def _release(
        self, key: ConnectionKey, protocol: ResponseHandler, *, should_close: bool = False
    ) -> None:
        idle = self._conns.get(key)
        if idle is not None and len(idle) >= KEEPALIVE_CONNECTIONS:
            should_close = True
        super()._release(key, protocol, should_close=should_close)


class _HeldResponse(aiohttp.ClientResponse):
    """aiohttp's response, holding its connection past the body's end until FICC releases or
    closes it: aiohttp would hand it back to the pool at once, before FICC has judged the
    answer clean (an engine's failed stream can leave its connection dead)."""

    def _response_eof(self) -> None:
        return


class _JsonBody(aiohttp.payload.Payload):
    """A request's JSON, each write of it bounded by the ``write`` timeout (aiohttp has none:
    an engine that never reads its request would hold the exchange forever)."""

    _value: bytes

    def __init__(self, value: bytes, write_seconds: float) -> None:
        super().__init__(value, content_type="application/json")
        self._size = len(value)
        self._write_seconds = write_seconds

    def decode(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        return self._value.decode(encoding, errors)

    async def write(self, writer: AbstractStreamWriter) -> None:
        try:
            async with asyncio.timeout(self._write_seconds):
                await writer.write(self._value)
        except TimeoutError:
            # A closed socket with unsent bytes stays open until they go: drop them instead.
            if isinstance(writer, StreamWriter) and writer.transport is not None:
                writer.transport.abort()
            raise

    async def write_with_length(
        self, writer: AbstractStreamWriter, content_length: int | None
    ) -> None:
        await self.write(writer)


def encode_json(body: Mapping[str, Any]) -> bytes:
    """A request body as the engine receives it: compact UTF-8, no NaN."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


class EngineBody:
    """An engine's answer as :class:`~ficc.adapters.engines.sse.EngineStream` reads it."""

    __slots__ = ("_response",)

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response

    def aiter_raw(self) -> AsyncIterator[bytes]:
        """Whatever has arrived at each read, raw (nothing decompressed)."""
        return self._response.content.iter_any()

    async def aclose(self) -> None:
        """Back to the pool if it was read to its end, else its connection closed."""
        self._response.release()

    def discard(self) -> None:
        """Close the connection whatever was read: the answer failed."""
        self._response.close()


class EngineConnections:
    """The aiohttp session of one engine client, made at its first request (inside the loop).

    Never a proxy from the environment, no cookies, no redirects followed (an upstream's
    redirect is its answer, refused), bodies read raw (``identity``): they are counted as they
    arrive, so none may be compressed.
    """

    def __init__(self, base_url: str, headers: Mapping[str, str], timeout: EngineTimeout) -> None:
        self._base_url = base_url
        self._headers = {"Accept-Encoding": "identity", **headers}
        self._timeout = timeout
        self._urls: dict[str, URL] = {}
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = _KeptConnector(limit=0, keepalive_timeout=KEEPALIVE_SECONDS)
            self._session = aiohttp.ClientSession(
                connector=connector,
                headers=self._headers,
                timeout=self._timeout.for_aiohttp(),
                auto_decompress=False,
                trust_env=False,
                cookie_jar=aiohttp.DummyCookieJar(),
                response_class=_HeldResponse,
            )
        return self._session

    def _url(self, path: str) -> URL:
        url = self._urls.get(path)
        if url is None:
            url = self._urls[path] = URL(self._base_url + path)
        return url

    async def send(
        self, method: str, path: str, body: Mapping[str, Any] | None = None
    ) -> aiohttp.ClientResponse:
        """The engine's answer to one request, its head read and its body unread; the caller
        releases or closes it. Transport failures arrive as FICC errors."""
        data = None if body is None else _JsonBody(encode_json(body), self._timeout.write)
        try:
            return await self._open().request(
                method, self._url(path), data=data, allow_redirects=False
            )
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise transport_error(exc) from exc

    @contextlib.asynccontextmanager
    async def exchange(
        self, method: str, path: str, body: Mapping[str, Any] | None = None
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """One request whose answer is read within the block; its connection is kept only if
        the answer was a 200 read to its end (failed exchanges are rare)."""
        response = await self.send(method, path, body)
        kept = False
        try:
            yield response
            kept = response.status == OK and response.content.is_eof()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise transport_error(exc) from exc
        finally:
            if kept:
                response.release()
            else:
                response.close()

    async def aclose(self) -> None:
        """Close every connection to the engine."""
        session, self._session = self._session, None
        if session is not None:
            await session.close()


async def read_bounded(
    response: aiohttp.ClientResponse, limit: int = MAX_ERROR_BODY_BYTES
) -> bytes:
    """At most ``limit`` bytes of a body, read raw; the rest is never received."""
    return b"".join(await read_pieces(response, limit))


async def read_pieces(response: aiohttp.ClientResponse, limit: int) -> list[bytes]:
    """At most ``limit`` bytes of a body as the pieces that arrived, not yet joined: joining
    (and copying) tens of MiB is left to whoever decodes them, in a worker thread."""
    pieces: list[bytes] = []
    size = 0
    async for piece in response.content.iter_any():
        pieces.append(piece[: limit - size])
        size += len(pieces[-1])
        if size >= limit:
            break
    return pieces
