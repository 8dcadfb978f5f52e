"""Lost answers: ``pairing.finish`` and each remote mutation served by the other cluster, its
answer lost on the way back, then sent again: exactly one effect, and the first answer.

Two clusters run in process over the fake unit of work, joined by an in-memory channel in
place of HyperNet (tests/support/fakes/peer_channel.py); everything else is the real services.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import secrets
from typing import Any

import httpx
import pytest
import rfc8785
from tests.support.fakes.inference import FakeRuntime
from tests.support.fakes.peer_channel import OWNER, Pair, approved_offer, paired, peers_of
from tests.support.isolation import add_node, record_model

from ficc.base.errors import OutcomeUnknown
from ficc.domain.inference import ControlAction, RuntimeName
from ficc.domain.peers import PeerState
from ficc.services.mutations import grant_scope
from ficc.services.remote.table import OPERATIONS
from ficc.web.app import create_app


async def test_a_finish_whose_answer_was_lost_completes_when_sent_again(
    pair: Pair,
) -> None:
    offer_id, digest = await approved_offer(pair, {"scopes": ["discover"]})
    pair.channel.lose_answer_of.add("pairing.finish")
    with pytest.raises(OutcomeUnknown):
        await pair.requester.federation.pairing.finish_offer(
            OWNER, "default", offer_id, receipt=digest
        )
    # The grantor finished its side; the requester recorded its intent, still pending.
    [served] = await peers_of(pair.grantor)
    [intended] = await peers_of(pair.requester)
    assert (served.state, intended.state) == (PeerState.PAIRED, PeerState.PENDING)
    finished = await pair.requester.federation.pairing.finish_offer(
        OWNER, "default", offer_id, receipt=digest
    )
    again = await pair.requester.federation.pairing.finish_offer(
        OWNER, "default", offer_id, receipt=digest
    )
    [requester_peer] = await peers_of(pair.requester)
    [grantor_peer] = await peers_of(pair.grantor)
    assert requester_peer.id == intended.id == finished.peer.id == again.peer.id
    assert (requester_peer.state, grantor_peer.state) == (PeerState.PAIRED, PeerState.PAIRED)
    assert grantor_peer.id == served.id
    assert requester_peer.generation == grantor_peer.generation
    assert finished.offer.state == again.offer.state == "finished"
    assert pair.channel.sent.count("pairing.finish") == 2
    # The pairing works: a request under its grant is served.
    discovered = await pair.requester.remote.request(
        OWNER, "default", requester_peer.id, operation="discover", body={}
    )
    assert discovered["result"]["services"] == []


async def test_each_mutation_whose_answer_was_lost_runs_once_and_replays_its_first_answer(
    pair: Pair,
) -> None:
    node = await add_node(pair.grantor)
    model = await record_model(pair.grantor, "default", [1024], owned=True)
    offer_id, digest = await approved_offer(
        pair,
        {
            "scopes": ["inference:manage", "models:manage"],
            "models": [model.id],
            "nodes": [node.id],
        },
    )
    finished = await pair.requester.federation.pairing.finish_offer(
        OWNER, "default", offer_id, receipt=digest
    )
    peer_id = finished.peer.id
    spec = {"name": "lost", "model": model.id, "runtime": "llama.cpp", "node": node.id}
    manifest = {
        "name": "peer-made",
        "format": "gguf",
        "files": [{"path": "w.gguf", "size": 64, "sha256": "a" * 64}],
        "metadata": {},
    }

    async def lost_then_retried(operation: str, body: dict[str, Any]) -> dict[str, Any]:
        mutation_id = secrets.token_hex(16)
        pair.channel.lose_answer_of.add(operation)
        with pytest.raises(OutcomeUnknown) as lost:
            await pair.requester.remote.request(
                OWNER, "default", peer_id, operation=operation, body=body, mutation_id=mutation_id
            )
        assert lost.value.details["mutation_id"] == mutation_id
        assert lost.value.details["outcome"] == "unknown"
        retried = await pair.requester.remote.request(
            OWNER, "default", peer_id, operation=operation, body=body, mutation_id=mutation_id
        )
        first = pair.channel.lost[operation]
        assert first["replayed"] is False
        assert retried["replayed"] is True
        assert retried["result"] == first["result"], operation
        return dict(retried["result"])

    created_model = await lost_then_retried("models.create", {"manifest": manifest})
    service = await lost_then_retried("inference.create", {"spec": spec})
    replaced = await lost_then_retried(
        "inference.replace",
        {"service": service["id"], "revision": service["revision"], "spec": {**spec, "name": "b"}},
    )
    await lost_then_retried(
        "inference.control",
        {"service": service["id"], "revision": replaced["revision"], "operation": "remove"},
    )
    await lost_then_retried("models.remove", {"model": created_model["id"]})

    async with pair.grantor.uow_factory() as uow:
        services = await uow.services.list("default")
        models = await uow.models.list("default")
    # Exactly one effect each: one service made, replaced once, removed; one model made, removed.
    assert replaced["revision"] == service["revision"] + 1
    assert services == []
    assert [m.id for m in models] == [model.id]


async def test_every_mutation_replays_byte_for_byte_the_answer_its_first_call_returned(
    pair: Pair,
) -> None:
    """Each mutation operation (each ``inference.control`` operation too) through the
    requester's HTTP API, then again with the same mutation_id and arguments: the same bytes
    but ``replayed``. At the end every call is sent again, after the records changed or went
    (a stop replayed after a start still shows the service stopped, its replicas ended)."""
    runtime = FakeRuntime()
    runtimes = pair.grantor.inference.supervisor._runtimes
    runtimes[RuntimeName.LLAMA_CPP] = runtime  # type: ignore[index]
    node = await add_node(pair.grantor)
    model = await record_model(pair.grantor, "default", [1024], owned=True)
    finished = await paired(
        pair,
        {
            "scopes": ["inference:manage", "models:manage"],
            "models": [model.id],
            "nodes": [node.id],
        },
    )
    peer_id = finished.peer.id
    token = (pair.requester.settings.state_dir / "owner.token").read_text().strip()
    api = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_app(pair.requester)),
        base_url="http://127.0.0.1:8470",
        headers={"Authorization": f"Bearer {token}"},
    )
    sent: list[tuple[dict[str, Any], bytes]] = []

    async def answered(request: dict[str, Any]) -> httpx.Response:
        response = await api.post(f"/api/v1/federation/peers/{peer_id}/request", json=request)
        assert response.status_code == 200, response.text
        return response

    async def once_then_again(operation: str, body: dict[str, Any]) -> dict[str, Any]:
        request = {"operation": operation, "body": body, "mutation_id": secrets.token_hex(16)}
        first = await answered(request)
        again = await answered(request)
        assert first.json()["replayed"] is False
        assert again.json()["replayed"] is True
        assert again.content == replayed_bytes(first.content), operation
        # The canonical bytes the grantor sent are the same too.
        assert rfc8785.dumps(again.json()["result"]) == rfc8785.dumps(first.json()["result"])
        sent.append((request, first.content))
        return dict(first.json()["result"])

    async def until_state(service_id: str, state: str) -> None:
        for _ in range(10_000):
            async with pair.grantor.uow_factory() as uow:
                record = await uow.services.get(service_id)
            if record is not None and record.state.value == state:
                return
            await asyncio.sleep(0)
        raise AssertionError(f"service {service_id} never became {state}")

    async def control(service: dict[str, Any], operation: str) -> dict[str, Any]:
        body = {"service": service["id"], "revision": service["revision"], "operation": operation}
        return await once_then_again("inference.control", body)

    manifest = {
        "name": "peer-made",
        "format": "gguf",
        "files": [{"path": "w.gguf", "size": 64, "sha256": "a" * 64}],
        "metadata": {},
    }
    created_model = await once_then_again("models.create", {"manifest": manifest})
    spec = {"name": "replayed", "model": model.id, "runtime": "llama.cpp", "node": node.id}
    service = await once_then_again("inference.create", {"spec": spec})
    service = await once_then_again(
        "inference.replace",
        {"service": service["id"], "revision": service["revision"], "spec": {**spec, "name": "b"}},
    )
    service = await control(service, "start")
    await until_state(service["id"], "running")
    stopped = await control(service, "stop")
    assert stopped["state"] == "stopped"
    assert {r["state"] for r in stopped["replicas"]} == {"stopped"}
    service = await control(stopped, "start")
    await until_state(service["id"], "running")
    service = await control(service, "drain")
    await until_state(service["id"], "stopped")
    await control(service, "remove")
    await once_then_again("models.remove", {"model": created_model["id"]})

    exercised = {request["operation"] for request, _ in sent}
    assert exercised == {name for name, row in OPERATIONS.items() if row.mutation}
    controlled = {r["body"]["operation"] for r, _ in sent if r["operation"] == "inference.control"}
    assert controlled == {op.value for op in ControlAction} - {"replace"}
    # Everything changed since, or is gone: each replay is still its first answer.
    for request, first in sent:
        assert (await answered(request)).content == replayed_bytes(first), request
        # Inspection shows the answer the peer was given, not the owner's view of a service.
        status = {"operation": "operation.status", "body": {"id": request["mutation_id"]}}
        inspected = (await answered(status)).json()["result"]
        assert inspected["result"] == json.loads(first)["result"], request
    assert len(pair.grantor.federation.operations._tries) == 0
    await api.aclose()


def replayed_bytes(first: bytes) -> bytes:
    """The first answer's bytes as a replay sends them: the same, but ``replayed``."""
    assert first.count(b'"replayed":false') == 1, first
    return first.replace(b'"replayed":false', b'"replayed":true')


