"""What the requester reads when the serving side's handler fails: an ``ERROR`` frame naming
the error (a bug as ``internal``, without its text), never a reset; only the stream's own
writes failing raise (docs/protocol.md, "A handler's own failure")."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import pytest
from tests.unit.protocol.test_protocol_connection import START, connected, feed, one_request

from ficc.adapters.hypernet import serving
from ficc.base.errors import EngineUnavailable, PeerUnreachable
from ficc.base.json_types import JSONObject
from ficc.protocol.events import DataReceived, ErrorReceived, Event, RequestReceived
from ficc.protocol.messages import Error
from ficc.services.ports.peers import PeerIdentity, RequestHandler, RequestResult

PEER = PeerIdentity("a" * 64, b"k" * 32, 1)


class _Stream:
    """The serving side's stream: keeps what is written, or fails every write."""

    def __init__(self, *, fails: bool = False) -> None:
        self.writes: list[bytes] = []
        self.fails = fails
        self.torn = False

    async def write(self, frames: bytes) -> None:
        if self.fails:
            raise PeerUnreachable("the stream was lost")
        self.writes.append(frames)

    async def reset_sending(self, code: int) -> None:
        raise AssertionError(f"the stream was reset with {code}")


async def _answered(handler: RequestHandler, stream: _Stream | None = None) -> list[Event]:
    """What the requester reads of the serving side's answer by ``handler``."""
    requester, server = connected()
    asked, served, request = one_request(requester, server, {}, streaming=True)
    stream = stream or _Stream()
    received = RequestReceived(served, request)
    await serving.answer(server, stream, received, handler, PEER)  # type: ignore[arg-type]
    return feed(requester, asked, b"".join(stream.writes), [], START)


def _failing(error: Exception) -> RequestHandler:
    async def handler(peer: PeerIdentity, operation: str, body: JSONObject, _: int) -> JSONObject:
        raise error

    return handler


def _answering(result: RequestResult) -> RequestHandler:
    async def handler(
        peer: PeerIdentity, operation: str, body: JSONObject, _: int
    ) -> RequestResult:
        return result

    return handler


def _only_error(events: list[Event]) -> Error:
    """The error of the one event read, an ``ERROR`` frame."""
    (event,) = events
    assert isinstance(event, ErrorReceived)
    return event.error


async def test_a_handlers_refusal_reaches_the_requester_as_its_error_frame() -> None:
    error = _only_error(await _answered(_failing(EngineUnavailable("the engine is down"))))
    assert (error.code, error.message) == ("engine_unavailable", "the engine is down")


async def test_a_handlers_bug_is_told_as_internal_and_its_text_stays_in_the_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.ERROR, logger=serving.__name__):
        error = _only_error(await _answered(_failing(RuntimeError("secret path /srv/x"))))
    assert error.code == "internal"
    assert "secret" not in error.message
    logged = [r.exc_info[1] for r in caplog.records if r.exc_info is not None]
    assert [str(exc) for exc in logged] == ["secret path /srv/x"]


async def test_a_handler_failing_whose_error_has_no_readable_text_is_still_answered() -> None:
    class Unprintable(Exception):
        def __str__(self) -> str:
            raise ValueError("no text")

    assert _only_error(await _answered(_failing(Unprintable()))).code == "internal"


async def test_a_stream_failing_after_its_first_chunk_ends_with_the_error_frame() -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b"data: a\n\n"
        raise EngineUnavailable("the engine stopped mid-answer")

    chunk, failed = await _answered(_answering(chunks()))
    assert isinstance(chunk, DataReceived)
    assert _only_error([failed]).code == "engine_unavailable"


async def test_a_write_that_fails_raises_and_is_not_told_as_the_handlers_refusal() -> None:
    with pytest.raises(PeerUnreachable):
        await _answered(_answering({"ok": True}), _Stream(fails=True))
