"""The test vectors in docs/vectors/ hold both ways: FICC reproduces them byte for byte from
their inputs, and FICC accepts them (a fresh handshake, request verifier and receipt check
take the recorded bytes)."""

from __future__ import annotations

import json
from importlib.machinery import SourceFileLoader
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from ficc.adapters.hypernet.keys import ed25519_verify
from ficc.base.errors import Conflict, ProtocolError
from ficc.domain.receipts import check_receipt, unb64
from ficc.protocol.handshake import Handshake, KnownPeer, Role, State
from ficc.protocol.messages import Request, decode_message
from ficc.protocol.requests import RequestVerifier

ROOT = Path(__file__).resolve().parents[3]
VECTORS = ROOT / "docs" / "vectors"


def make_vectors() -> ModuleType:
    loader = SourceFileLoader("make_vectors", str(ROOT / "scripts" / "make-vectors"))
    module = ModuleType(loader.name)
    loader.exec_module(module)
    return module


def load(name: str) -> dict[str, Any]:
    content: dict[str, Any] = json.loads((VECTORS / name).read_text(encoding="utf-8"))
    return content


def test_ficc_reproduces_every_vector_file_byte_for_byte() -> None:
    script = make_vectors()
    generated = script.vectors()
    assert sorted(generated) == sorted(path.name for path in VECTORS.glob("*.json"))
    for name, content in generated.items():
        assert (VECTORS / name).read_text(encoding="utf-8") == script.render(content), name


def _responder(vector: dict[str, Any], nonce: bytes) -> Handshake:
    script = make_vectors()
    return Handshake(
        role=Role.RESPONDER,
        local_hypernet_id=bytes.fromhex(vector["responder"]["hypernet_id"]),
        remote_hypernet_id=bytes.fromhex(vector["initiator"]["hypernet_id"]),
        signer=script.key(0x44),
        verify=ed25519_verify,
        nonce=nonce,
        known_peers=(KnownPeer(bytes.fromhex(vector["initiator"]["cluster_key"]), 7),),
    )


def test_ficc_accepts_the_recorded_handshake_and_answers_it_with_the_recorded_bytes() -> None:
    vector = load("handshake.json")
    responder = _responder(vector, bytes.fromhex(vector["responder"]["nonce"]))
    flights = [[bytes.fromhex(p) for p in step["payloads"]] for step in vector["transcript"]]
    answer = [m for payload in flights[0] for m in responder.receive(decode_message(payload))]
    assert [decode_message(payload) for payload in flights[1]] == answer
    proof = [m for payload in flights[2] for m in responder.receive(decode_message(payload))]
    assert [decode_message(payload) for payload in flights[3]] == proof
    assert responder.state is State.ESTABLISHED
    assert responder.session.session_id.hex() == vector["session_id"]


def test_a_recorded_proof_is_refused_under_another_responder_nonce() -> None:
    vector = load("handshake.json")
    responder = _responder(vector, bytes(32))
    flights = [[bytes.fromhex(p) for p in step["payloads"]] for step in vector["transcript"]]
    for payload in flights[0]:
        responder.receive(decode_message(payload))
    [proof] = flights[2]
    with pytest.raises(ProtocolError, match="signature does not verify"):
        responder.receive(decode_message(proof))


def test_ficc_accepts_the_recorded_request_and_refuses_it_replayed() -> None:
    vector = load("request.json")
    handshake = load("handshake.json")
    request = decode_message(bytes.fromhex(vector["payload"]))
    assert isinstance(request, Request)
    assert request.content == vector["content"].encode()
    responder = _responder(handshake, bytes.fromhex(handshake["responder"]["nonce"]))
    for step in handshake["transcript"][0::2]:
        for payload in step["payloads"]:
            responder.receive(decode_message(bytes.fromhex(payload)))
    verifier = RequestVerifier(responder.session, ed25519_verify)
    verifier.verify(request)
    with pytest.raises(ProtocolError, match="replay"):
        verifier.verify(request)


def test_ficc_accepts_the_recorded_receipt_and_refuses_it_changed() -> None:
    vector = load("receipt.json")
    receipt = vector["receipt"]
    body = receipt["body"]
    arguments: dict[str, Any] = {
        "digest": receipt["digest"],
        "offer_id": body["offer"],
        "requester_hypernet_id": body["requester"],
        "requester_cluster_key": body["requester_cluster_key"],
        "service_hypernet_id": body["service"],
        "service_cluster_key": unb64(body["service_cluster_key"]),
        "requested_scopes": frozenset(body["scopes"]),
        "verify": ed25519_verify,
    }
    assert check_receipt(receipt, **arguments) == body
    changed = {**receipt, "body": {**body, "generation": body["generation"] + 1}}
    with pytest.raises(Conflict):
        check_receipt(changed, **arguments)
