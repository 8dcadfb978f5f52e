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
import rfc8785

from ficc.adapters.keys import verify_signature
from ficc.base.canonical import canonical_json
from ficc.base.errors import Conflict, ProtocolError
from ficc.base.times import parse_time
from ficc.domain.audit import AuditEntry
from ficc.domain.audit_chain import ChainRow, ChainVerifier, SignedHead, row_digest
from ficc.domain.receipts import check_receipt, unb64
from ficc.domain.usage_receipts import verify_chain
from ficc.protocol.handshake import Handshake, KnownPeer, Role, State
from ficc.protocol.messages import Request, decode_message
from ficc.protocol.requests import RequestVerifier
from ficc.services.metering import parse_usage_event

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
        verify=verify_signature,
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
    verifier = RequestVerifier(responder.session, verify_signature)
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
        "verify": verify_signature,
    }
    assert check_receipt(receipt, **arguments) == body
    changed = {**receipt, "body": {**body, "generation": body["generation"] + 1}}
    with pytest.raises(Conflict):
        check_receipt(changed, **arguments)


def test_ficc_verifies_the_recorded_audit_chain_and_finds_each_row_changed() -> None:
    vector = load("audit.json")
    key = bytes.fromhex(vector["cluster_key"])

    def stored(row: dict[str, Any], **changed: Any) -> ChainRow:
        body = {**row["body"], **changed}
        entry = AuditEntry(
            body["action"],
            body["actor"],
            body["project"],
            body["target"],
            parse_time(body["at"]),
            details=body["details"],
            peer_hypernet_id=body["peer_hypernet_id"],
            peer_cluster_key=body["peer_cluster_key"],
        )
        return ChainRow(body["seq"], body["at"], body["prev"], row["digest"], entry)

    head = vector["head"]
    heads = {head["body"]["seq"]: SignedHead(2, head["body"]["digest"], head["signature"])}
    rows = [stored(row) for row in vector["rows"]]
    assert [
        row_digest(r.entry, seq=r.seq, prev=r.prev, at=r.at) for r in rows if r.entry and r.prev
    ] == [row["digest"] for row in vector["rows"]]
    verifier = ChainVerifier(key, verify_signature, heads)
    assert verifier.feed(rows)
    assert verifier.finish() is None
    tombstone = vector["tombstone"]
    first = rows[0]
    emptied = ChainRow(
        1, tombstone["body"]["at"], first.prev, first.digest, None, tombstone["signature"]
    )
    verifier = ChainVerifier(key, verify_signature, heads)
    assert verifier.feed([emptied, rows[1]])
    assert verifier.tombstones == 1
    changed = [stored(vector["rows"][0], actor="someone"), rows[1]]
    verifier = ChainVerifier(key, verify_signature, heads)
    assert not verifier.feed(changed)
    assert verifier.broken is not None
    assert (verifier.broken.seq, verifier.broken.reason) == (1, "digest_mismatch")


def test_ficc_verifies_the_recorded_usage_receipts_and_names_each_one_changed() -> None:
    vector = load("usage_receipts.json")
    key = bytes.fromhex(vector["grantor_cluster_key"])
    chain = [(item["receipt"]["body"]["seq"], item["receipt"]) for item in vector["receipts"]]
    grant = chain[0][1]["body"]["grant"]
    head, findings = verify_chain(chain, grant=grant, public_key=key, verify=verify_signature)
    assert (findings, head.seq, head.digest) == ([], 3, chain[-1][1]["digest"])
    assert [item["body_jcs"] for item in vector["receipts"]] == [
        canonical_json(receipt["body"]).decode() for _, receipt in chain
    ]
    assert vector["told"]["receipt"] == chain[0][1]
    assert parse_usage_event(vector["stream_chunk"].encode()) == vector["told"]
    changed = [chain[0], (2, {**chain[1][1], "body": {**chain[1][1]["body"], "prompt_tokens": 1}})]
    _, findings = verify_chain(
        [*changed, chain[2]], grant=grant, public_key=key, verify=verify_signature
    )
    assert [(f.seq, f.reason) for f in findings] == [(2, "digest_mismatch")]
    _, findings = verify_chain(
        [chain[0], chain[2]], grant=grant, public_key=key, verify=verify_signature
    )
    assert [(f.seq, f.reason) for f in findings] == [(2, "missing")]


@pytest.mark.parametrize(
    "body",
    [
        {"b": 1, "a": "x/y\n\u0001", "c": None, "d": [True, False], "e": {"z": -(2**53 - 1)}},
        {"kind": "ficc.usage/1", "service": "Zürich 🔬", "x": 1.0, "y": 2**53 - 1},
        {"\u00e9": 1, "e": 0.5e-7},
    ],
)
def test_a_receipts_encoding_is_rfc_8785_whatever_the_body_holds(body: dict[str, Any]) -> None:
    assert canonical_json(body) == rfc8785.dumps(body)
