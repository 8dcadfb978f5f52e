"""One invocation use case for the local URL and a peer's ``inference.invoke``, over fakes.

The grantor reads no record to invoke (the router holds the spec's runtime and options), encodes
a plain answer once (the encoding that measures ``response_bytes`` is the one sent), and counts
a stream's bytes as they go.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
import rfc8785
from hypothesis import given
from hypothesis import strategies as st
from tests.support.fakes.clock import FakeClock
from tests.support.fakes.inference import PROJECT, Bench, FakeRuntime, bench
from tests.support.fakes.unit_of_work import FakeUnitOfWork, FakeUnitOfWorkFactory

from ficc.base.errors import InvalidInput, LimitExceeded
from ficc.base.ids import new_id
from ficc.base.units import GiB, MiB
from ficc.domain import grants as g
from ficc.domain import peers as p
from ficc.domain.grants import GrantState
from ficc.domain.inference import RuntimeName, ServiceState
from ficc.domain.nodes import Gpu
from ficc.domain.openai_requests import CHAT_COMPLETIONS_PATH, COMPLETIONS_PATH
from ficc.domain.openai_responses import RESPONSES_PATH
from ficc.domain.peers import PeerRole, PeerState
from ficc.protocol import canonical, messages
from ficc.protocol.answers import encode_answer
from ficc.services.grant_slots import Slot
from ficc.services.metering import Meter
from ficc.services.ports.peers import EncodedAnswer, PeerIdentity
from ficc.services.remote.call import Call
from ficc.services.remote.inference_ops import InferenceOperations

NOW = datetime(2026, 1, 1, tzinfo=UTC)
IDENTITY = PeerIdentity("a" * 64, b"k" * 32, 7)


async def running(b: Bench) -> str:
    await b.add_node()
    model = await b.add_model(MiB)
    service = await b.create(model)
    await b.control(service["id"], "start")
    await b.until(lambda: b.service(service["id"]).state is ServiceState.RUNNING)
    return str(service["id"])


def invoke_call(service_id: str, body: dict[str, Any], **terms: Any) -> Call:
    grant = g.Grant(
        id=new_id("grant", b"g" * 16),
        project=PROJECT,
        peer_id=new_id("peer", b"p" * 16),
        terms=g.parse_grant({"scopes": ["inference:invoke"], "services": [service_id], **terms}),
        state=GrantState.ACTIVE,
        created_at=NOW,
        expires_at=NOW,
        revoked_at=None,
        requests_used=0,
        transfer_bytes_used=0,
    )
    peer = p.Peer(
        id=grant.peer_id,
        project=PROJECT,
        label=None,
        hypernet_id=IDENTITY.hypernet_id,
        cluster_key="",
        state=PeerState.PAIRED,
        generation=7,
        role=PeerRole.SERVICE,
        offer_id=None,
        selected_grant=None,
        ticket=None,
        created_at=NOW,
        updated_at=NOW,
    )
    invocation = {"service": service_id, "path": COMPLETIONS_PATH, "body": body}
    return Call(IDENTITY, peer, grant, "inference.invoke", invocation, None, Slot())


@pytest.fixture
def transactions(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every unit of work the fakes open from now on."""
    opened: list[int] = []
    real = FakeUnitOfWorkFactory.__call__

    def counting(self: FakeUnitOfWorkFactory) -> FakeUnitOfWork:
        opened.append(1)
        uow: FakeUnitOfWork = real(self)
        return uow

    monkeypatch.setattr(FakeUnitOfWorkFactory, "__call__", counting)
    return opened


async def test_the_grantor_invokes_a_running_service_with_one_transaction_its_usage_record(
    tmp_path: Path, transactions: list[int]
) -> None:
    """The grantor's third transaction (the service's record read for its runtime and options)
    is gone: the router holds both for as long as the service is admitted. What is left is the
    request's usage record, written once the answer is complete (a grant without token rules
    reserves nothing)."""
    b = bench(tmp_path)
    service_id = await running(b)
    factory = FakeUnitOfWorkFactory(b.store)
    operations = InferenceOperations(factory, b.services, Meter(factory, FakeClock()))
    transactions.clear()
    answer = await operations.invoke(invoke_call(service_id, {"model": "m", "prompt": "x"}))
    assert transactions == [1]
    assert isinstance(answer, EncodedAnswer)
    assert json.loads(answer.content)["text"] == "hello"


