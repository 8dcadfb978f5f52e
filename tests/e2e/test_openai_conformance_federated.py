"""The federated compatible URL answers as the engine and the local URL do, over two clusters.

alpha's /api/v1/federation/peers/{beta}/v1 reaches beta's SmolLM2 service through the selected
grant; the same official-client calls go to beta's engine directly, beta's local URL and alpha's
federated URL, and the answers are compared field by field. A hostile peer that skips alpha's
checks is refused by beta's, and a grant's response_bytes count the bytes the caller receives.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI
from tests.support.cluster import ficc
from tests.support.federation import error_of
from tests.support.openai_conformance import (
    BAD_PARAMETERS,
    CHAT_ARGS,
    assert_deep_body_refused,
    assert_refused_naming,
    client_on,
    plain_chat,
    plain_completion,
    streamed_chat_with_usage,
    warm,
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
    client = client_on(f"{fed.engine_url}/v1", fed.engine_key or "unused")
    warm(client, fed.service)
    return client


def the_three(fed: Federated, engine: OpenAI) -> list[OpenAI]:
    local = client_on(fed.beta.url + LOCAL_V1, fed.beta.owner_token)
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
