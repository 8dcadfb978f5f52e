"""The federated compatible URL answers as the engine and the local URL do, over two clusters.

alpha's /api/v1/federation/peers/{beta}/v1 reaches beta's SmolLM2 service through the selected
grant; the same official-client calls go to beta's engine directly, beta's local URL and alpha's
federated URL, and the answers are compared field by field. A hostile peer that skips alpha's
checks is refused by beta's, and a grant's response_bytes count the bytes the caller receives.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI
from tests.support.cluster import ficc
from tests.support.federation import error_of
from tests.support.inference import engine_api_key, spec, start_running
from tests.support.openai_conformance import (
    BAD_PARAMETERS,
    CHAT_ARGS,
    EMBEDDING_INPUT,
    JSON_SCHEMA_FORMAT,
    LLAMA_CPP_REFUSALS,
    LOGPROB_CHAT_ARGS,
    TOOL_CHAT_ARGS,
    assert_deep_body_refused,
    assert_models_shape,
    assert_refused_naming,
    assert_runtime_refusal,
    assert_same_embeddings,
    client_on,
    counted_from_text,
    plain_chat,
    plain_completion,
    pooled_engine_embeddings,
    stable,
    streamed_chat_with_usage,
    warm,
    without_tool_call_ids,
)
from tests.support.remote import LOCAL_V1, Federated, federation, invoke_body


@pytest.fixture(scope="module")
def fed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Federated]:
    found = ficc("example-model")
    assert found.returncode == 0, found.stderr
    with federation(tmp_path_factory.mktemp("conform"), "smol", Path(found.stdout.strip())) as f:
        f.grant(scopes=["inference:invoke"], services=[f.service])
        yield f


@pytest.fixture(scope="module")
def engine(fed: Federated) -> OpenAI:
    client = client_on(f"{fed.engine_url}/v1", fed.engine_key or "unused", fed.beta.client())
    warm(client, fed.service)
    return client


def the_three(fed: Federated, engine: OpenAI) -> list[OpenAI]:
    local = client_on(fed.beta.url + LOCAL_V1, fed.beta.owner_token, fed.beta.client())
    return [engine, local, fed.federated_openai()]


def test_plain_answers_are_the_same_on_the_engine_and_both_urls(
    fed: Federated, engine: OpenAI
) -> None:
    chats = [plain_chat(client, fed.service) for client in the_three(fed, engine)]
    assert chats[0]["usage"]["total_tokens"] > 0
    assert chats[1] == chats[0]
    assert chats[2] == chats[0]
    completions = [plain_completion(client, fed.service) for client in the_three(fed, engine)]
    assert completions[1] == completions[0]
    assert completions[2] == completions[0]


def test_a_federated_stream_asking_for_usage_ends_with_the_plain_usage(
    fed: Federated, engine: OpenAI
) -> None:
    expected = plain_chat(engine, fed.service)
    text, finish, usage = streamed_chat_with_usage(fed.federated_openai(), fed.service)
    assert text == expected["choices"][0]["message"]["content"]
    assert finish == expected["choices"][0]["finish_reason"]
    assert usage == expected["usage"]


@pytest.mark.parametrize(("change", "param"), BAD_PARAMETERS)
def test_each_bad_parameter_is_refused_on_the_federated_url_at_no_cost(
    fed: Federated, change: dict[str, Any], param: str
) -> None:
    grant = fed.grant(scopes=["inference:invoke"], services=[fed.service], requests=1)
    assert_refused_naming(fed.federated_openai(), fed.service, change, param)
    # Refused before it left alpha: the grant's one request is still there.
    assert fed.grantor_view(grant)["remaining"]["requests"] == 1


def test_a_deeply_nested_body_is_a_400_on_the_federated_url(fed: Federated) -> None:
    fed.grant(scopes=["inference:invoke"], services=[fed.service])
    url = f"{fed.federated_base_url}/chat/completions"
    assert_deep_body_refused(url, fed.alpha.owner_token)


@pytest.mark.parametrize(("change", "param"), BAD_PARAMETERS)
def test_a_peer_sending_a_bad_parameter_directly_is_refused_by_the_grantor(
    fed: Federated, change: dict[str, Any], param: str
) -> None:
    """``/peers/{id}/request`` skips alpha's compatible-URL checks; beta checks again."""
    fed.grant(scopes=["inference:invoke"], services=[fed.service])
    body = invoke_body(fed.service, **change)
    error = error_of(fed.request("inference.invoke", body), 400)
    assert error["details"]["field"] == param