async def test_a_local_and_a_peers_plain_answer_are_the_same_answer(tmp_path: Path) -> None:
    b = bench(tmp_path)
    service_id = await running(b)
    body = {"model": service_id, "prompt": "x"}
    local = await b.services.invocations.complete(PROJECT, service_id, COMPLETIONS_PATH, body)
    remote = await b.services.invocations.encoded(
        PROJECT, service_id, COMPLETIONS_PATH, body, max_bytes=MiB
    )
    assert json.loads(remote) == {**local, "id": json.loads(remote)["id"]}
    assert remote == canonical.canonical_json(json.loads(remote))


async def test_response_bytes_counts_the_plain_answer_exactly_as_the_caller_receives_it(
    tmp_path: Path,
) -> None:
    """The caller's compatible URL sends compact JSON with ASCII escapes: "é" is six bytes
    there (two on the wire), and the limit counts those six."""
    b = bench(tmp_path)
    service_id = await running(b)
    b.engine.chunks = ["é" * 40]
    body = {"model": "m", "prompt": "x"}
    invocations = b.services.invocations
    content = await invocations.encoded(PROJECT, service_id, COMPLETIONS_PATH, body, max_bytes=MiB)
    size = len(json.dumps(json.loads(content), separators=(",", ":")))
    assert size == len(content) + 4 * 40
    await invocations.encoded(PROJECT, service_id, COMPLETIONS_PATH, body, max_bytes=size)
    with pytest.raises(LimitExceeded) as over:
        await invocations.encoded(PROJECT, service_id, COMPLETIONS_PATH, body, max_bytes=size - 1)
    assert over.value.details == {"limit": "response_bytes", "allowed": size - 1}
    assert f"the response is {size} bytes" in over.value.message


async def test_a_stream_is_counted_while_it_goes_and_ends_with_an_error_event_past_its_bound(
    tmp_path: Path,
) -> None:
    b = bench(tmp_path)
    service_id = await running(b)
    b.engine.chunks = ['{"n":1}', '{"n":2}', '{"n":3}']
    body = {"model": "m", "prompt": "x", "stream": True}
    one = len(b'data: {"n":1}\n\n')
    async with b.services.invocations.stream(
        PROJECT, service_id, COMPLETIONS_PATH, body, max_bytes=2 * one
    ) as chunks:
        sent = [chunk async for chunk in chunks]
    assert sent[:2] == [b'data: {"n":1}\n\n', b'data: {"n":2}\n\n']
    error = json.loads(sent[2].removeprefix(b"data: "))["error"]
    assert error["details"] == {"limit": "response_bytes", "allowed": 2 * one}
    assert len(sent) == 3
    assert b.engine.streams[-1].closed.is_set()


async def test_a_request_the_runtime_would_not_honour_is_refused_before_the_engine(
    tmp_path: Path,
) -> None:
    b = bench(tmp_path)
    service_id = await running(b)
    with pytest.raises(InvalidInput) as refused:
        await b.services.invocations.complete(
            PROJECT, service_id, COMPLETIONS_PATH, {"model": "m", "prompt": "x", "n": 2}
        )
    assert refused.value.details["field"] == "n"
    assert b.engine.calls == []


