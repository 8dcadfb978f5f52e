"""The local compatible URL answers as the engine does, with what OpenAI adds, and refuses as
OpenAI does: the official client against the engine directly and against FICC, field by field.

One service on the example model (SmolLM2) runs for the module; the engine serves one request
at a time and is deterministic at temperature 0 once its prompt cache is warm.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai import OpenAI
from tests.support.cluster import RunningCluster, ficc
from tests.support.inference import (
    LOCAL_V1,
    add_model,
    engine_api_key,
    openai_client,
    spec,
    start_running,
    stop,
)
from tests.support.openai_conformance import (
    BAD_PARAMETERS,
    assert_deep_body_refused,
    assert_refused_naming,
    client_on,
    plain_chat,
    plain_completion,
    streamed_chat_with_usage,
    streamed_chat_without_usage,
    warm,
)

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def running(cluster: RunningCluster) -> Iterator[dict[str, Any]]:
    """One running service on the example model; stopped at the end of the module."""
    found = ficc("example-model")
    assert found.returncode == 0, found.stderr
    model = add_model(cluster, "smollm2", Path(found.stdout.strip()))
    owner = cluster.owner()
    service = start_running(owner, spec("smol", model))
    yield service
    stop(owner, service["id"])


@pytest.fixture(scope="module")
def engine(running: dict[str, Any]) -> OpenAI:
    """The official client on the service's engine itself, its cache warmed."""
    (replica,) = running["replicas"]
    client = client_on(f"http://127.0.0.1:{replica['port']}/v1", engine_api_key(replica))
    warm(client, running["id"])
    return client


def test_a_plain_chat_answer_equals_the_engines_usage_included(
    cluster: RunningCluster, running: dict[str, Any], engine: OpenAI
) -> None:
    expected = plain_chat(engine, running["id"])
    assert expected["usage"]["prompt_tokens"] > 0
    assert plain_chat(openai_client(cluster), running["id"]) == expected


def test_a_plain_legacy_completion_equals_the_engines_usage_included(
    cluster: RunningCluster, running: dict[str, Any], engine: OpenAI
) -> None:
    expected = plain_completion(engine, running["id"])
    assert expected["usage"]["completion_tokens"] > 0
    assert plain_completion(openai_client(cluster), running["id"]) == expected


def test_a_stream_asking_for_usage_ends_with_the_usage_of_the_plain_answer(
    cluster: RunningCluster, running: dict[str, Any], engine: OpenAI
) -> None:
    expected = plain_chat(engine, running["id"])
    text, finish, usage = streamed_chat_with_usage(openai_client(cluster), running["id"])
    assert text == expected["choices"][0]["message"]["content"]
    assert finish == expected["choices"][0]["finish_reason"]
    assert usage == expected["usage"]


def test_a_stream_not_asking_for_usage_gets_none(
    cluster: RunningCluster, running: dict[str, Any]
) -> None:
    assert set(streamed_chat_without_usage(openai_client(cluster), running["id"])) == {None}


@pytest.mark.parametrize(("change", "param"), BAD_PARAMETERS)
def test_each_bad_parameter_is_a_400_naming_it(
    cluster: RunningCluster, running: dict[str, Any], change: dict[str, Any], param: str
) -> None:
    assert_refused_naming(openai_client(cluster), running["id"], change, param)


def test_a_deeply_nested_body_is_a_400_not_a_500(
    cluster: RunningCluster, running: dict[str, Any]
) -> None:
    assert_deep_body_refused(f"{cluster.url}{LOCAL_V1}/chat/completions", cluster.owner_token)
    # The server is still well and answers the next call.
    assert plain_chat(openai_client(cluster), running["id"])["choices"]
