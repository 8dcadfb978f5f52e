"""The federated compatible URL with the official `openai` client, over two real clusters.

alpha's /api/v1/federation/peers/{beta}/v1 reaches a service of beta through the selected
grant; beta runs the SmolLM2 example model (real text, deterministic at temperature 0). The
engine serves one request at a time, so "a short request completes quickly" proves that an
abandoned one stopped generating. The last test stops beta.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from tests.support.cluster import ficc
from tests.support.example_model import end_token_ids
from tests.support.federation import API, ok, wait_for
from tests.support.remote import Federated, federation

from ficc.bootstrap import CONNECT_SECONDS_VARIABLE

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
QUICK_SECONDS = 2.0
"""A four-token chat takes well under a second when the engine is free."""
IMPATIENT = httpx.Timeout(30, read=1)
"""A caller who gives up after one second without a byte."""
CONNECT_SECONDS = 2.0
"""alpha's deadline for reaching beta (5 s by default): loopback connects take milliseconds, and
the stopped grantor is reported unreachable after it, once per request."""
ENDLESS_MAX_TOKENS = 400
"""About nine seconds of SmolLM2 on one thread: long enough to see the engine busy."""


@pytest.fixture(scope="module")
def example_model() -> Path:
    found = ficc("example-model")
    assert found.returncode == 0, found.stderr
    return Path(found.stdout.strip())


@pytest.fixture(scope="module")
def fed(tmp_path_factory: pytest.TempPathFactory, example_model: Path) -> Iterator[Federated]:
    with pytest.MonkeyPatch.context() as env:
        env.setenv(CONNECT_SECONDS_VARIABLE, str(CONNECT_SECONDS))
        with federation(tmp_path_factory.mktemp("openai"), "smol", example_model) as running:
            yield running


@pytest.fixture(scope="module")
def endless(example_model: Path) -> dict[str, Any]:
    """Chat arguments that run to max_tokens: the model's end tokens are banned."""
    banned = {str(token): -100 for token in end_token_ids(example_model)}
    return {
        "messages": [{"role": "user", "content": "Write a very long story about a dragon."}],
        "temperature": 0,
        "max_tokens": ENDLESS_MAX_TOKENS,
        "logit_bias": banned,
    }


def invoking(fed: Federated, **terms: Any) -> str:
    """A grant of inference:invoke over the running service, selected on alpha."""
    return fed.grant(**{"scopes": ["inference:invoke"], "services": [fed.service], **terms})


def error_code(error: openai.APIError) -> str:
    body = error.body
    assert isinstance(body, dict), body
    assert error.code == body["code"]
    return str(body["code"])


def test_models_lists_the_services_the_selected_grant_publishes(fed: Federated) -> None:
    invoking(fed)
    client = fed.federated_openai()
    assert [model.id for model in client.models.list()] == [fed.service]
    invoking(fed, services=[])
    assert list(client.models.list()) == []


def test_a_streamed_chat_gives_the_text_of_the_plain_answer(fed: Federated) -> None:
    grant = invoking(fed)
    client = fed.federated_openai()
    plain = client.chat.completions.create(
        model=fed.service, messages=QUESTION, max_tokens=24, temperature=0
    )
    text = plain.choices[0].message.content
    assert text
    assert "Paris" in text
    assert plain.choices[0].finish_reason in ("length", "stop")
    pieces = []
    finish = None
    with client.chat.completions.create(
        model=fed.service, messages=QUESTION, max_tokens=24, temperature=0, stream=True
    ) as stream:
        for chunk in stream:
            if chunk.choices:
                pieces.append(chunk.choices[0].delta.content or "")
                finish = chunk.choices[0].finish_reason or finish
    assert "".join(pieces) == text
    assert finish == plain.choices[0].finish_reason
    completion = client.completions.create(
        model=fed.service, prompt="The capital of France is", max_tokens=4, temperature=0
    )
    assert completion.choices[0].text
    fed.wait_idle(grant)


def test_a_plain_chat_answer_has_every_field_openais_schema_requires(fed: Federated) -> None:
    """The plain answer lacked ``message.refusal``, required by OpenAI's schema."""
    grant = invoking(fed)
    raw = fed.federated_openai().chat.completions.with_raw_response.create(
        model=fed.service, messages=QUESTION, max_tokens=4, temperature=0
    )
    (choice,) = raw.http_response.json()["choices"]
    assert {"index", "message", "logprobs", "finish_reason"} <= set(choice)
    assert {"role", "content", "refusal"} <= set(choice["message"])
    assert choice["message"]["refusal"] is None
    fed.wait_idle(grant)


def test_a_developer_message_is_answered(fed: Federated) -> None:
    """llama.cpp's server refused OpenAI's ``developer`` role, and the federated URL
    answered 502 ``peer_unreachable`` from a peer that was reachable all along."""
    grant = invoking(fed)
    told = fed.federated_openai().chat.completions.create(
        model=fed.service,
        messages=[{"role": "developer", "content": "Answer in one word."}, *QUESTION],
        max_tokens=8,
        temperature=0,
    )
    assert told.choices[0].message.content
    fed.wait_idle(grant)