async def test_the_grantor_encodes_a_plain_answer_once_on_its_way_to_the_wire(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From the engine's answer to the frame: one JSON encoding, which also measured it
    against response_bytes (there were three: a measure, the frame's measure, the frame)."""
    b = bench(tmp_path)
    service_id = await running(b)
    factory = FakeUnitOfWorkFactory(b.store)
    operations = InferenceOperations(factory, b.services, Meter(factory, FakeClock()))
    encodes: list[str] = []
    encode, dumps = json.JSONEncoder.encode, rfc8785.dumps
    fast = orjson.dumps

    def counting(self: json.JSONEncoder, value: Any) -> str:
        encodes.append("json")
        return encode(self, value)

    def counting_rfc8785(value: Any) -> bytes:
        encodes.append("rfc8785")
        return dumps(value)

    def counting_orjson(value: Any, **options: Any) -> bytes:
        encodes.append("json")
        return fast(value, **options)

    # json.dumps ends in JSONEncoder.encode; the canonical encoder's fast path is orjson's.
    monkeypatch.setattr(json.JSONEncoder, "encode", counting)
    monkeypatch.setattr(rfc8785, "dumps", counting_rfc8785)
    monkeypatch.setattr(orjson, "dumps", counting_orjson)
    call = invoke_call(service_id, {"model": "m", "prompt": "x"})
    answer = await operations.invoke(call)
    content = answer.content if isinstance(answer, EncodedAnswer) else answer
    framed, chunked = encode_answer(content)
    # The answer once; the grantor's counts (told beside it, a few bytes) once.
    assert encodes == ["json", "json"]
    assert not chunked
    assert json.loads(framed[5:])["text"] == "hello"


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-canonical.MAX_SAFE_INTEGER, canonical.MAX_SAFE_INTEGER)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(exclude_categories=("Cs",))),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(st.characters(exclude_categories=("Cs",))), inner, max_size=4)
    ),
    max_leaves=20,
)


@given(JSON_VALUES, st.booleans())
def test_the_compact_size_told_from_the_canonical_bytes_is_json_dumps_size(
    value: Any, gradual: bool
) -> None:
    content, size = canonical.canonical_json_and_compact_size(value, gradual=gradual)
    assert content == canonical.canonical_json(value)
    assert size == len(json.dumps(value, separators=(",", ":")).encode())


def test_a_members_size_is_told_from_its_objects_size_without_encoding_it() -> None:
    for doc in (
        {"body": {"a": ["é", 1.5, None]}, "grant": "grant_x", "mutation_id": "0" * 32},
        {"body": {}},
        {"body": "x", "body_bytes": 3, "operation": "discover"},
    ):
        size = len(canonical.canonical_json(doc))
        assert canonical.first_member_bytes(size, doc, "body") == len(
            canonical.canonical_json(doc["body"])
        )
    with pytest.raises(ValueError, match="not the first key"):
        canonical.first_member_bytes(10, {"a": 1, "body": 2}, "body")


PLAIN_TEXT = st.text(st.characters(min_codepoint=0, max_codepoint=0x7F), max_size=12)


@given(
    JSON_VALUES,
    st.dictionaries(
        PLAIN_TEXT.filter(lambda name: name > "body"),
        PLAIN_TEXT | st.integers(-(2**60), 2**60) | JSON_VALUES,
        max_size=4,
    ),
)
def test_a_members_size_told_from_its_envelope_is_its_encodings_size(
    body: Any, rest: dict[str, Any]
) -> None:
    """Whatever stands beside the body (IDs counted without encoding them, anything else
    encoded), the body's size is its own encoding's."""
    doc = {"body": body, **rest}
    try:
        size = len(canonical.canonical_json(doc))
    except ValueError:
        return  # not JSON the wire carries (an integer past 2**53)
    assert canonical.first_member_bytes(size, doc, "body") == len(canonical.canonical_json(body))


def test_a_received_request_knows_its_bodys_size_as_it_travelled() -> None:
    body = {"body": {"prompt": "é" * 10}, "grant": "grant_x"}
    sent = messages.Request(1, b"s" * 64, "inference.invoke", body, request_id="r1")
    received = messages.decode_message(messages.encode_message(sent))
    assert isinstance(received, messages.Request)
    assert received.body_bytes == len(canonical.canonical_json(body))
    assert dataclasses.replace(received, body_bytes=0) == received  # not part of its identity


def _chat_chunk(content: str, finish: str | None = None) -> str:
    choice = {"index": 0, "delta": {"content": content}, "finish_reason": finish}
    return json.dumps({"id": "chatcmpl-r1", "created": 1700, "model": "m", "choices": [choice]})


