"""Metered grants in the fast tier: reserve, then settle; the windows; records; bad input.

The grantor's invocation over fakes (a running fake service, the fake engine counting one
token per word of a prompt, the dict-backed store, a clock moved by hand).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from tests.support.fakes.clock import FakeClock
from tests.support.fakes.inference import Bench, bench
from tests.support.fakes.unit_of_work import FakeUnitOfWorkFactory
from tests.unit.services.test_invocation import invoke_call, running

from ficc.base.errors import GrantRevoked, InvalidInput, LimitExceeded
from ficc.base.request_ids import current_request_id
from ficc.domain import grants as g
from ficc.domain import metering as m
from ficc.domain.openai_requests import CHAT_COMPLETIONS_PATH, COMPLETIONS_PATH, EMBEDDINGS_PATH
from ficc.domain.openai_responses import RESPONSES_PATH
from ficc.services.metering import Meter, parse_usage_event, split_usage_event, usage_event
from ficc.services.ports.peers import EncodedAnswer, end_request
from ficc.services.remote.call import Call
from ficc.services.remote.inference_ops import InferenceOperations

PROMPT = "one two three four"
"""Four tokens by the fake engine's count (a completion adds no template)."""


class Grantor:
    """A running fake service, a grant in the store, and the grantor's inference operations."""

    def __init__(self, b: Bench, service_id: str, clock: FakeClock, **terms: Any) -> None:
        self.b = b
        self.service_id = service_id
        self.clock = clock
        factory = FakeUnitOfWorkFactory(b.store)
        self.meter = Meter(factory, clock)
        self.ops = InferenceOperations(factory, b.services, self.meter)
        call = invoke_call(service_id, {})
        self.grant = replace(
            call.grant,
            terms=g.parse_grant(
                {
                    "scopes": ["inference:invoke"],
                    "services": [service_id],
                    "requests": 1000,
                    **terms,
                }
            ),
        )
        b.store.grants[self.grant.id] = self.grant

    def call(self, **body: Any) -> Call:
        call = invoke_call(self.service_id, {"model": "m", "prompt": PROMPT, **body})
        return replace(call, grant=self.grant)

    def stored(self) -> g.Grant:
        return self.b.store.grants[self.grant.id]

    def records(self) -> list[m.UsageRecord]:
        return [r for r in self.b.store.usage if r.grant == self.grant.id]


async def grantor(tmp_path: Path, **terms: Any) -> Grantor:
    clock = FakeClock()
    b = bench(tmp_path, clock=clock)
    return Grantor(b, await running(b), clock, **terms)


async def drain(chunks: Any) -> list[bytes]:
    return [chunk async for chunk in chunks]


# --- grant terms --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value", "rule"),
    [
        ("tokens", 0, "between 1 and 1000000000000"),
        ("tokens", 10**12 + 1, "between 1 and 1000000000000"),
        ("tokens_per_minute", 10**9 + 1, "between 1 and 1000000000"),
        ("requests_per_minute", 10**6 + 1, "between 1 and 1000000"),
        ("requests_per_minute", 0, "between 1 and 1000000"),
        ("tokens", "5", "must be an integer"),
        ("tokens_per_minute", 2.5, "must be an integer"),
        ("requests_per_minute", True, "must be an integer"),
    ],
)
def test_a_metered_limit_out_of_its_bounds_is_refused_naming_the_field_and_the_rule(
    field: str, value: object, rule: str
) -> None:
    with pytest.raises(InvalidInput) as refused:
        g.parse_grant({"scopes": ["inference:invoke"], field: value})
    assert refused.value.details["field"] == f"grant.{field}"
    assert rule in refused.value.message