async def test_a_receipt_holding_the_owners_view_replays_and_inspects_as_the_peers_view(
    pair: Pair,
) -> None:
    """A receipt written before answers were kept as shown holds the owner's view of a service
    (options, engine text, PIDs and ports): a replay and ``operation.status`` still show the
    peer only its own view."""
    node = await add_node(pair.grantor)
    model = await record_model(pair.grantor, "default", [1024], owned=True)
    finished = await paired(
        pair, {"scopes": ["inference:manage"], "models": [model.id], "nodes": [node.id]}
    )
    peer_id = finished.peer.id
    spec = {"name": "old", "model": model.id, "runtime": "llama.cpp", "node": node.id}
    mutation_id = secrets.token_hex(16)

    async def create() -> dict[str, Any]:
        return await pair.requester.remote.request(
            OWNER,
            "default",
            peer_id,
            operation="inference.create",
            body={"spec": spec},
            mutation_id=mutation_id,
        )

    first = await create()
    async with pair.grantor.uow_factory() as uow:
        [grant] = await uow.grants.in_project("default")
        receipt = await uow.receipts.get(grant_scope(grant.id), mutation_id)
        assert receipt is not None
        assert receipt.result is not None
        owner_view = {
            **receipt.result,
            "spec": {**receipt.result["spec"], "options": {"secret": "internal-name"}},
            "error": "engine said: /srv/models/x.gguf",
            "replicas": [
                {
                    "replica": 0,
                    "state": "failed",
                    "exit_code": 1,
                    "pid": 4242,
                    "port": 39999,
                    "log": ["secret line"],
                }
            ],
        }
        await uow.receipts.put(dataclasses.replace(receipt, result=owner_view))
        await uow.commit()
    replayed = await create()
    status = await pair.requester.remote.request(
        OWNER, "default", peer_id, operation="operation.status", body={"id": mutation_id}
    )
    for shown in (replayed["result"], status["result"]["result"]):
        text = json.dumps(shown)
        for secret in ("internal-name", "/srv/models", "4242", "39999", "secret line"):
            assert secret not in text
        assert shown["spec"] == first["result"]["spec"]