def test_a_grants_response_bytes_count_what_the_caller_receives(
    fed: Federated, engine: OpenAI
) -> None:
    fed.grant(scopes=["inference:invoke"], services=[fed.service])
    url = f"{fed.federated_base_url}/chat/completions"
    headers = {"Authorization": f"Bearer {fed.alpha.owner_token}"}
    body = {"model": fed.service, **CHAT_ARGS}
    received = httpx.post(url, json=body, headers=headers, timeout=120)
    assert received.status_code == 200, received.text
    size = len(received.content)
    assert received.json()["usage"]["total_tokens"] > 0

    fed.grant(scopes=["inference:invoke"], services=[fed.service], response_bytes=size)
    again = httpx.post(url, json=body, headers=headers, timeout=120)
    assert again.status_code == 200, again.text
    assert len(again.content) == size

    fed.grant(scopes=["inference:invoke"], services=[fed.service], response_bytes=size - 1)
    client = fed.federated_openai()
    with pytest.raises(openai.RateLimitError) as refused:
        client.chat.completions.create(model=fed.service, **CHAT_ARGS)
    assert isinstance(refused.value.body, dict)
    assert refused.value.body["code"] == "limit_exceeded"
    assert f"the response is {size} bytes" in refused.value.message


@pytest.fixture(scope="module")
def embedder(fed: Federated) -> dict[str, Any]:
    """A second service on beta, started with embeddings on."""
    body = spec("smol-embed", fed.model, options={"embeddings": True})
    return start_running(fed.beta.owner(), body)


def test_logprobs_json_and_tools_are_the_same_on_the_engine_and_both_urls(
    fed: Federated, engine: OpenAI
) -> None:
    fed.grant(scopes=["inference:invoke"], services=[fed.service])
    engine.chat.completions.create(model=fed.service, **TOOL_CHAT_ARGS)  # warms the grammar
    clients = the_three(fed, engine)
    logprobs = [
        stable(c.chat.completions.create(model=fed.service, **LOGPROB_CHAT_ARGS)) for c in clients
    ]
    assert logprobs[0]["choices"][0]["logprobs"]["content"]
    assert logprobs[1] == logprobs[0]
    assert logprobs[2] == logprobs[0]
    tools = [
        counted_from_text(
            without_tool_call_ids(
                stable(c.chat.completions.create(model=fed.service, **TOOL_CHAT_ARGS))
            )
        )
        for c in clients
    ]
    assert tools[0]["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert tools[1] == tools[0]
    assert tools[2] == tools[0]
    arguments = {**CHAT_ARGS, "max_tokens": 30, "response_format": JSON_SCHEMA_FORMAT}
    schema_answers = [
        counted_from_text(stable(c.chat.completions.create(model=fed.service, **arguments)))
        for c in clients[1:]
    ]
    assert schema_answers[1] == schema_answers[0]
    assert json.loads(schema_answers[1]["choices"][0]["message"]["content"])["city"]


@pytest.mark.parametrize(("kind", "change", "param"), LLAMA_CPP_REFUSALS)
def test_what_llama_cpp_would_drop_is_refused_by_the_grantor_on_the_federated_url(
    fed: Federated, kind: str, change: dict[str, Any], param: str
) -> None:
    grant = fed.grant(scopes=["inference:invoke"], services=[fed.service], requests=2)
    assert_runtime_refusal(fed.federated_openai(), fed.service, kind, change, param)
    # The grantor refused it before its engine saw it; the grant spent that one request only.
    view = fed.grantor_view(grant)
    assert view["remaining"]["requests"] == 1
    assert view["in_flight"] == 0


def test_federated_models_carry_the_grantors_created_time_and_unknown_ones_are_404(
    fed: Federated,
) -> None:
    fed.grant(scopes=["inference:invoke"], services=[fed.service])
    url = fed.federated_base_url
    headers = {"Authorization": f"Bearer {fed.alpha.owner_token}"}
    listing = httpx.get(f"{url}/models", headers=headers, timeout=60).json()
    assert_models_shape(listing)
    (listed,) = listing["data"]
    local = fed.beta.owner().get(f"{LOCAL_V1}/models/{fed.service}").json()
    assert listed == {**local, "owned_by": fed.peer}
    one = httpx.get(f"{url}/models/{fed.service}", headers=headers, timeout=60)
    assert one.json() == listed
    with pytest.raises(openai.NotFoundError) as missing:
        fed.federated_openai().models.retrieve("svc_unknown")
    assert isinstance(missing.value.body, dict)
    assert missing.value.body["type"] == "invalid_request_error"
    assert missing.value.body["param"] == "model"


def test_federated_embeddings_equal_the_engines_within_the_grants_response_bytes(
    fed: Federated, embedder: dict[str, Any]
) -> None:
    (replica,) = embedder["replicas"]
    expected = pooled_engine_embeddings(
        f"http://127.0.0.1:{replica['port']}", engine_api_key(replica), embedder["id"]
    )
    fed.grant(scopes=["inference:invoke"], services=[fed.service, embedder["id"]])
    client = fed.federated_openai()
    got = client.embeddings.create(model=embedder["id"], input=EMBEDDING_INPUT)
    assert_same_embeddings(got.model_dump(), expected)
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model=embedder["id"], **CHAT_ARGS)
    assert isinstance(refused.value.body, dict)
    assert refused.value.body["param"] == "model"

    fed.grant(scopes=["inference:invoke"], services=[embedder["id"]], response_bytes=1000)
    with pytest.raises(openai.RateLimitError) as limited:
        client.embeddings.create(model=embedder["id"], input=EMBEDDING_INPUT)
    assert isinstance(limited.value.body, dict)
    assert limited.value.body["code"] == "limit_exceeded"
