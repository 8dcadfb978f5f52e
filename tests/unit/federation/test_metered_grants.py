"""Metered grants between two in-process clusters: both sides record each request alike (the
same request ID), the grantor tells its counts at the end of every answer, and the requester
sees what remains in its copy of the grant and in OpenAI's rate-limit headers."""

from __future__ import annotations

import asyncio
import hashlib
import secrets
from typing import Any

import pytest
from tests.support.fakes.inference import OWNER as ACTOR
from tests.support.fakes.inference import FakeEngine
from tests.support.fakes.peer_channel import OWNER, Pair, paired

from ficc.adapters import metrics
from ficc.base.errors import GrantRevoked, InvalidInput, LimitExceeded
from ficc.base.ids import new_id
from ficc.base.request_ids import current_request_id
from ficc.base.units import GiB
from ficc.domain.catalogue import CatalogueModel
from ficc.domain.inference import ServiceState
from ficc.domain.manifests import build_manifest
from ficc.domain.nodes import Node
from ficc.domain.openai_requests import COMPLETIONS_PATH

BOTH_KNOW = (
    "request",
    "grant",
    "operation",
    "service",
    "prompt_tokens",
    "completion_tokens",
    "request_bytes",
    "outcome",
)
"""The fields of a usage record both sides know (times and response bytes are each side's)."""


async def running_service(pair: Pair) -> str:
    """A running fake service on the grantor (a node, a stored model, started)."""
    store = pair.grantor.uow_factory.store  # type: ignore[attr-defined]
    node = Node(
        id=new_id("node", secrets.token_bytes(16)),
        name="n",
        cpu_count=8,
        memory_bytes=16 * GiB,
        memory_available_bytes=16 * GiB,
        gpus=(),
        is_local=True,
        updated_at=pair.clock(),
    )
    store.nodes[node.id] = node
    data = b"gguf"
    digest = hashlib.sha256(data).hexdigest()
    path = pair.grantor.blobs._address(digest)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    manifest = build_manifest("tiny", "gguf", [("tiny.gguf", len(data), digest)], {})
    model = CatalogueModel.of_manifest(
        new_id("model", secrets.token_bytes(16)), "default", manifest, pair.clock()
    )
    store.models[model.id] = model
    store.blob_refs.add(("default", digest))
    commands = pair.grantor.inference.commands
    view, _ = await commands.create_service(
        ACTOR, "default", {"name": "svc", "model": model.id, "runtime": "llama.cpp"}
    )
    service_id = str(view["id"])
    revision = store.services[service_id].revision
    await commands.control_service(
        ACTOR, "default", service_id, revision=revision, operation="start"
    )
    for _ in range(1000):
        if store.services[service_id].state is ServiceState.RUNNING:
            return service_id
        await asyncio.sleep(0)
    raise AssertionError("the service never ran")


def engine_of(pair: Pair) -> FakeEngine:
    engine = pair.grantor.inference.router.engines
    assert isinstance(engine, FakeEngine)
    return engine


async def metered(pair: Pair, **terms: Any) -> tuple[str, str, str]:
    """A running service and a pairing whose grant publishes it with ``terms``: the
    service, the requester's peer and the grant."""
    service_id = await running_service(pair)
    grant = {"scopes": ["inference:invoke"], "services": [service_id], **terms}
    finished = await paired(pair, grant)
    return service_id, finished.peer.id, finished.peer.selected


def invocation(service_id: str, **body: Any) -> dict[str, Any]:
    return {
        "service": service_id,
        "path": COMPLETIONS_PATH,
        "body": {"model": service_id, "prompt": "one two three", **body},
    }