def test_a_prompt_past_the_context_is_context_length_exceeded(fed: Federated) -> None:
    """llama.cpp's server ends such a stream empty, which the federated URL answered
    502 ``peer_unreachable``; OpenAI and vLLM answer 400 ``context_length_exceeded``, plain or
    streamed (before any event)."""
    grant = invoking(fed)
    client = fed.federated_openai()
    too_long = [{"role": "user", "content": "x " * 3000}]
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(
                model=fed.service, messages=too_long, max_tokens=4, stream=stream
            )
        assert error_code(refused.value) == "context_length_exceeded"
        assert refused.value.param == "messages"
        assert "context" in refused.value.message
    fed.wait_idle(grant)


def test_an_unknown_model_is_not_found_with_the_code_in_the_error_body(fed: Federated) -> None:
    invoking(fed)
    client = fed.federated_openai()
    for model in ("svc_" + "a" * 26, "gpt-4o"):
        with pytest.raises(openai.NotFoundError) as refused:
            client.chat.completions.create(model=model, messages=QUESTION, max_tokens=4)
        assert error_code(refused.value) == "not_found"


def test_each_refusal_is_told_apart_by_its_code(fed: Federated, endless: dict[str, Any]) -> None:
    client = fed.federated_openai()
    short: dict[str, Any] = {"model": fed.service, "messages": QUESTION, "max_tokens": 4}

    invoking(fed, requests=1)
    client.chat.completions.create(**short)
    with pytest.raises(openai.RateLimitError) as used_up:
        client.chat.completions.create(**short)
    assert error_code(used_up.value) == "limit_exceeded"
    assert "requests" in used_up.value.message

    grant = invoking(fed, concurrent=1)
    with client.chat.completions.create(model=fed.service, stream=True, **endless) as running:
        next(iter(running))
        with pytest.raises(openai.RateLimitError) as busy:
            client.chat.completions.create(**short)
        assert error_code(busy.value) == "limit_exceeded"
        assert "concurrent" in busy.value.message
    fed.wait_idle(grant)

    invoking(fed, request_bytes=1024)
    with pytest.raises(openai.APIStatusError) as too_big:
        client.chat.completions.create(
            model=fed.service, messages=[{"role": "user", "content": "x" * 2000}], max_tokens=4
        )
    assert too_big.value.status_code == 413
    assert error_code(too_big.value) == "too_large"

    invoking(fed, response_bytes=300)
    long_answer = {**endless, "max_tokens": 40}
    with pytest.raises(openai.RateLimitError) as plain_over:
        client.chat.completions.create(model=fed.service, **long_answer)
    assert error_code(plain_over.value) == "limit_exceeded"
    assert "response" in plain_over.value.message
    with (
        pytest.raises(openai.APIError) as stream_over,
        client.chat.completions.create(model=fed.service, stream=True, **long_answer) as stream,
    ):
        list(stream)
    assert error_code(stream_over.value) == "limit_exceeded"

    revoked = invoking(fed)
    ok(fed.beta.owner().delete(f"{API}/grants/{revoked}"))
    with pytest.raises(openai.PermissionDeniedError) as refused:
        client.chat.completions.create(**short)
    assert error_code(refused.value) == "grant_revoked"


def test_revoking_mid_stream_ends_the_stream_with_grant_revoked(
    fed: Federated, endless: dict[str, Any]
) -> None:
    grant = invoking(fed)
    client = fed.federated_openai()
    with client.chat.completions.create(model=fed.service, stream=True, **endless) as stream:
        chunks = iter(stream)
        next(chunks)
        assert fed.grantor_view(grant)["in_flight"] == 1
        started = time.monotonic()
        ok(fed.beta.owner().delete(f"{API}/grants/{grant}"))
        with pytest.raises(openai.APIError) as ended:
            for _ in chunks:
                pass
        assert time.monotonic() - started < QUICK_SECONDS
    assert error_code(ended.value) == "grant_revoked"
    assert fed.grantor_view(grant)["in_flight"] == 0
    assert fed.requester_view(grant)["in_flight"] == 0
    assert fed.local_chat_seconds() < QUICK_SECONDS


def test_twenty_cancelled_streams_under_one_concurrent_slot_leave_nothing_in_flight(
    fed: Federated, endless: dict[str, Any]
) -> None:
    grant = invoking(fed, concurrent=1)
    client = fed.federated_openai()
    for _ in range(20):
        with client.chat.completions.create(model=fed.service, stream=True, **endless) as stream:
            assert next(iter(stream)).choices[0].delta is not None
        fed.wait_idle(grant, seconds=5)
    assert fed.grantor_view(grant)["in_flight"] == 0
    assert fed.requester_view(grant)["in_flight"] == 0
    started = time.monotonic()
    answer = client.chat.completions.create(
        model=fed.service, messages=QUESTION, max_tokens=4, temperature=0
    )
    assert answer.choices[0].finish_reason == "length"
    assert time.monotonic() - started < QUICK_SECONDS
    assert fed.grantor_view(grant)["remaining"]["requests"] == 1000 - 21