def test_a_grant_without_metered_limits_keeps_its_terms_byte_for_byte() -> None:
    """Receipts of grants given before metering keep their digests: an unset limit is not
    written; views name it null."""
    plain = g.parse_grant({"scopes": ["discover"], "tokens": None})
    assert not set(plain.to_json()) & set(g.METERED_FIELDS)
    assert {k: plain.view_json()[k] for k in g.METERED_FIELDS} == dict.fromkeys(g.METERED_FIELDS)
    metered = g.parse_grant(
        {"scopes": ["discover"], "tokens": 10**12, "tokens_per_minute": 1, "requests_per_minute": 1}
    )
    assert g.parse_grant(metered.to_json()) == metered
    assert metered.to_json()["tokens"] == 10**12


# --- reserve, then settle -------------------------------------------------------------------


async def test_the_completion_is_capped_to_what_the_budget_leaves_and_settles_to_the_truth(
    tmp_path: Path,
) -> None:
    grantor_ = await grantor(tmp_path, tokens=10)
    answer = await grantor_.ops.invoke(grantor_.call(max_tokens=50))
    # Four prompt tokens reserved with the six the budget leaves, not the fifty asked.
    _, sent = grantor_.b.engine.requests[-1]
    assert sent["max_tokens"] == 6
    assert isinstance(answer, EncodedAnswer)
    assert answer.usage is not None
    told = json.loads(answer.usage)
    # The fake engine's plain answer carries no usage: the prompt's count stands.
    assert (told["prompt_tokens"], told["completion_tokens"]) == (4, 0)
    assert told["remaining"]["tokens"] == 6
    stored = grantor_.stored()
    assert (stored.tokens_reserved, stored.tokens_used) == (0, 4)
    [record] = grantor_.records()
    assert (record.outcome, record.prompt_tokens, record.side) == ("completed", 4, "grantor")


async def test_a_request_the_budget_cannot_hold_is_refused_before_any_engine_work(
    tmp_path: Path,
) -> None:
    grantor_ = await grantor(tmp_path, tokens=4)
    before = len(grantor_.b.engine.requests)
    with pytest.raises(LimitExceeded) as refused:
        await grantor_.ops.invoke(grantor_.call())
    assert refused.value.details["limit"] == "tokens"
    assert len(grantor_.b.engine.requests) == before
    assert grantor_.stored().tokens_reserved == 0
    [record] = grantor_.records()
    assert (record.outcome, record.prompt_tokens, record.completion_tokens) == ("refused", 0, 0)


async def test_concurrent_streams_never_take_a_grant_past_its_budget(tmp_path: Path) -> None:
    """Eight streams at once against 30 tokens: each reserves its prompt and what is left,
    the reservations never sum past the budget, and neither do the settled counts."""
    grantor_ = await grantor(tmp_path, tokens=30)
    grantor_.b.engine.chunks = ["a", "b", "c", "d", "e", "f", "g", "h", "i"]
    admitted: list[int] = []
    refused: list[str] = []

    async def one() -> None:
        try:
            chunks = await drain(grantor_.ops.invoke_stream(grantor_.call(stream=True)))
        except LimitExceeded as exc:
            refused.append(exc.details["limit"])
            return
        admitted.append(len(chunks))

    await asyncio.gather(*(one() for _ in range(8)))
    assert admitted
    assert refused
    assert set(refused) == {"tokens"}
    stored = grantor_.stored()
    assert stored.tokens_reserved == 0
    assert stored.tokens_used <= 30
    assert sum(r.prompt_tokens + r.completion_tokens for r in grantor_.records()) <= 30


