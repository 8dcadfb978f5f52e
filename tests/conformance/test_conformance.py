"""The kit against a real FICC server: the document's exchanges end to end, and every refusal
it promises, driven by a client that imports nothing from ``ficc``."""

from __future__ import annotations

import ast
import asyncio
import base64
import secrets
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import iroh
import pytest
from tests.conformance import fedwire as w
from tests.conformance import peer
from tests.conformance.server import Server, start

KIT = Path(__file__).resolve().parent
ALLOWED = {"iroh", "cryptography", "rfc8785", "pytest", "tests"}
OFFER_ALPHABET = "abcdefghijklmnopqrstuvwxyz234567"
HANDSHAKE_SECONDS = 5.0  # §4: a handshake must finish within 5 s of the connection's accept
SILENCE_SECONDS = 3.5  # §6: a side that hears nothing for 3.5 s declares the peer dead
NOTICED_WITHIN_SECONDS = 5.0  # §6: a killed peer is noticed within 5 s
UNPAIRED_REQUEST_STREAMS = 4  # §1: request streams served at once before a pairing


def offer_id() -> str:
    return "ofr_" + "".join(secrets.choice(OFFER_ALPHABET) for _ in range(26))


def test_the_kit_imports_nothing_from_ficc_nor_its_test_support() -> None:
    import sys

    for path in sorted(KIT.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            for name in names:
                top = name.split(".")[0]
                assert top in ALLOWED or top in sys.stdlib_module_names, (path.name, name)
                assert top != "tests" or name.startswith("tests.conformance"), (path.name, name)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = start(tmp_path_factory.mktemp("conformance") / "state")
    yield running
    running.stop()


@pytest.fixture
async def local() -> AsyncIterator[iroh.Endpoint]:
    endpoint = await peer.endpoint()
    yield endpoint
    await endpoint.close()


def address(server: Server) -> iroh.EndpointAddr:
    ticket = server.overview()["identity"]["ticket"]
    return iroh.EndpointTicket.from_string(ticket).endpoint_addr()


def offers(server: Server) -> dict[str, dict[str, Any]]:
    return {offer["id"]: offer for offer in server.overview()["offers"]}


def refused(answer: w.Decoded, code: str, field: str | None = None) -> None:
    assert answer.tag == w.ERROR, answer
    assert answer.fields["code"] == code, answer
    if field is not None:
        assert answer.fields["details"]["field"] == field, answer


async def test_offer_then_discard_as_an_unpaired_peer(server: Server, local: iroh.Endpoint) -> None:
    session = await peer.handshake(local, address(server), w.Key(secrets.token_bytes(32)))
    sent = offer_id()
    body = {"offer": sent, "scopes": ["discover"], "label": "kit"}
    answer = await session.ask("pairing.offer", body)
    assert answer.tag == w.RESPONSE, answer
    assert answer.fields == {"label": "conformance", "offer": sent}
    assert (await session.ask("pairing.offer", body)).fields == answer.fields  # idempotent
    shown = offers(server)[sent]
    assert (shown["state"], shown["direction"], shown["scopes"]) == (
        "received",
        "incoming",
        ["discover"],
    )
    refused(await session.ask("pairing.offer", {**body, "scopes": ["resources:read"]}), "conflict")
    refused(await session.ask("pairing.finish", {"offer": sent, "receipt": "0" * 64}), "conflict")
    for _ in range(2):  # idempotent
        answer = await session.ask("pairing.discard", {"offer": sent})
        assert (answer.tag, answer.fields) == (w.RESPONSE, {})
    assert offers(server)[sent]["state"] == "discarded"
    session.close()


async def test_refusals_of_request_bodies_name_the_field_and_write_nothing(
    server: Server, local: iroh.Endpoint
) -> None:
    session = await peer.handshake(local, address(server), w.Key(secrets.token_bytes(32)))
    before = offers(server)
    good = {"offer": offer_id(), "scopes": ["discover"]}
    cases: list[tuple[str, dict[str, Any], str, str | None]] = [
        ("pairing.offer", {**good, "bogus": 1}, "invalid_request", "bogus"),
        ("pairing.offer", {**good, "label": "x" * 101}, "invalid_request", "label"),
        ("pairing.offer", {**good, "expires_at": "x" * 65}, "invalid_request", "expires_at"),
        ("pairing.offer", {**good, "offer": "ofr_abc"}, "invalid_request", "offer"),
        ("pairing.offer", {"offer": good["offer"]}, "invalid_request", "scopes"),
        ("pairing.offer", {**good, "scopes": ["nope"]}, "invalid_request", "scopes[0]"),
        ("pairing.finish", {"offer": good["offer"]}, "invalid_request", "receipt"),
        ("pairing.discard", {"offer": good["offer"], "x": 1}, "invalid_request", "x"),
        ("pairing.discard", {"offer": offer_id()}, "not_found", None),
        ("discover", {"grant": "grt_" + "a" * 26, "body": {}, "zzz": 1}, "invalid_request", "zzz"),
        ("discover", {"grant": "grt_" + "a" * 26, "body": {}}, "forbidden", None),
        ("grants.list", {}, "forbidden", None),
        ("grant.request", {}, "invalid_request", "operation"),
    ]
    for operation, body, code, field in cases:
        refused(await session.ask(operation, body), code, field)
    assert offers(server) == before
    answer = await session.ask("discover", {"grant": "grt_" + "a" * 26, "body": {}})
    assert answer.fields["details"]["reason"] == "not_paired"
    session.close()


async def test_a_full_pairing_then_a_granted_request(server: Server, local: iroh.Endpoint) -> None:
    key = w.Key(secrets.token_bytes(32))
    session = await peer.handshake(local, address(server), key)
    sent = offer_id()
    scopes = ["discover", "inference:invoke"]
    assert (await session.ask("pairing.offer", {"offer": sent, "scopes": scopes})).tag == w.RESPONSE
    # In a thread: the event loop must stay free to answer the receipt the server pushes.
    status, approved = await asyncio.to_thread(
        server.call,
        "POST",
        f"/federation/offers/{sent}/approve",
        {"revision": 1, "grant": {"scopes": ["discover"]}},
    )
    assert status == 200, approved
    assert approved["receipt_delivered"] is True
    [(operation, pushed)] = session.served
    assert operation == "pairing.receipt"
    assert pushed["offer"] == sent
    identity = server.overview()["identity"]
    service_key = base64.urlsafe_b64decode(
        identity["cluster_key"] + "=" * (-len(identity["cluster_key"]) % 4)
    )
    body = w.check_receipt(pushed["receipt"], service_key)
    assert body["offer"] == sent
    assert body["requester_cluster_key"] == w.b64(key.public)
    assert body["grant_terms"]["scopes"] == ["discover"]
    digest = pushed["receipt"]["digest"]
    finished = await session.ask("pairing.finish", {"offer": sent, "receipt": digest})
    assert finished.tag == w.RESPONSE, finished
    again = await session.ask("pairing.finish", {"offer": sent, "receipt": digest})
    assert again.fields == finished.fields  # idempotent
    session.close()
    # A generation the server did not record is refused; generation 0 is still a session of
    # no pairing (for further pairings, of other projects), which serves no grant.
    with pytest.raises(ConnectionRefusedError, match="generation mismatch"):
        await peer.handshake(local, address(server), key, generation=body["generation"] + 2**60)
    unpaired = await peer.handshake(local, address(server), key)
    answer = await unpaired.ask("discover", {"grant": body["grant"], "body": {}})
    refused(answer, "forbidden")
    assert answer.fields["details"]["reason"] == "not_paired"
    unpaired.close()
    paired = await peer.handshake(local, address(server), key, generation=body["generation"])
    answer = await paired.ask("discover", {"grant": body["grant"], "body": {}})
    assert answer.tag == w.RESPONSE, answer
    assert answer.fields["replayed"] is False
    # §5's table of answers: the shape of discover's result.
    assert set(answer.fields["result"]) == {"models", "nodes", "services"}, answer
    refused(await paired.ask("resources", {"grant": body["grant"], "body": {}}), "forbidden")
    listed = await paired.ask("grants.list", {})
    assert [grant["id"] for grant in listed.fields["grants"]] == [body["grant"]]
    [grant] = listed.fields["grants"]
    assert (grant["state"], grant["scopes"]) == ("active", ["discover"]), grant
    assert set(grant["remaining"]) == {"requests", "transfer_bytes", "tokens"}, grant
    paired.close()


async def test_a_tampered_request_is_a_protocol_error_that_closes_with_code_2(
    server: Server, local: iroh.Endpoint
) -> None:
    session = await peer.handshake(local, address(server), w.Key(secrets.token_bytes(32)))
    payload = bytearray(session.signed("pairing.discard", {"offer": offer_id()}))
    payload[20] ^= 1  # a bit of the signature
    stream = peer.Stream(await session.connection.open_bi())
    await stream.send(bytes(payload))
    answer = await stream.receive()
    refused(answer, "protocol_error")
    assert "signature does not verify" in answer.fields["message"]
    reason = await session.connection.closed()
    assert "signature does not verify" in str(reason)
    session.close()


async def test_an_oversized_frame_header_is_refused_before_its_payload(
    server: Server, local: iroh.Endpoint
) -> None:
    session = await peer.handshake(local, address(server), w.Key(secrets.token_bytes(32)))
    stream = peer.Stream(await session.connection.open_bi())
    await stream.send_raw((w.MAX_FRAME + 1).to_bytes(4, "big"))
    answer = await stream.receive()
    refused(answer, "protocol_error")
    assert "exceeds the 1048576-byte limit" in answer.fields["message"]
    session.close()


async def test_a_non_canonical_request_is_refused(server: Server, local: iroh.Endpoint) -> None:
    session = await peer.handshake(local, address(server), w.Key(secrets.token_bytes(32)))
    content = b'{"body":{"offer":"x","n":1.0},"operation":"pairing.discard"}'
    session.seq += 1
    message = w.request_message(session.session_id, b"I", session.seq, content)
    stream = peer.Stream(await session.connection.open_bi())
    await stream.send(w.request(session.seq, session.key.sign(message), content))
    answer = await stream.receive()
    refused(answer, "protocol_error")
    assert "not canonical" in answer.fields["message"]
    session.close()


async def test_a_handshake_not_finished_within_5_s_is_closed_with_code_2(
    server: Server, local: iroh.Endpoint
) -> None:
    connection = await local.connect(address(server), w.ALPN)
    started = time.monotonic()
    control = peer.Stream(await connection.open_bi())
    await control.send(w.hello(bytes(local.id().to_bytes()), [1]))
    await control.send(w.challenge(secrets.token_bytes(32)))
    assert (await control.receive()).tag == w.HELLO
    assert (await control.receive()).tag == w.CHALLENGE
    # No PROOF: the handshake stays unfinished.
    async with asyncio.timeout(HANDSHAKE_SECONDS + 3):
        reason = await connection.closed()
    waited = time.monotonic() - started
    assert peer.close_code(reason) == 2, reason
    assert waited >= HANDSHAKE_SECONDS - 0.5, (waited, reason)


async def test_a_peer_silent_for_3_5_s_is_closed_with_code_0(
    server: Server, local: iroh.Endpoint
) -> None:
    key = w.Key(secrets.token_bytes(32))
    session = await peer.handshake(local, address(server), key, heartbeats=False)
    silent_since = time.monotonic()
    async with asyncio.timeout(NOTICED_WITHIN_SECONDS + 2):
        reason = await session.connection.closed()
    waited = time.monotonic() - silent_since
    assert peer.close_code(reason) == 0, reason
    assert SILENCE_SECONDS - 0.5 <= waited <= NOTICED_WITHIN_SECONDS, (waited, reason)
    beating = await peer.handshake(local, address(server), key)
    with pytest.raises(TimeoutError):  # heartbeats alone keep a session open
        async with asyncio.timeout(NOTICED_WITHIN_SECONDS):
            await beating.connection.closed()
    refused(await beating.ask("pairing.discard", {"offer": offer_id()}), "not_found")
    beating.close()


async def test_an_unpaired_peer_is_served_on_4_request_streams_and_the_next_is_reset(
    server: Server, local: iroh.Endpoint
) -> None:
    session = await peer.handshake(local, address(server), w.Key(secrets.token_bytes(32)))
    held: list[peer.Stream] = []
    for _ in range(UNPAIRED_REQUEST_STREAMS):  # §1: the control stream is not counted
        stream = peer.Stream(await session.connection.open_bi())
        await stream.send(session.signed("pairing.discard", {"offer": offer_id()}))
        refused(await stream.receive(), "not_found")
        held.append(stream)
    past = peer.Stream(await session.connection.open_bi())
    await past.send(session.signed("pairing.discard", {"offer": offer_id()}))
    with pytest.raises(Exception) as reset:  # noqa: PT011 - iroh's read error names the reset
        async with asyncio.timeout(5):
            await past.receive()
    assert "Reset(1)" in repr(reset.value) or "reset" in str(reset.value).lower(), reset.value
    # The connection stays open: a held stream is still served.
    await held[0].send(session.signed("pairing.discard", {"offer": offer_id()}))
    refused(await held[0].receive(), "not_found")
    # §1, the requester's half: a stream it ends is ended by the server too, and its place
    # serves a new stream.
    await held[1].send_half.finish()
    async with asyncio.timeout(5):
        assert not await held[1].recv_half.read(1)
    fresh = peer.Stream(await session.connection.open_bi())
    await fresh.send(session.signed("pairing.discard", {"offer": offer_id()}))
    refused(await fresh.receive(), "not_found")
    session.close()
