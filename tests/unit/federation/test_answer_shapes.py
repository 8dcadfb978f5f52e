"""The answers docs/protocol.md §5 states are the ones the handlers give: every operation that
answers one JSON object is served once between two clusters over fakes, and its answer's
members are exactly those its row's ``about`` names (a SERVICE's, a GRANT's too)."""

from __future__ import annotations

import secrets
from typing import Any

from tests.support.fakes.peer_channel import OWNER, FakeTransport, Pair, approved_offer, peers_of
from tests.support.isolation import add_node, record_model

from ficc.base.ids import new_id
from ficc.domain.scopes import REMOTE_SCOPES
from ficc.services.remote.shapes import GRANT, SERVICE, SPEC, Shape
from ficc.services.remote.table import OPERATIONS


def members(answer: dict[str, Any]) -> frozenset[str]:
    """An answer's member names, as a shape's are compared."""
    return frozenset(answer)


def documented(operation: str) -> Shape:
    """The shape of ``operation``'s JSON answer, as its row states it."""
    shape = OPERATIONS[operation].about.answer
    assert shape is not None, f"{operation} documents no JSON answer"
    return shape


async def test_every_json_answer_has_exactly_the_documented_members(pair: Pair) -> None:
    node = await add_node(pair.grantor)
    model = await record_model(pair.grantor, "default", [1024], owned=True)
    grantor = pair.grantor.companion.transport
    assert isinstance(grantor, FakeTransport)
    offer_id, digest = await approved_offer(
        pair, {"scopes": sorted(REMOTE_SCOPES), "models": [model.id], "nodes": [node.id]}
    )
    await pair.channel.request(grantor.hypernet_id, "pairing.fetch", {"offer": offer_id})
    finished = await pair.requester.federation.pairing.finish_offer(
        OWNER, "default", offer_id, receipt=digest
    )
    peer_id = finished.peer.id
    [peer] = await peers_of(pair.requester)
    answers: dict[str, dict[str, Any]] = {}

    async def granted(
        operation: str, body: dict[str, Any], *, mutation_id: str | None = None
    ) -> Any:
        answer = await pair.requester.remote.request(
            OWNER, "default", peer_id, operation=operation, body=body, mutation_id=mutation_id
        )
        answers[operation] = answer["result"]
        return answer["result"]

    listed = await pair.channel.request(
        grantor.hypernet_id, "grants.list", {}, generation=peer.generation
    )
    grants = listed.body["grants"]
    assert isinstance(grants, list)
    [grant] = grants
    assert isinstance(grant, dict)
    await pair.channel.request(
        grantor.hypernet_id, "usage.receipts", {"grant": grant["id"]}, generation=peer.generation
    )
    await granted("discover", {})
    await granted("resources", {})
    await granted("inference.prepare", {})
    spec = {"name": "shaped", "model": model.id, "runtime": "llama.cpp", "node": node.id}
    await granted("inference.preview", {"spec": spec})
    await granted("models.manifest", {"model": model.id})
    manifest = {
        "name": "peer-made",
        "format": "gguf",
        "files": [{"path": "w.gguf", "size": 64, "sha256": "a" * 64}],
        "metadata": {},
    }
    created_model = await granted(
        "models.create", {"manifest": manifest}, mutation_id=secrets.token_hex(16)
    )
    service = await granted("inference.create", {"spec": spec}, mutation_id=secrets.token_hex(16))
    await granted("inference.get", {"service": service["id"]})
    service = await granted(
        "inference.replace",
        {"service": service["id"], "revision": service["revision"], "spec": spec},
        mutation_id=secrets.token_hex(16),
    )
    control = {"service": service["id"], "revision": service["revision"]}
    stopped = await granted(
        "inference.control", {**control, "operation": "stop"}, mutation_id=secrets.token_hex(16)
    )
    removed = await pair.requester.remote.request(
        OWNER,
        "default",
        peer_id,
        operation="inference.control",
        body={"service": service["id"], "revision": stopped["revision"], "operation": "remove"},
        mutation_id=secrets.token_hex(16),
    )
    assert members(removed["result"]) == {"id", "removed"}  # what its note says instead
    mutation_id = secrets.token_hex(16)
    await granted("models.remove", {"model": created_model["id"]}, mutation_id=mutation_id)
    await granted("operation.status", {"id": mutation_id})

    other = new_id("offer", secrets.token_bytes(16))
    await pair.channel.request(
        grantor.hypernet_id, "pairing.offer", {"offer": other, "scopes": ["discover"]}
    )
    await pair.channel.request(grantor.hypernet_id, "pairing.discard", {"offer": other})
    await grantor.request(
        pair.channel.hypernet_id,
        "grant.revoked",
        {"grant": grant["id"]},
        generation=peer.generation,
    )
    await grantor.request(pair.channel.hypernet_id, "peer.removed", {}, generation=peer.generation)
    # Outside a grant the answer is the operation's own object, from whichever end asked.
    for name, row in OPERATIONS.items():
        if not row.under_grant:
            answers[name] = {**grantor.answered, **pair.channel.answered}[name]

    shaped = {name for name, row in OPERATIONS.items() if row.about.answer is not None}
    assert shaped - set(answers) == set()
    for operation in sorted(shaped):
        assert members(answers[operation]) == documented(operation).names, operation
    for operation in ("inference.create", "inference.get", "inference.replace"):
        shown = answers[operation]
        assert members(shown["spec"]) == SPEC.names - {"options"}, operation
        for replica in shown["replicas"]:
            assert members(replica) == {"replica", "state", "exit_code"}
    assert members(grant) == GRANT.names
    assert documented("inference.get") is SERVICE