async def test_a_stream_ends_with_the_grantors_counts_and_hides_the_usage_nobody_asked_for(
    tmp_path: Path,
) -> None:
    grantor_ = await grantor(tmp_path, tokens=1000)
    usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    grantor_.b.engine.chunks = [
        '{"choices":[{"text":""}]}',
        '{"choices":[{"text":"x"}]}',
        '{"choices":[{"text":"y"}]}',
        json.dumps({"choices": [], "usage": usage}),
    ]
    chunks = await drain(grantor_.ops.invoke_stream(grantor_.call(stream=True)))
    told = parse_usage_event(chunks[-1])
    assert told is not None
    assert (told["prompt_tokens"], told["completion_tokens"]) == (3, 2)
    assert not any(b'"usage"' in chunk for chunk in chunks[:-1])
    # The engine was asked for its usage chunk, though the caller did not ask.
    _, sent = grantor_.b.engine.requests[-1]
    assert sent["stream_options"] == {"include_usage": True}
    [record] = grantor_.records()
    assert (record.prompt_tokens, record.completion_tokens) == (3, 2)


async def test_a_cancelled_stream_settles_to_the_tokens_it_sent(tmp_path: Path) -> None:
    grantor_ = await grantor(tmp_path, tokens=1000)
    grantor_.b.engine.chunks = ["role", "a", "b", "c", "d", "e"]
    stream = grantor_.ops.invoke_stream(grantor_.call(stream=True, max_tokens=20))
    received = [await anext(stream) for _ in range(3)]
    await stream.aclose()
    assert len(received) == 3
    [record] = grantor_.records()
    # Three chunks went out: the role, then two tokens.
    assert (record.outcome, record.prompt_tokens, record.completion_tokens) == (
        "cancelled",
        4,
        2,
    )
    stored = grantor_.stored()
    assert (stored.tokens_reserved, stored.tokens_used) == (0, 6)


async def test_a_revoked_stream_is_recorded_revoked_and_frees_its_reservation(
    tmp_path: Path,
) -> None:
    grantor_ = await grantor(tmp_path, tokens=1000)
    grantor_.b.engine.chunks = ["role", "a", "b"]
    call = grantor_.call(stream=True)
    got_one = asyncio.Event()

    async def serve() -> None:
        # Closed on exit, as the grant's slot closes what it serves.
        async with contextlib.aclosing(grantor_.ops.invoke_stream(call)) as chunks:
            async for _ in chunks:
                got_one.set()
                await asyncio.Event().wait()

    task = asyncio.create_task(serve())
    await got_one.wait()
    reason = GrantRevoked("the grant was revoked", details={"grant": grantor_.grant.id})
    call.slot.reason = reason
    end_request(task, reason)
    with contextlib.suppress(asyncio.CancelledError):
        await task
    [record] = grantor_.records()
    assert record.outcome == "revoked"
    assert grantor_.stored().tokens_reserved == 0


async def test_a_record_names_the_request_as_the_requester_named_it(tmp_path: Path) -> None:
    grantor_ = await grantor(tmp_path)
    current_request_id.set("req-42")
    await grantor_.ops.invoke(grantor_.call())
    [record] = grantor_.records()
    assert record.request == "req-42"
    assert record.service == grantor_.service_id
    assert record.operation == "inference.invoke"


# --- windows --------------------------------------------------------------------------------


async def test_tokens_per_minute_refuses_with_retry_after_then_admits_when_the_window_rolls(
    tmp_path: Path,
) -> None:
    grantor_ = await grantor(tmp_path, tokens_per_minute=10)
    await grantor_.ops.invoke(grantor_.call(max_tokens=6))  # settles to its 4 prompt tokens
    grantor_.clock.advance(20)
    seven = "a b c d e f g"
    with pytest.raises(LimitExceeded) as refused:
        await grantor_.ops.invoke(grantor_.call(prompt=seven))
    assert refused.value.details["limit"] == "tokens_per_minute"
    assert refused.value.details["retry_after_seconds"] == 40
    grantor_.clock.advance(timedelta(seconds=40))
    await grantor_.ops.invoke(grantor_.call(prompt=seven))
    _, sent = grantor_.b.engine.requests[-1]
    assert sent["max_tokens"] == 3
    assert [r.outcome for r in grantor_.records()] == ["completed", "refused", "completed"]