async def test_a_responses_stream_is_the_chat_stream_as_typed_events_counted_against_the_bound(
    tmp_path: Path,
) -> None:
    """llama.cpp has no Responses API: the engine is sent the chat request that answers it,
    and its chunks come back as OpenAI's typed events, bounded by ``max_bytes`` like any."""
    b = bench(tmp_path)
    service_id = await running(b)
    b.engine.chunks = [_chat_chunk("Hel"), _chat_chunk("lo", "stop")]
    body = {"model": "m", "input": "Hi", "instructions": "Be brief.", "stream": True}
    invocations = b.services.invocations
    async with invocations.stream(PROJECT, service_id, RESPONSES_PATH, body) as chunks:
        sent = [chunk async for chunk in chunks]
    path, chat = b.engine.requests[-1]
    assert path == CHAT_COMPLETIONS_PATH
    assert chat["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
    ]
    assert chat["stream_options"] == {"include_usage": True}
    frames = b"".join(sent).removesuffix(b"\n\n").split(b"\n\n")
    kinds = [frame.split(b"\n")[0].removeprefix(b"event: ").decode() for frame in frames]
    assert kinds[0] == "response.created"
    assert kinds[-1] == "response.completed"
    assert kinds.count("response.output_text.delta") == 2
    # The events of one engine chunk go on as one piece: three chunks, three pieces.
    assert len(sent) == 3
    last = json.loads(frames[-1].split(b"\n")[1].removeprefix(b"data: "))
    assert last["response"]["output"][0]["content"][0]["text"] == "Hello"
    bound = len(sent[0]) + len(sent[1])
    async with invocations.stream(
        PROJECT, service_id, RESPONSES_PATH, body, max_bytes=bound
    ) as chunks:
        cut = [chunk async for chunk in chunks]
    assert cut[:2] == sent[:2]
    assert json.loads(cut[2].removeprefix(b"data: "))["error"]["code"] == "limit_exceeded"
    assert len(cut) == 3
    assert b.engine.streams[-1].closed.is_set()


async def test_a_plain_responses_answer_is_a_response_object_and_statefulness_is_refused(
    tmp_path: Path,
) -> None:
    b = bench(tmp_path)
    service_id = await running(b)
    invocations = b.services.invocations
    b.engine.chunks = ["ok"]
    answer = await invocations.encoded(
        PROJECT, service_id, RESPONSES_PATH, {"input": "Hi", "max_output_tokens": 4}, max_bytes=MiB
    )
    response = json.loads(answer)
    assert response["object"] == "response"
    assert response["store"] is False
    assert b.engine.requests[-1][0] == CHAT_COMPLETIONS_PATH
    assert b.engine.requests[-1][1]["max_tokens"] == 4
    before = len(b.engine.calls)
    for param, value in (("store", True), ("previous_response_id", "resp_1")):
        with pytest.raises(InvalidInput) as refused:
            await invocations.complete(
                PROJECT, service_id, RESPONSES_PATH, {"input": "Hi", param: value}
            )
        assert refused.value.details["field"] == param
    assert len(b.engine.calls) == before


async def test_a_responses_request_to_vllm_is_passed_through_with_its_events_named(
    tmp_path: Path,
) -> None:
    b = bench(tmp_path, runtime=FakeRuntime(RuntimeName.VLLM))
    node = await b.add_node()
    b.store.nodes[node.id] = dataclasses.replace(node, gpus=(Gpu(0, "gpu", 80 * GiB, 0),))
    model = await b.add_model(MiB)
    service = await b.create(model, runtime="vllm")
    await b.control(service["id"], "start")
    await b.until(lambda: b.service(service["id"]).state is ServiceState.RUNNING)
    event = {"type": "response.created", "sequence_number": 0, "response": {}}
    b.engine.chunks = [json.dumps(event)]
    body = {"input": "Hi", "stream": True}
    async with b.services.invocations.stream(
        PROJECT, service["id"], RESPONSES_PATH, body
    ) as chunks:
        sent = [chunk async for chunk in chunks]
    assert b.engine.requests[-1] == (RESPONSES_PATH, body)
    assert sent[0] == b"event: response.created\ndata: " + json.dumps(event).encode() + b"\n\n"
