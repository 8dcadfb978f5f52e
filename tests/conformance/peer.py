"""The kit's HyperNet side: an iroh endpoint on loopback, framed streams, the initiator's
handshake, heartbeats, signed requests, and the requests the server opens toward us."""

from __future__ import annotations

import asyncio
import contextlib
import re
import secrets
import struct
from collections.abc import Awaitable, Callable
from typing import Any

import iroh
from iroh import iroh_ffi
from tests.conformance import fedwire as w

Served = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]


class Stream:
    """One bi-stream read and written in whole frames."""

    def __init__(self, bi: iroh.BiStream) -> None:
        self.send_half, self.recv_half = bi.send(), bi.recv()

    async def send(self, payload: bytes) -> None:
        await self.send_half.write_all(w.frame(payload))

    async def send_raw(self, data: bytes) -> None:
        await self.send_half.write_all(data)

    async def receive(self) -> w.Decoded:
        (size,) = struct.unpack(">I", bytes(await self.recv_half.read_exact(4)))
        assert size <= w.MAX_FRAME, f"the server announced {size} bytes"
        return w.decode(bytes(await self.recv_half.read_exact(size)))


async def endpoint() -> iroh.Endpoint:
    """A fresh loopback endpoint: a fresh HyperNet ID."""
    iroh_ffi.uniffi_set_event_loop(asyncio.get_running_loop())  # type: ignore[arg-type]
    options = iroh.EndpointOptions(
        preset=iroh.preset_minimal(),
        bind_addr="127.0.0.1:0",
        alpns=[w.ALPN],
        relay_mode=iroh.RelayMode.disabled(),
    )
    return await iroh.Endpoint.bind(options)


class Session:
    """An established session as the initiator, driven by the document's rules."""

    def __init__(self, connection: iroh.Connection, key: w.Key, session_id: bytes) -> None:
        self.connection, self.key, self.session_id = connection, key, session_id
        self.seq = 0
        self.served: list[tuple[str, dict[str, Any]]] = []
        self.serve: Served | None = None
        self.control: Stream | None = None  # held: a dropped control stream ends the session
        self._tasks: list[asyncio.Task[None]] = []

    def start(self, control: Stream, server_key: bytes) -> None:
        self._tasks.append(asyncio.ensure_future(self._beat(control)))
        self._tasks.append(asyncio.ensure_future(self._accept(server_key)))

    async def _beat(self, control: Stream) -> None:
        with contextlib.suppress(iroh.IrohError):
            for counter in range(1, 1 << 30):
                await control.send(w.heartbeat(counter))
                await asyncio.sleep(1)

    async def _accept(self, server_key: bytes) -> None:
        """Requests the server opens on our connection (receipts, notices): checked (role R,
        its own sequence) and answered with what ``serve`` returns."""
        last = 0
        with contextlib.suppress(iroh.IrohError):
            while True:
                stream = Stream(await self.connection.accept_bi())
                asked = await stream.receive()
                fields = asked.fields
                message = w.request_message(self.session_id, b"R", fields["seq"], fields["content"])
                assert asked.tag == w.REQUEST
                assert fields["seq"] > last
                assert w.verifies(server_key, message, fields["sig"])
                last = fields["seq"]
                self.served.append((fields["operation"], fields["body"]))
                answer = {} if self.serve is None else await self.serve(*self.served[-1])
                await stream.send(bytes([w.RESPONSE]) + w.jcs(answer))
                await stream.send_half.finish()

    def signed(self, operation: str, body: dict[str, Any]) -> bytes:
        self.seq += 1
        content = w.request_content(operation, body)
        message = w.request_message(self.session_id, b"I", self.seq, content)
        return w.request(self.seq, self.key.sign(message), content)

    async def ask(self, operation: str, body: dict[str, Any]) -> w.Decoded:
        """One signed request on a new stream, and its answer; then the stream is ended on
        this side (§1: a stream not reused keeps its place until both sides ended it)."""
        stream = Stream(await self.connection.open_bi())
        await stream.send(self.signed(operation, body))
        answer = await stream.receive()
        await stream.send_half.finish()
        return answer

    def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        self.connection.close(0, b"done")


async def handshake(
    local: iroh.Endpoint,
    address: iroh.EndpointAddr,
    key: w.Key,
    *,
    generation: int = 0,
    nonce: bytes | None = None,
    heartbeats: bool = True,
) -> Session:
    """Connect and prove ``key`` at ``generation`` (document §4); without ``heartbeats`` the
    session stays silent on its control stream (a lost peer, §6)."""
    connection = await local.connect(address, w.ALPN)
    control = Stream(await connection.open_bi())
    me, them = bytes(local.id().to_bytes()), bytes(connection.remote_id().to_bytes())
    n_i = nonce or secrets.token_bytes(32)
    await control.send(w.hello(me, [1]))
    await control.send(w.challenge(n_i))
    hello = await control.receive()
    assert hello.tag == w.HELLO, hello
    assert hello.fields == {"hypernet_id": them.hex(), "versions": [1]}
    n_r = (await control.receive()).fields["nonce"]
    message = w.proof_message(b"I", me, them, n_i, n_r, generation, key.public)
    await control.send(w.proof(generation, key.public, key.sign(message)))
    proof = await control.receive()
    if proof.tag == w.ERROR:
        raise ConnectionRefusedError(proof.fields["message"])
    k_r = proof.fields["key"]
    theirs = w.proof_message(b"R", me, them, n_i, n_r, generation, k_r)
    assert proof.fields["generation"] == generation
    assert w.verifies(k_r, theirs, proof.fields["sig"])
    session = Session(
        connection, key, w.session_id(1, me, them, n_i, n_r, generation, key.public, k_r)
    )
    session.control = control
    if heartbeats:
        session.start(control, k_r)
    return session


def close_code(reason: str) -> int:
    """The application close code in iroh's close reason ("closed by peer: WHY (code N)")."""
    found = re.search(r"\(code (\d+)\)$|error (\d+)$", reason)
    assert found is not None, reason
    return int(found.group(1) or found.group(2))