def test_requests_per_minute_refuses_the_next_request_until_the_oldest_leaves_the_window() -> None:
    clock = FakeClock()
    meter = Meter(FakeUnitOfWorkFactory(), clock)
    terms = g.parse_grant({"scopes": ["discover"], "requests_per_minute": 2})
    meter.hold_request(terms, "grt_a")
    clock.advance(10)
    meter.hold_request(terms, "grt_a")
    with pytest.raises(LimitExceeded) as refused:
        meter.hold_request(terms, "grt_a")
    assert refused.value.details == {
        "limit": "requests_per_minute",
        "allowed": 2,
        "retry_after_seconds": 50,
    }
    clock.advance(50)
    meter.hold_request(terms, "grt_a")
    # Another grant's window is its own.
    meter.hold_request(terms, "grt_b")


def test_a_window_released_after_a_refusal_takes_nothing() -> None:
    clock = FakeClock()
    meter = Meter(FakeUnitOfWorkFactory(), clock)
    terms = g.parse_grant({"scopes": ["discover"], "requests_per_minute": 1})
    entry = meter.hold_request(terms, "grt_a")
    meter.release_request("grt_a", entry)
    meter.hold_request(terms, "grt_a")


def test_settling_an_entry_that_left_the_window_leaves_an_equal_one_counted() -> None:
    """An entry is settled as itself, not by its value: one that left the window changes
    nothing, even while an entry of the same moment and amount is in it (a clock set back),
    and settling it is one check, not a search of the window."""
    window = m.RollingWindow()
    gone = window.add(100.0, 5)
    window.add(161.0, 1)
    assert window.total(161.0) == 1
    kept = window.add(100.0, 5)
    assert window.total(161.0) == 6
    window.adjust(gone, 0)
    assert window.total(161.0) == 6
    window.adjust(kept, 2)
    assert window.total(161.0) == 3


def test_the_settled_counts_never_pass_the_reservation() -> None:
    reservation = m.reserve(10, 5, allowance=20)
    assert reservation.tokens == 15
    # A prompt the estimate undercounted is charged at most what was reserved.
    assert m.settled(reservation, 14, 5) == (14, 1)
    assert m.settled(reservation, 30, 5) == (15, 0)
    with pytest.raises(LimitExceeded):
        m.reserve(10, None, allowance=10)
    assert m.reserve(3, None, allowance=10).completion_tokens == 7
    assert m.reserve(3, None, allowance=None).completion_tokens is None


async def test_the_worked_example_of_docs_metering_holds(tmp_path: Path) -> None:
    """docs/metering.md's example, step by step, with the numbers it gives."""
    grantor_ = await grantor(tmp_path, tokens=1000, tokens_per_minute=400, requests=100)
    engine = grantor_.b.engine
    twelve = " ".join(f"w{i}" for i in range(12))

    def chat(**body: Any) -> Call:
        call = grantor_.call()
        inner = {"model": "m", "messages": [{"role": "user", "content": twelve}], **body}
        return replace(call, body={**call.body, "path": CHAT_COMPLETIONS_PATH, "body": inner})

    called = asyncio.Event()

    async def answered(*_: Any, **__: Any) -> dict[str, Any]:
        called.set()
        await engine.release.wait()
        return {
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "x"}}],
            "usage": {"prompt_tokens": 31, "completion_tokens": 120, "total_tokens": 151},
        }

    engine.complete = answered  # type: ignore[method-assign]
    engine.release.clear()
    first = asyncio.create_task(grantor_.ops.invoke(chat(max_tokens=300)))
    await called.wait()
    # Steps 1 and 2: 12 + 64 + 8 = 84 prompt tokens and 300 of completion reserved.
    assert grantor_.stored().tokens_reserved == 384
    # Step 3: the window has 16 left.
    with pytest.raises(LimitExceeded) as refused:
        await grantor_.ops.invoke(chat(max_tokens=300))
    assert refused.value.details["limit"] == "tokens_per_minute"
    assert refused.value.details["retry_after_seconds"] == 60
    # Step 4: settled to the engine's 31 + 120.
    engine.release.set()
    told = json.loads((await first).usage or b"{}")
    assert (told["prompt_tokens"], told["completion_tokens"]) == (31, 120)
    assert told["remaining"]["tokens"] == 849
    assert told["windows"]["tokens_per_minute"]["remaining"] == 249
    # Step 5: a stream reserving 249 (165 of completion), left after 41 chunks.
    engine.chunks = [f"c{i}" for i in range(100)]
    stream = grantor_.ops.invoke_stream(chat(max_tokens=800, stream=True))
    for _ in range(41):
        await anext(stream)
    assert grantor_.b.engine.requests[-1][1]["max_tokens"] == 165
    await stream.aclose()  # type: ignore[attr-defined]
    records = grantor_.records()
    assert [(r.outcome, r.prompt_tokens, r.completion_tokens) for r in records] == [
        ("refused", 0, 0),
        ("completed", 31, 120),
        ("cancelled", 84, 40),
    ]
    assert grantor_.stored().remaining_tokens() == 725