def test_the_responses_api_is_one_more_path_of_the_grant_and_a_cancelled_one_frees_its_slot(
    fed: Federated, endless: dict[str, Any]
) -> None:
    """``responses.create`` through the grant, plain and streamed with usage; a stream left
    mid-way stops the engine and frees the ``concurrent`` slot on both sides."""
    grant = invoking(fed, concurrent=1)
    client = fed.federated_openai()
    short: dict[str, Any] = {"model": fed.service, "input": "Hi", "max_output_tokens": 4}
    plain = client.responses.create(temperature=0, **short)
    assert plain.output_text
    assert plain.usage is not None
    assert plain.usage.input_tokens > 0
    assert plain.usage.output_tokens > 0
    events = list(client.responses.create(temperature=0, stream=True, **short))
    assert events[0].type == "response.created"
    last = events[-1].response  # type: ignore[union-attr]
    assert last.output_text == plain.output_text
    assert last.usage == plain.usage
    # Refused by alpha before it spends one of the grant's requests.
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(previous_response_id=plain.id, **short)
    assert refused.value.body["param"] == "previous_response_id"  # type: ignore[index]
    story = {
        "model": fed.service,
        "input": endless["messages"][0]["content"],
        "max_output_tokens": ENDLESS_MAX_TOKENS,
        "temperature": 0,
    }
    with client.responses.create(
        stream=True, extra_body={"logit_bias": endless["logit_bias"]}, **story
    ) as stream:
        for event in stream:
            if event.type == "response.output_text.delta":
                break
        assert fed.grantor_view(grant)["in_flight"] == 1
    fed.wait_idle(grant, seconds=5)
    assert fed.requester_view(grant)["in_flight"] == 0
    assert fed.local_chat_seconds() < QUICK_SECONDS
    assert fed.grantor_view(grant)["remaining"]["requests"] == 1000 - 3


def test_a_client_that_disconnects_before_the_first_byte_cancels_at_the_engine(
    fed: Federated, endless: dict[str, Any]
) -> None:
    grant = invoking(fed)
    # Keep the engine busy for a few seconds, so the federated stream gets no first byte: 300
    # tokens, since on a quiet machine the engine writes 100 in about the read timeout.
    busy = {**endless, "model": fed.service, "max_tokens": 300, "stream": True}
    generating = threading.Event()
    finished = threading.Event()

    def occupy() -> None:
        with fed.beta.owner().stream(
            "POST", "/api/v1/inference/v1/chat/completions", json=busy, timeout=60
        ) as response:
            lines = response.iter_lines()
            next(lines)
            generating.set()
            for _ in lines:
                pass
        finished.set()

    occupier = threading.Thread(target=occupy)
    occupier.start()
    try:
        wait_for(generating.is_set, seconds=10, what="the engine is busy")
        body = {**endless, "model": fed.service, "stream": True}
        with (
            pytest.raises(httpx.ReadTimeout),
            httpx.Client(
                base_url=fed.federated_base_url, timeout=httpx.Timeout(30, read=1)
            ) as http,
        ):
            http.post(
                "/chat/completions",
                json=body,
                headers={"Authorization": f"Bearer {fed.alpha.owner_token}"},
            )
        assert not finished.is_set(), "the engine was free: nothing was queued behind it"
        wait_for(finished.is_set, seconds=30, what="the busy request finishes")
    finally:
        occupier.join(timeout=60)
    fed.wait_idle(grant)
    # Had the abandoned request reached the engine, it would now run its 400 tokens first.
    assert fed.local_chat_seconds() < QUICK_SECONDS


def test_a_plain_request_whose_caller_disconnects_stops_generating(
    fed: Federated, endless: dict[str, Any]
) -> None:
    grant = invoking(fed)
    impatient = fed.federated_openai(timeout=1.0)
    started = time.monotonic()
    with pytest.raises(openai.APITimeoutError):
        impatient.chat.completions.create(model=fed.service, **endless)
    assert time.monotonic() - started < QUICK_SECONDS + 1
    fed.wait_idle(grant)
    assert fed.local_chat_seconds() < QUICK_SECONDS


def test_a_stopped_grantor_is_peer_unreachable_not_a_refusal(fed: Federated) -> None:
    invoking(fed)
    client = fed.federated_openai()
    fed.beta.stop()
    with pytest.raises(openai.InternalServerError) as unreachable:
        client.chat.completions.create(model=fed.service, messages=QUESTION, max_tokens=4)
    assert unreachable.value.status_code == 502
    assert error_code(unreachable.value) == "peer_unreachable"
    # The published list is alpha's own knowledge: still answered.
    assert [model.id for model in client.models.list()] == [fed.service]
