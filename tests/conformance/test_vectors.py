"""The vectors of docs/vectors/ checked by the document alone: the kit's encoders reproduce
every payload, and its verifiers accept every signature and digest."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from tests.conformance import fedwire as w
from tests.conformance import usage_receipts as u

VECTORS = Path(__file__).resolve().parents[2] / "docs" / "vectors"


def load(name: str) -> dict[str, Any]:
    content: dict[str, Any] = json.loads((VECTORS / name).read_text(encoding="utf-8"))
    return content


def test_the_handshake_transcript_follows_the_document() -> None:
    v = load("handshake.json")
    i, r, g = v["initiator"], v["responder"], v["generation"]
    id_i, id_r = bytes.fromhex(i["hypernet_id"]), bytes.fromhex(r["hypernet_id"])
    n_i, n_r = bytes.fromhex(i["nonce"]), bytes.fromhex(r["nonce"])
    k_i, k_r = (
        w.Key(bytes.fromhex(i["cluster_key_seed"])),
        w.Key(bytes.fromhex(r["cluster_key_seed"])),
    )
    assert w.Key(bytes.fromhex(i["hypernet_key_seed"])).public == id_i
    assert (k_i.public.hex(), k_r.public.hex()) == (i["cluster_key"], r["cluster_key"])
    sig_i = k_i.sign(w.proof_message(b"I", id_i, id_r, n_i, n_r, g, k_i.public))
    sig_r = k_r.sign(w.proof_message(b"R", id_i, id_r, n_i, n_r, g, k_r.public))
    expected = [
        [w.hello(id_i, [1]), w.challenge(n_i)],
        [w.hello(id_r, [v["version"]]), w.challenge(n_r)],
        [w.proof(g, k_i.public, sig_i)],
        [w.proof(g, k_r.public, sig_r)],
    ]
    assert [[bytes.fromhex(p) for p in step["payloads"]] for step in v["transcript"]] == expected
    session = w.session_id(v["version"], id_i, id_r, n_i, n_r, g, k_i.public, k_r.public)
    assert session.hex() == v["session_id"]


def test_the_signed_request_follows_the_document() -> None:
    v = load("request.json")
    key = w.Key(bytes.fromhex(v["cluster_key_seed"]))
    content = w.request_content(v["operation"], v["body"])
    assert content.decode() == v["content"]
    message = w.request_message(bytes.fromhex(v["session_id"]), b"I", v["seq"], content)
    assert message.hex() == v["signed_message"]
    assert w.verifies(key.public, message, bytes.fromhex(v["signature"]))
    assert w.request(v["seq"], key.sign(message), content).hex() == v["payload"]
    decoded = w.decode(bytes.fromhex(v["payload"]))
    assert (decoded.tag, decoded.fields["seq"], decoded.fields["body"]) == (
        w.REQUEST,
        1,
        v["body"],
    )


def test_the_receipt_follows_the_document() -> None:
    v = load("receipt.json")
    receipt = v["receipt"]
    assert w.jcs(receipt["body"]).decode() == v["body_jcs"]
    assert hashlib.sha256(v["body_jcs"].encode()).hexdigest() == receipt["digest"]
    assert (w.RECEIPT_DOMAIN + bytes.fromhex(receipt["digest"])).hex() == v["signed_message"]
    service = bytes.fromhex(v["service_cluster_key"])
    assert w.check_receipt(receipt, service) == receipt["body"]
    assert w.b64(service) == receipt["body"]["service_cluster_key"]


def test_the_audit_chain_follows_the_document() -> None:
    v = load("audit.json")
    key = bytes.fromhex(v["cluster_key"])
    assert w.Key(bytes.fromhex(v["cluster_key_seed"])).public == key
    prev = "0" * 64
    for row in v["rows"]:
        assert w.jcs(row["body"]).decode() == row["body_jcs"]
        assert row["body"]["prev"] == prev
        prev = hashlib.sha256(row["body_jcs"].encode()).hexdigest()
        assert prev == row["digest"]
    for signed, context in ((v["head"], "head_context"), (v["tombstone"], "tombstone_context")):
        assert w.jcs(signed["body"]).decode() == signed["body_jcs"]
        digest = hashlib.sha256(signed["body_jcs"].encode()).digest()
        message = bytes.fromhex(v[context]) + digest
        assert message.hex() == signed["signed_message"]
        assert w.verifies(key, message, w.unb64(signed["signature"]))
    assert v["head"]["body"] == {"kind": "ficc.audit-head/1", "seq": 2, "digest": prev}
    first = v["rows"][0]
    assert (v["tombstone"]["body"]["digest"], v["tombstone"]["body"]["prev"]) == (
        first["digest"],
        first["body"]["prev"],
    )


def test_the_usage_told_at_the_end_of_an_answer_follows_the_document() -> None:
    v = load("usage.json")
    told = w.jcs(v["told"])
    body = w.jcs(v["response_body"])
    assert body.endswith(b',"usage":' + told + b"}")
    assert bytes.fromhex(v["response_payload"]) == b"\x11" + body
    chunk = b"event: ficc.usage\ndata: " + told + b"\n\n"
    assert v["stream_chunk"].encode() == chunk
    assert bytes.fromhex(v["chunk_payload"]) == b"\x13" + chunk


def test_the_usage_receipts_follow_the_document_and_the_offline_verifier_names_each_break() -> None:
    v = load("usage_receipts.json")
    key = w.Key(bytes.fromhex(v["grantor_cluster_key_seed"]))
    assert key.public.hex() == v["grantor_cluster_key"]
    assert w.unb64(v["grantor_cluster_key_text"]) == key.public
    assert u.CONTEXT.hex() == v["context"]
    prev = u.GENESIS
    receipts = []
    for item in v["receipts"]:
        receipt = item["receipt"]
        assert w.jcs(receipt["body"]).decode() == item["body_jcs"]
        assert u.signed_message(receipt["digest"]).hex() == item["signed_message"]
        # Ed25519 signs deterministically: the kit reproduces each receipt byte for byte.
        assert u.sign(receipt["body"], key) == receipt
        assert receipt["body"]["prev"] == prev
        prev = receipt["digest"]
        receipts.append(receipt)
    assert u.problems_of(receipts, key.public) == []
    assert v["told"]["receipt"] == receipts[0]
    assert v["stream_chunk"].encode() == b"event: ficc.usage\ndata: " + w.jcs(v["told"]) + b"\n\n"
    changed = {**receipts[1], "body": {**receipts[1]["body"], "completion_tokens": 0}}
    assert u.problems_of([receipts[0], changed, receipts[2]], key.public) == [
        (2, "digest_mismatch")
    ]
    assert u.problems_of([receipts[0], receipts[2]], key.public) == [(2, "missing")]
    assert u.problems_of([receipts[1], receipts[0], receipts[2]], key.public) == [
        (1, "missing"),
        (1, "seq_mismatch"),
    ]
    forged = {**receipts[2], "signature": w.b64(bytes(64))}
    assert u.problems_of([receipts[0], receipts[1], forged], key.public) == [(3, "signature")]
    resigned = u.sign({**receipts[1]["body"], "prompt_tokens": 99}, key)
    assert u.problems_of([receipts[0], resigned, receipts[2]], key.public) == [
        (2, "totals_mismatch"),
        (3, "prev_mismatch"),
    ]