def test_the_prompt_of_each_path_is_the_text_a_tokenizer_is_given() -> None:
    """Chat's messages (and tools), a completion's prompt, embeddings' and a Responses
    request's input: what is counted before the engine runs. Embeddings and completions add
    no template; chat adds 64 and 8 a message."""
    chat = {
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        ]
    }
    assert m.prompt_text(CHAT_COMPLETIONS_PATH, chat) == ("be brief\nhi", 2)
    assert m.template_allowance(CHAT_COMPLETIONS_PATH, 2) == 64 + 16
    assert m.prompt_text(COMPLETIONS_PATH, {"prompt": ["a b", "c"]}) == ("a b\nc", 2)
    assert m.template_allowance(COMPLETIONS_PATH, 2) == 0
    assert m.prompt_text(EMBEDDINGS_PATH, {"input": "some words"}) == ("some words", 1)
    assert m.template_allowance(EMBEDDINGS_PATH, 1) == 0
    responses = {"input": "question", "instructions": "answer it"}
    assert m.prompt_text(RESPONSES_PATH, responses) == ("question\nanswer it", 1)
    # Without a tokenizer: one token per UTF-8 byte, never below a byte-level count.
    assert m.estimated_tokens("héllo") == 6


def test_an_embeddings_request_reserves_its_input_and_no_completion() -> None:
    """Embeddings ask no completion (``max_tokens`` 0): they reserve their input alone, and
    fit exactly what is left; a chat needs one token of completion more."""
    reservation = m.reserve(7, 0, allowance=100)
    assert (reservation.tokens, reservation.completion_tokens) == (7, 0)
    assert m.reserve(7, 0, allowance=7).tokens == 7
    with pytest.raises(LimitExceeded) as refused:
        m.reserve(8, 0, allowance=7)
    assert refused.value.details == {"limit": "tokens", "needed": 8, "remaining": 7}
    with pytest.raises(LimitExceeded) as chat:
        m.reserve(7, None, allowance=7)
    assert chat.value.details == {"limit": "tokens", "needed": 8, "remaining": 7}


def test_the_usage_event_is_taken_off_the_end_of_chunks_joined_while_the_caller_read() -> None:
    told = {"prompt_tokens": 3, "completion_tokens": 2}
    event = b'data: {"choices":[{"text":"x"}]}\n\n'
    usage = usage_event(told)
    assert split_usage_event(usage) == (b"", told)
    assert split_usage_event(event + event + usage) == (event + event, told)
    # Only at an event's start: the words inside an event's JSON are that event's.
    inside = b'data: {"text":"event: ficc.usage\\ndata: {}"}\n\n'
    assert split_usage_event(inside) == (inside, None)
    assert split_usage_event(event) == (event, None)