async def usage_of(pair: Pair, grant_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
    grantor = await pair.grantor.federation.usage.usage(OWNER, "default", grant_id)
    requester = await pair.requester.federation.usage.usage(OWNER, "default", grant_id)
    return grantor, requester


def agreeing(grantor: dict[str, Any], requester: dict[str, Any]) -> list[tuple[Any, ...]]:
    mine = [tuple(r[k] for k in BOTH_KNOW) for r in grantor["records"]]
    theirs = [tuple(r[k] for k in BOTH_KNOW) for r in requester["records"]]
    assert mine == theirs
    return mine


async def test_both_sides_record_a_plain_answer_alike_and_the_requester_is_told_the_counts(
    pair: Pair,
) -> None:
    service_id, peer_id, grant_id = await metered(pair, tokens=100)
    current_request_id.set("req-plain-1")
    await pair.requester.remote.request(
        OWNER, "default", peer_id, operation="inference.invoke", body=invocation(service_id)
    )
    grantor, requester = await usage_of(pair, grant_id)
    [row] = agreeing(grantor, requester)
    assert row[0] == "req-plain-1"
    assert row[-1] == "completed"
    # Three prompt tokens by the engine's tokenizer; the fake's answer has no usage.
    assert (row[4], row[5]) == (3, 0)
    assert (grantor["side"], requester["side"]) == ("grantor", "requester")
    assert grantor["totals"]["prompt_tokens"] == 3
    assert [h["requests"] for h in grantor["totals"]["days"]] == [1]
    assert "counted" in requester["records"][0]
    assert pair.requester.remote.told[grant_id]["remaining"]["tokens"] == 97


async def test_a_stream_ends_with_the_grantors_counts_which_the_requester_takes_off(
    pair: Pair,
) -> None:
    service_id, peer_id, grant_id = await metered(pair, tokens=100)
    engine_of(pair).chunks = ["role", "a", "b"]
    current_request_id.set("req-stream-1")
    async with pair.requester.remote.open_stream(
        OWNER,
        "default",
        peer_id,
        operation="inference.invoke",
        body=invocation(service_id, stream=True),
    ) as chunks:
        received = [chunk async for chunk in chunks]
    assert not any(b"ficc.usage" in chunk for chunk in received)
    assert received[-1] == b"data: [DONE]\n\n"
    grantor, requester = await usage_of(pair, grant_id)
    [row] = agreeing(grantor, requester)
    assert (row[0], row[-1], row[5]) == ("req-stream-1", "completed", 2)
    assert requester["records"][0]["counted"] == {"prompt_tokens": None, "completion_tokens": 2}


async def test_a_refused_request_is_recorded_refused_on_both_sides_before_any_engine_work(
    pair: Pair,
) -> None:
    service_id, peer_id, grant_id = await metered(pair, tokens=3)
    before = len(engine_of(pair).requests)
    current_request_id.set("req-refused-1")
    with pytest.raises(LimitExceeded) as refused:
        await pair.requester.remote.request(
            OWNER, "default", peer_id, operation="inference.invoke", body=invocation(service_id)
        )
    assert refused.value.details["limit"] == "tokens"
    assert len(engine_of(pair).requests) == before
    grantor, requester = await usage_of(pair, grant_id)
    [row] = agreeing(grantor, requester)
    assert (row[0], row[-1], row[4], row[5]) == ("req-refused-1", "refused", 0, 0)


async def test_requests_per_minute_refuses_with_retry_after_then_admits_after_the_window(
    pair: Pair,
) -> None:
    service_id, peer_id, grant_id = await metered(pair, requests_per_minute=1)

    async def ask() -> None:
        await pair.requester.remote.request(
            OWNER, "default", peer_id, operation="inference.invoke", body=invocation(service_id)
        )

    await ask()
    pair.clock.advance(15)
    with pytest.raises(LimitExceeded) as refused:
        await ask()
    assert refused.value.details["limit"] == "requests_per_minute"
    assert refused.value.details["retry_after_seconds"] == 45
    pair.clock.advance(45)
    await ask()
    grantor, requester = await usage_of(pair, grant_id)
    assert [r[-1] for r in agreeing(grantor, requester)] == ["completed", "refused", "completed"]


async def test_the_requester_sees_what_remains_in_its_copy_and_in_openais_headers(
    pair: Pair,
) -> None:
    service_id, peer_id, grant_id = await metered(pair, tokens=100, tokens_per_minute=40)
    await pair.requester.remote.request(
        OWNER,
        "default",
        peer_id,
        operation="inference.invoke",
        body=invocation(service_id, max_tokens=5),
    )
    headers = pair.requester.remote.rate_limits(peer_id)
    assert headers["x-ratelimit-limit-tokens"] == "40"
    assert headers["x-ratelimit-remaining-tokens"] == "37"
    assert headers["x-ratelimit-reset-tokens"] == "1m0s"
    assert headers["x-ratelimit-limit-requests"] == "1000"
    assert headers["x-ratelimit-remaining-requests"] == "999"
    refreshed = await pair.requester.federation.grants.refresh(
        OWNER, "default", peer_id, grant=None
    )
    [copied] = [g for g in refreshed.remote_grants if g.id == grant_id]
    copy: dict[str, Any] = copied.to_json()
    assert copy["tokens"] == 100
    assert copy["remaining"]["tokens"] == 97
    assert copy["used"]["prompt_tokens"] == 3
    assert copy["windows"]["tokens_per_minute"]["used"] == 3
    overview = await pair.grantor.federation.overview.overview("default")
    [given] = [g for g in overview.grants if g.id == grant_id]
    assert (given.terms.tokens_per_minute, given.terms.requests_per_minute) == (40, None)
    assert given.remaining["tokens"] == 97


async def test_a_grant_without_metered_limits_answers_as_before(pair: Pair) -> None:
    service_id, peer_id, grant_id = await metered(pair)
    answer = await pair.requester.remote.request(
        OWNER, "default", peer_id, operation="inference.invoke", body=invocation(service_id)
    )
    assert set(answer) == {"operation", "mutation_id", "replayed", "result"}
    _, sent = engine_of(pair).requests[-1]
    assert "max_tokens" not in sent
    headers = pair.requester.remote.rate_limits(peer_id)
    assert "x-ratelimit-limit-tokens" not in headers
    grantor, _ = await usage_of(pair, grant_id)
    assert grantor["records"][0]["outcome"] == "completed"


async def test_usage_pages_and_filters_and_refuses_bad_input_naming_the_field(
    pair: Pair,
) -> None:
    service_id, peer_id, grant_id = await metered(pair)
    for _ in range(3):
        await pair.requester.remote.request(
            OWNER, "default", peer_id, operation="inference.invoke", body=invocation(service_id)
        )
    usage = pair.grantor.federation.usage
    first = await usage.usage(OWNER, "default", grant_id, limit=2)
    assert len(first["records"]) == 2
    assert first["next"] is not None
    rest = await usage.usage(OWNER, "default", grant_id, after=first["next"])
    assert len(rest["records"]) == 1
    assert rest["next"] is None
    assert rest["totals"]["requests"] == 3
    later = await usage.usage(OWNER, "default", grant_id, since="2999-01-01T00:00:00Z")
    assert later["records"] == []
    for field, kwargs in (("since", {"since": "yesterday"}), ("after", {"after": "x"})):
        with pytest.raises(InvalidInput) as bad:
            await usage.usage(OWNER, "default", grant_id, **kwargs)
        assert bad.value.details["field"] == field


async def test_a_refused_stream_is_recorded_on_both_sides_and_a_left_one_as_cancelled(
    pair: Pair,
) -> None:
    service_id, peer_id, grant_id = await metered(pair, tokens=3)
    current_request_id.set("req-refused-stream")
    with pytest.raises(LimitExceeded):
        async with pair.requester.remote.open_stream(
            OWNER,
            "default",
            peer_id,
            operation="inference.invoke",
            body=invocation(service_id, stream=True),
        ) as chunks:
            [_ async for _ in chunks]
    grantor, requester = await usage_of(pair, grant_id)
    [row] = agreeing(grantor, requester)
    assert (row[0], row[-1]) == ("req-refused-stream", "refused")


async def test_a_stream_the_caller_leaves_is_recorded_cancelled_by_the_requester(
    pair: Pair,
) -> None:
    service_id, peer_id, grant_id = await metered(pair, tokens=1000)
    engine_of(pair).chunks = ["role", "a", "b", "c"]
    async with pair.requester.remote.open_stream(
        OWNER,
        "default",
        peer_id,
        operation="inference.invoke",
        body=invocation(service_id, stream=True),
    ) as chunks:
        await anext(chunks)
    _, requester = await usage_of(pair, grant_id)
    assert [r["outcome"] for r in requester["records"]] == ["cancelled"]


async def test_a_stream_ended_by_an_error_its_caller_relays_is_recorded_by_that_error(
    pair: Pair,
) -> None:
    """The web relay turns a stream's error into an error event and leaves the block without
    one: the record still says why the stream ended."""
    service_id, peer_id, grant_id = await metered(pair, tokens=1000)
    engine_of(pair).chunks = ["role", "a", "b", "c"]
    async with pair.requester.remote.open_stream(
        OWNER,
        "default",
        peer_id,
        operation="inference.invoke",
        body=invocation(service_id, stream=True),
    ) as chunks:
        await anext(chunks)
        revoked = await pair.grantor.federation.grants.revoke_grant(OWNER, "default", grant_id)
        assert revoked.grant.state == "revoked"
        with pytest.raises(GrantRevoked):
            [_ async for _ in chunks]
    grantor, requester = await usage_of(pair, grant_id)
    assert [r["outcome"] for r in requester["records"]] == ["revoked"]
    assert [r["outcome"] for r in grantor["records"]] == ["revoked"]


async def test_each_side_counts_its_settled_tokens_in_the_metrics(pair: Pair) -> None:
    service_id, peer_id, _ = await metered(pair, tokens=100)

    def count(direction: str) -> float:
        value = metrics.REGISTRY.get_sample_value(
            "ficc_federation_tokens_total",
            {"direction": direction, "operation": "inference.invoke", "kind": "prompt"},
        )
        return value or 0.0

    before = (count("in"), count("out"))
    await pair.requester.remote.request(
        OWNER, "default", peer_id, operation="inference.invoke", body=invocation(service_id)
    )
    assert (count("in") - before[0], count("out") - before[1]) == (3, 3)
