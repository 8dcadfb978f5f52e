"""The HyperNet adapter over real iroh on loopback (run inside scripts/in-loopback-netns)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import iroh
import pytest
from tests.support.hostile_peer import raw_handshake

from ficc.adapters.hypernet import HyperNetEndpoint
from ficc.adapters.hypernet.streams import FrameStream
from ficc.adapters.keys import ClusterKey
from ficc.base.errors import (
    EngineUnavailable,
    NotFound,
    OutcomeUnknown,
    PeerUnreachable,
    PermissionDenied,
    ProtocolError,
)
from ficc.protocol import ALPN
from ficc.protocol.frames import MAX_FRAME_BYTES
from ficc.protocol.handshake import KnownPeer, Session
from ficc.protocol.limits import MAX_PEER_STREAMS
from ficc.protocol.messages import Error, Request, Response
from ficc.protocol.requests import RequestSigner
from ficc.protocol.stream_states import CANCELLED_CODE
from ficc.services.ports.peers import PeerIdentity, RequestResult

LOOPBACK = "127.0.0.1:0"
DEADLINE_SECONDS = 20
KEEP_ALIVE: list[FrameStream] = []


class Cluster:
    """One endpoint with its own cluster key, recorded peers and handler behaviour."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.key = ClusterKey.generate()
        self.known: dict[str, KnownPeer] = {}
        self.more_known: dict[str, list[KnownPeer]] = {}
        """Further pairings with a HyperNet ID (another project paired with the same cluster)."""
        self.seen: list[PeerIdentity] = []
        self.started = asyncio.Event()
        self.cancelled = asyncio.Event()
        self.lost: list[tuple[str, float]] = []
        self.endpoint = self.make_endpoint()

    def make_endpoint(self) -> HyperNetEndpoint:
        loop = asyncio.get_running_loop()
        return HyperNetEndpoint(
            agent_directory=self.directory,
            cluster_key=self.key,
            lookup=self.lookup,
            handler=self.handle,
            bind_address=LOOPBACK,
            connect_timeout_seconds=2.0,
            on_peer_lost=lambda peer, _: self.lost.append((peer.hypernet_id, loop.time())),
        )

    async def lookup(self, hypernet_id: str) -> tuple[KnownPeer, ...]:
        known = self.known.get(hypernet_id)
        return (*(() if known is None else (known,)), *self.more_known.get(hypernet_id, []))

    async def handle(
        self, peer: PeerIdentity, operation: str, body: dict[str, Any], body_bytes: int
    ) -> RequestResult:
        self.seen.append(peer)
        if operation == "echo":
            return {"echo": body}
        if operation == "missing":
            raise NotFound("no such thing", details={"id": body.get("id")})
        if operation == "bytes":
            return self.chunks(body["count"], body["size"])
        if operation == "large":
            return {"text": "x" * body["size"]}
        if operation == "measure":
            return {
                "chars": len(body["text"]),
                "sha256": hashlib.sha256(body["text"].encode()).hexdigest(),
            }
        if operation == "engine_down":
            raise EngineUnavailable("the engine cannot be reached", details={"engine": "down"})
        if operation == "engine_dies":
            return self.dying_engine()
        if operation == "hang":
            self.started.set()
            try:
                await asyncio.Event().wait()
            finally:
                self.cancelled.set()
        raise AssertionError(operation)

    async def dying_engine(self) -> AsyncIterator[bytes]:
        """An engine that answers one event, then cannot be reached."""
        yield b"data: {}\n\n"
        raise EngineUnavailable("the engine stopped answering", details={"engine": "gone"})

    async def chunks(self, count: int, size: int) -> AsyncIterator[bytes]:
        for index in range(count):
            yield hashlib.sha256(index.to_bytes(4, "big")).digest() * (size // 32)


@pytest.fixture
async def make_cluster(tmp_path: Path) -> AsyncIterator[Callable[[], Awaitable[Cluster]]]:
    clusters: list[Cluster] = []

    async def make() -> Cluster:
        cluster = Cluster(tmp_path / f"agent{len(clusters)}")
        await cluster.endpoint.start()
        clusters.append(cluster)
        return cluster

    yield make
    for cluster in clusters:
        await cluster.endpoint.stop()


@pytest.fixture
async def raw_endpoint() -> AsyncIterator[Callable[[bytes], Awaitable[iroh.Endpoint]]]:
    """Bare iroh endpoints, for clients that misbehave on purpose."""
    endpoints: list[iroh.Endpoint] = []

    async def make(alpn: bytes = ALPN) -> iroh.Endpoint:
        options = iroh.EndpointOptions(
            preset=iroh.preset_minimal(),
            bind_addr=LOOPBACK,
            alpns=[alpn],
            relay_mode=iroh.RelayMode.disabled(),
        )
        endpoint = await iroh.Endpoint.bind(options)
        endpoints.append(endpoint)
        return endpoint

    yield make
    KEEP_ALIVE.clear()
    for endpoint in endpoints:
        await endpoint.close()


def address_of(cluster: Cluster) -> iroh.EndpointAddr:
    return iroh.EndpointTicket.from_string(cluster.endpoint.ticket).endpoint_addr()


async def still_serves(server: Cluster, client: Cluster, generation: int = 0) -> None:
    result = await client.endpoint.request(
        server.endpoint.hypernet_id,
        "echo",
        {"n": 1},
        generation=generation,
        ticket=server.endpoint.ticket,
    )
    assert result.body == {"echo": {"n": 1}}
    assert result.identity.cluster_key == server.key.public_key


async def raw_session(
    raw: iroh.Endpoint, server: Cluster, nonce: bytes | None = None, key: ClusterKey | None = None
) -> tuple[iroh.Connection, Session, ClusterKey]:
    """A hand-driven client connection that completes a real handshake."""
    key = key or ClusterKey.generate()
    connection, session, control = await raw_handshake(raw, address_of(server), key, nonce)
    KEEP_ALIVE.append(control)  # a dropped control stream would end the session
    return connection, session, key


async def closed_within(connection: iroh.Connection, seconds: float) -> str:
    async with asyncio.timeout(seconds):
        return await connection.closed()


async def test_two_clusters_complete_the_handshake_and_answer_requests_both_ways(
    make_cluster: Callable[[], Awaitable[Cluster]],
) -> None:
    server, client = await make_cluster(), await make_cluster()
    async with asyncio.timeout(DEADLINE_SECONDS):
        await still_serves(server, client)
        back = await server.endpoint.request(client.endpoint.hypernet_id, "echo", {"back": True})
    assert back.body == {"echo": {"back": True}}
    assert back.identity == PeerIdentity(client.endpoint.hypernet_id, client.key.public_key, 0)
    assert server.seen[0] == PeerIdentity(client.endpoint.hypernet_id, client.key.public_key, 0)
    assert client.seen[0].cluster_key == server.key.public_key
    assert len(server.endpoint.hypernet_id) == 64
    assert server.endpoint.addresses


async def test_a_known_peer_is_bound_to_its_recorded_generation(
    make_cluster: Callable[[], Awaitable[Cluster]],
) -> None:
    server, client = await make_cluster(), await make_cluster()
    server.known[client.endpoint.hypernet_id] = KnownPeer(client.key.public_key, 4)
    client.known[server.endpoint.hypernet_id] = KnownPeer(server.key.public_key, 4)
    async with asyncio.timeout(DEADLINE_SECONDS):
        await still_serves(server, client, generation=4)
    assert server.seen[0].generation == 4


async def test_two_pairings_with_one_cluster_hold_a_session_each_and_end_separately(
    make_cluster: Callable[[], Awaitable[Cluster]],
) -> None:
    """Two projects paired with the same cluster: a request goes on the session of its own
    pairing's generation, the two sessions live side by side, and ending one pairing closes
    only its own session."""
    server, client = await make_cluster(), await make_cluster()
    for generation in (4, 6):
        server.more_known.setdefault(client.endpoint.hypernet_id, []).append(
            KnownPeer(client.key.public_key, generation)
        )
        client.more_known.setdefault(server.endpoint.hypernet_id, []).append(
            KnownPeer(server.key.public_key, generation)
        )
    peer = server.endpoint.hypernet_id
    async with asyncio.timeout(DEADLINE_SECONDS):
        for generation in (4, 6, 4, 0):
            await still_serves(server, client, generation=generation)
        assert [seen.generation for seen in server.seen] == [4, 6, 4, 0]
        sessions = {g: client.endpoint.session(peer, g) for g in (0, 4, 6)}
        assert all(session is not None for session in sessions.values())
        assert len({id(session) for session in sessions.values()}) == 3
        client.more_known[peer] = [KnownPeer(server.key.public_key, 6)]
        client.endpoint.disconnect(peer, 4, PeerUnreachable("the pairing was removed"))
        assert client.endpoint.session(peer, 4) is None
        assert client.endpoint.session(peer, 6) is sessions[6]
        await still_serves(server, client, generation=6)
        assert server.seen[-1].generation == 6
        with pytest.raises(PermissionDenied, match="no pairing"):
            await still_serves(server, client, generation=4)


async def test_a_connection_with_another_alpn_is_refused_and_others_are_still_served(
    make_cluster: Callable[[], Awaitable[Cluster]],
    raw_endpoint: Callable[[bytes], Awaitable[iroh.Endpoint]],
) -> None:
    server, client = await make_cluster(), await make_cluster()
    stranger = await raw_endpoint(b"something.else/1")
    async with asyncio.timeout(DEADLINE_SECONDS):
        with pytest.raises(iroh.IrohError):
            await stranger.connect(address_of(server), b"something.else/1")
        await still_serves(server, client)


async def test_a_wrong_cluster_key_for_a_known_hypernet_id_is_refused(
    make_cluster: Callable[[], Awaitable[Cluster]],
) -> None:
    server, impostor, client = await make_cluster(), await make_cluster(), await make_cluster()
    server.known[impostor.endpoint.hypernet_id] = KnownPeer(ClusterKey.generate().public_key, 0)
    async with asyncio.timeout(DEADLINE_SECONDS):
        with pytest.raises(ProtocolError, match="another cluster key"):
            await still_serves(server, impostor)
        await still_serves(server, client)
    assert server.endpoint.session(impostor.endpoint.hypernet_id) is None


async def test_a_replayed_challenge_is_refused(
    make_cluster: Callable[[], Awaitable[Cluster]],
    raw_endpoint: Callable[[bytes], Awaitable[iroh.Endpoint]],
) -> None:
    server, client = await make_cluster(), await make_cluster()
    raw = await raw_endpoint(ALPN)
    nonce = bytes(range(32))
    async with asyncio.timeout(DEADLINE_SECONDS):
        await raw_session(raw, server, nonce)
        with pytest.raises(ProtocolError, match="seen before"):
            await raw_session(raw, server, nonce)
        await still_serves(server, client)


async def request_on(connection: iroh.Connection, *requests: Request) -> list[Any]:
    """Send requests one after another on one stream; collect what comes back."""
    stream = FrameStream(await connection.open_bi())
    answers: list[Any] = []
    for request in requests:
        await stream.send(request)
        try:
            answers.append(await stream.receive())
        except PeerUnreachable as exc:
            answers.append(exc)
            break
    return answers


async def test_a_request_signed_for_another_session_is_refused(
    make_cluster: Callable[[], Awaitable[Cluster]],
    raw_endpoint: Callable[[bytes], Awaitable[iroh.Endpoint]],
) -> None:
    server, client = await make_cluster(), await make_cluster()
    raw = await raw_endpoint(ALPN)
    async with asyncio.timeout(DEADLINE_SECONDS):
        _, first, key = await raw_session(raw, server)
        second_connection, _, _ = await raw_session(raw, server, key=key)
        foreign = RequestSigner(first, key).sign("echo", {})
        answers = await request_on(second_connection, foreign)
        assert isinstance(answers[0], Error)
        assert answers[0].code == "protocol_error"
        assert "does not verify" in answers[0].message
        await closed_within(second_connection, 5)
        await still_serves(server, client)


async def test_an_out_of_order_sequence_number_is_refused(
    make_cluster: Callable[[], Awaitable[Cluster]],
    raw_endpoint: Callable[[bytes], Awaitable[iroh.Endpoint]],
) -> None:
    server, client = await make_cluster(), await make_cluster()
    raw = await raw_endpoint(ALPN)
    async with asyncio.timeout(DEADLINE_SECONDS):
        connection, session, key = await raw_session(raw, server)
        signer = RequestSigner(session, key)
        first, second = signer.sign("echo", {"n": 1}), signer.sign("echo", {"n": 2})
        answers = await request_on(connection, second, first)
        assert answers[0] == Response({"echo": {"n": 2}})
        assert isinstance(answers[1], Error)
        assert "out of order" in answers[1].message
        await closed_within(connection, 5)
        await still_serves(server, client)


async def test_a_replayed_request_is_refused(
    make_cluster: Callable[[], Awaitable[Cluster]],
    raw_endpoint: Callable[[bytes], Awaitable[iroh.Endpoint]],
) -> None:
    server = await make_cluster()
    raw = await raw_endpoint(ALPN)
    async with asyncio.timeout(DEADLINE_SECONDS):
        connection, session, key = await raw_session(raw, server)
        request = RequestSigner(session, key).sign("echo", {})
        await request_on(connection, request)
        answers = await request_on(connection, request)
        assert isinstance(answers[0], Error)
        assert "replay" in answers[0].message


@pytest.mark.parametrize(
    "garbage",
    [
        pytest.param((MAX_FRAME_BYTES + 1).to_bytes(4, "big"), id="a frame over 1 MiB"),
        pytest.param(
            b"".join(hashlib.sha256(bytes([i])).digest() for i in range(128)),
            id="4 KiB of garbage",
        ),
    ],
)
async def test_malformed_bytes_close_the_connection_and_others_are_still_served(
    make_cluster: Callable[[], Awaitable[Cluster]],
    raw_endpoint: Callable[[bytes], Awaitable[iroh.Endpoint]],
    garbage: bytes,
) -> None:
    server, client = await make_cluster(), await make_cluster()
    raw = await raw_endpoint(ALPN)
    async with asyncio.timeout(DEADLINE_SECONDS):
        connection = await raw.connect(address_of(server), ALPN)
        stream = await connection.open_bi()
        await stream.send().write_all(garbage)
        reason = await closed_within(connection, 5)
        assert "exceeds" in reason or "JSON" in reason or "tag" in reason
        await still_serves(server, client)


async def test_a_streamed_result_arrives_intact(
    make_cluster: Callable[[], Awaitable[Cluster]],
) -> None:
    server, client = await make_cluster(), await make_cluster()
    expected = hashlib.sha256()
    async for chunk in server.chunks(9, 1 << 20):
        expected.update(chunk)
    received = hashlib.sha256()
    async with asyncio.timeout(DEADLINE_SECONDS):
        async with client.endpoint.stream(
            server.endpoint.hypernet_id,
            "bytes",
            {"count": 9, "size": 1 << 20},
            ticket=server.endpoint.ticket,
        ) as chunks:
            async for chunk in chunks:
                received.update(chunk)
    assert received.digest() == expected.digest()


async def test_a_handlers_refusal_reaches_the_requester_with_its_code(
    make_cluster: Callable[[], Awaitable[Cluster]],
) -> None:
    server, client = await make_cluster(), await make_cluster()
    async with asyncio.timeout(DEADLINE_SECONDS):
        with pytest.raises(NotFound) as caught:
            await client.endpoint.request(
                server.endpoint.hypernet_id, "missing", {"id": "x"}, ticket=server.endpoint.ticket
            )
        await still_serves(server, client)
    assert caught.value.details == {"id": "x"}


async def test_a_plain_answer_larger_than_a_frame_arrives_whole(
    make_cluster: Callable[[], Awaitable[Cluster]],
) -> None:
    """A JSON answer over the 1 MiB frame goes as chunks and arrives as one object (a grant's
    response_bytes may be up to 256 MiB) on a paired session; a small one is still one
    RESPONSE. One over OFF_LOOP_JSON_BYTES is decoded in a worker thread."""
    server, client = await make_cluster(), await make_cluster()
    server.known[client.endpoint.hypernet_id] = KnownPeer(client.key.public_key, 4)
    client.known[server.endpoint.hypernet_id] = KnownPeer(server.key.public_key, 4)
    async with asyncio.timeout(DEADLINE_SECONDS):
        for size in (10, (1 << 20) - 100, 3 << 20, 5 << 20):
            answer = await client.endpoint.request(
                server.endpoint.hypernet_id,
                "large",
                {"size": size},
                generation=4,
                ticket=server.endpoint.ticket,
            )
            assert answer.body == {"text": "x" * size}
        await still_serves(server, client, generation=4)


async def test_before_a_pairing_an_answer_over_64_kib_is_refused_and_the_session_goes_on(
    make_cluster: Callable[[], Awaitable[Cluster]],
) -> None:
    """G8: pairing operations answer a few hundred bytes; a stranger's larger answer fails
    its request before it is decoded, not the session."""
    server, client = await make_cluster(), await make_cluster()
    async with asyncio.timeout(DEADLINE_SECONDS):
        with pytest.raises(OutcomeUnknown, match="passed 65536 bytes"):
            await client.endpoint.request(
                server.endpoint.hypernet_id,
                "large",
                {"size": 3 << 20},
                ticket=server.endpoint.ticket,
            )
        await still_serves(server, client)


async def test_a_request_body_larger_than_a_frame_arrives_whole_on_a_paired_session(
    make_cluster: Callable[[], Awaitable[Cluster]],
) -> None:
    """A body over the 1 MiB frame (a grant's request_bytes may be up to 64 MiB) follows its
    request as chunks, announced and signed by size and SHA-256; a small one is still inline."""
    server, client = await make_cluster(), await make_cluster()
    server.known[client.endpoint.hypernet_id] = KnownPeer(client.key.public_key, 4)
    client.known[server.endpoint.hypernet_id] = KnownPeer(server.key.public_key, 4)
    async with asyncio.timeout(DEADLINE_SECONDS):
        for size in (10, 3 << 20, 5 << 20):
            text = "y" * size
            answer = await client.endpoint.request(
                server.endpoint.hypernet_id,
                "measure",
                {"text": text},
                generation=4,
                ticket=server.endpoint.ticket,
            )
            assert answer.body == {
                "chars": size,
                "sha256": hashlib.sha256(text.encode()).hexdigest(),
            }
        await still_serves(server, client, generation=4)


async def test_a_served_stream_is_read_by_one_task_not_a_task_per_read(
    make_cluster: Callable[[], Awaitable[Cluster]],
) -> None:
    """An 8 MiB body takes many reads on the serving side; they are made by the stream's one
    reader task, so the request costs that task and its handler's, whatever its size."""
    server, client = await make_cluster(), await make_cluster()
    server.known[client.endpoint.hypernet_id] = KnownPeer(client.key.public_key, 4)
    client.known[server.endpoint.hypernet_id] = KnownPeer(server.key.public_key, 4)
    loop = asyncio.get_running_loop()
    created: list[str] = []

    def counting(loop: asyncio.AbstractEventLoop, coro: Any, **options: Any) -> asyncio.Task[Any]:
        created.append(getattr(coro, "__qualname__", repr(coro)))
        return asyncio.Task(coro, loop=loop, **options)

    text = "y" * (8 << 20)
    async with asyncio.timeout(DEADLINE_SECONDS):
        await still_serves(server, client, generation=4)  # the session, and a stream to reuse
        loop.set_task_factory(counting)
        try:
            answer = await client.endpoint.request(
                server.endpoint.hypernet_id, "measure", {"text": text}, generation=4
            )
        finally:
            loop.set_task_factory(None)
    assert answer.body["chars"] == len(text)
    assert len(created) <= 3, created


async def test_a_request_body_in_chunks_is_refused_before_a_pairing(
    make_cluster: Callable[[], Awaitable[Cluster]],
) -> None:
    """Before a pairing (generation 0) only small pairing messages travel: a body in chunks
    is a protocol error, and the handler never sees it."""
    server, client = await make_cluster(), await make_cluster()
    async with asyncio.timeout(DEADLINE_SECONDS):
        with pytest.raises((ProtocolError, PeerUnreachable, OutcomeUnknown)):
            await client.endpoint.request(
                server.endpoint.hypernet_id,
                "measure",
                {"text": "z" * (2 << 20)},
                ticket=server.endpoint.ticket,
            )
    assert server.seen == []


async def read_stream(
    client: Cluster, server: Cluster, operation: str, received: list[bytes]
) -> None:
    """Every chunk ``operation`` streams, into ``received``, until it ends or fails."""
    async with client.endpoint.stream(
        server.endpoint.hypernet_id, operation, {}, ticket=server.endpoint.ticket
    ) as chunks:
        async for chunk in chunks:
            received.append(chunk)


async def test_an_engine_failure_on_the_serving_side_is_an_engine_error_not_an_unknown_outcome(
    make_cluster: Callable[[], Awaitable[Cluster]],
) -> None:
    """The handler's own ``EngineUnavailable`` is answered as an error frame: the requester
    learns the engine failed (503 ``engine_unavailable``), never ``peer_unreachable`` (the peer
    answered) nor ``peer_timeout`` (outcome unknown)."""
    server, client = await make_cluster(), await make_cluster()
    received: list[bytes] = []
    async with asyncio.timeout(DEADLINE_SECONDS):
        with pytest.raises(EngineUnavailable) as plain:
            await client.endpoint.request(
                server.endpoint.hypernet_id, "engine_down", {}, ticket=server.endpoint.ticket
            )
        with pytest.raises(EngineUnavailable) as streamed:
            await read_stream(client, server, "engine_dies", received)
        await still_serves(server, client)
    for caught in (plain, streamed):
        assert not isinstance(caught.value, OutcomeUnknown)
        assert caught.value.code == "engine_unavailable"
    assert plain.value.details == {"engine": "down"}
    assert streamed.value.details == {"engine": "gone"}
    assert received == [b"data: {}\n\n"]


async def test_a_paired_peer_holds_128_request_streams_and_one_more_is_reset_with_code_1(
    make_cluster: Callable[[], Awaitable[Cluster]],
) -> None:
    """The cap is 128 request streams, the control stream not counted, and a stream past it
    is reset with code 1 at once rather than the peer's ``open_bi`` waiting (interop review:
    the 128th ``open_bi`` used to block)."""
    server, client = await make_cluster(), await make_cluster()
    server.known[client.endpoint.hypernet_id] = KnownPeer(client.key.public_key, 4)
    client.known[server.endpoint.hypernet_id] = KnownPeer(server.key.public_key, 4)
    async with asyncio.timeout(DEADLINE_SECONDS):
        session = await client.endpoint.connect(
            server.endpoint.hypernet_id, generation=4, ticket=server.endpoint.ticket
        )
        held = []
        for _ in range(MAX_PEER_STREAMS):
            stream = await session.connection.open_bi()
            await stream.send().write_all(b"\x00")  # half a frame header: the server sees it
            held.append(stream)
        past = await session.connection.open_bi()
        await past.send().write_all(b"\x00")
        with pytest.raises(iroh.IrohError):
            await past.recv().read(16)
        assert await past.recv().received_reset() == CANCELLED_CODE
        assert not session.closed.is_set()


async def test_abandoning_a_request_cancels_the_handler_on_the_peer(
    make_cluster: Callable[[], Awaitable[Cluster]],
) -> None:
    server, client = await make_cluster(), await make_cluster()
    async with asyncio.timeout(DEADLINE_SECONDS):
        pending = asyncio.ensure_future(
            client.endpoint.request(
                server.endpoint.hypernet_id, "hang", {}, ticket=server.endpoint.ticket
            )
        )
        await server.started.wait()
        pending.cancel()
        await server.cancelled.wait()
        await still_serves(server, client)


async def test_abandoning_a_stream_early_cancels_the_handler_on_the_peer(
    make_cluster: Callable[[], Awaitable[Cluster]],
) -> None:
    server, client = await make_cluster(), await make_cluster()
    async with asyncio.timeout(DEADLINE_SECONDS):
        async with client.endpoint.stream(
            server.endpoint.hypernet_id,
            "bytes",
            {"count": 10_000, "size": 1 << 16},
            ticket=server.endpoint.ticket,
        ) as chunks:
            async for _ in chunks:
                break
        await still_serves(server, client)


async def test_a_dead_address_fails_within_the_connect_deadline(
    make_cluster: Callable[[], Awaitable[Cluster]],
    raw_endpoint: Callable[[bytes], Awaitable[iroh.Endpoint]],
) -> None:
    client = await make_cluster()
    gone = await raw_endpoint(ALPN)
    ticket = str(iroh.EndpointTicket.from_addr(gone.addr()))
    hypernet_id = bytes(gone.id().to_bytes()).hex()
    await gone.close()
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(PeerUnreachable):
        await client.endpoint.request(hypernet_id, "echo", {}, ticket=ticket)
    assert loop.time() - started < 4


async def test_a_peer_killed_with_sigkill_is_noticed_within_five_seconds(
    make_cluster: Callable[[], Awaitable[Cluster]], tmp_path: Path
) -> None:
    client = await make_cluster()
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        str(Path(__file__).with_name("hypernet_peer_child.py")),
        str(tmp_path / "child"),
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(DEADLINE_SECONDS):
            assert child.stdout is not None
            peer = json.loads(await child.stdout.readline())
            result = await client.endpoint.request(
                peer["hypernet_id"], "echo", {"x": 1}, ticket=peer["ticket"]
            )
            assert result.body == {"operation": "echo", "body": {"x": 1}}
            session = client.endpoint.session(peer["hypernet_id"])
            assert session is not None
        loop = asyncio.get_running_loop()
        child.send_signal(signal.SIGKILL)
        killed_at = loop.time()
        async with asyncio.timeout(5):
            await session.closed.wait()
        assert loop.time() - killed_at < 5
        assert [hypernet_id for hypernet_id, _ in client.lost] == [peer["hypernet_id"]]
        assert client.endpoint.session(peer["hypernet_id"]) is None
    finally:
        if child.returncode is None:
            child.kill()
        await child.wait()


async def test_restarting_keeps_the_hypernet_id(
    make_cluster: Callable[[], Awaitable[Cluster]],
) -> None:
    server, client = await make_cluster(), await make_cluster()
    before = server.endpoint.hypernet_id
    await server.endpoint.stop()
    server.endpoint = server.make_endpoint()
    await server.endpoint.start()
    assert server.endpoint.hypernet_id == before
    async with asyncio.timeout(DEADLINE_SECONDS):
        await still_serves(server, client)
