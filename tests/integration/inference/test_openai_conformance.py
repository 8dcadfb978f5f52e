"""The local compatible URL answers as the engine does, with what OpenAI adds, and refuses as
OpenAI does: the official client against the engine directly and against FICC, field by field.

One service on the example model (SmolLM2) runs for the module, and a second one started with
``options.embeddings`` for the embeddings tests; the engine serves one request at a time and is
deterministic at temperature 0 once its prompt cache is warm.
"""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import openai
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
    CHAT_ARGS,
    EMBEDDING_INPUT,
    ENGINE_SCHEMA_FORMAT,
    JSON_SCHEMA_FORMAT,
    LLAMA_CPP_REFUSALS,
    LOGPROB_CHAT_ARGS,
    LOGPROB_COMPLETION_ARGS,
    QUESTION,
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
    streamed_chat_without_usage,
    warm,
    without_tool_call_ids,
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
def engine(cluster: RunningCluster, running: dict[str, Any]) -> OpenAI:
    """The official client on the service's engine itself, its cache warmed."""
    (replica,) = running["replicas"]
    client = client_on(
        f"http://127.0.0.1:{replica['port']}/v1", engine_api_key(replica), cluster.client()
    )
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


@pytest.fixture(scope="module")
def embedder(cluster: RunningCluster, running: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """A second service on the same model, started with embeddings on."""
    owner = cluster.owner()
    service = start_running(
        owner, spec("smol-embed", running["spec"]["model"], options={"embeddings": True})
    )
    yield service
    stop(owner, service["id"])


def test_logprobs_are_answered_as_the_engine_answers_them(
    cluster: RunningCluster, running: dict[str, Any], engine: OpenAI
) -> None:
    ficc_client = openai_client(cluster)
    expected = stable(engine.chat.completions.create(model=running["id"], **LOGPROB_CHAT_ARGS))
    tokens = expected["choices"][0]["logprobs"]["content"]
    assert len(tokens) == expected["usage"]["completion_tokens"]
    assert all(len(token["top_logprobs"]) == 2 for token in tokens)
    got = stable(ficc_client.chat.completions.create(model=running["id"], **LOGPROB_CHAT_ARGS))
    assert got == expected
    expected = stable(engine.completions.create(model=running["id"], **LOGPROB_COMPLETION_ARGS))
    assert len(expected["choices"][0]["logprobs"]["tokens"]) > 1
    got = stable(ficc_client.completions.create(model=running["id"], **LOGPROB_COMPLETION_ARGS))
    assert got == expected


def test_json_mode_and_a_json_schema_are_answered_as_the_engines_grammar_answers(
    cluster: RunningCluster, running: dict[str, Any], engine: OpenAI
) -> None:
    ficc_client = openai_client(cluster)
    arguments = {**CHAT_ARGS, "max_tokens": 30, "seed": 7, "user": "conformance"}
    for sent, engine_form in [
        ({"type": "json_object"}, {"type": "json_object"}),
        (JSON_SCHEMA_FORMAT, ENGINE_SCHEMA_FORMAT),
    ]:
        # A grammar's first answer differs from the next ones (as a cold prompt cache's does).
        for _ in range(2):
            expected = stable(
                engine.chat.completions.create(
                    model=running["id"], response_format=engine_form, **arguments
                )
            )
        got = stable(
            ficc_client.chat.completions.create(
                model=running["id"], response_format=sent, **arguments
            )
        )
        assert counted_from_text(got) == counted_from_text(expected)
    assert json.loads(got["choices"][0]["message"]["content"])["city"]


def test_a_named_tool_call_is_answered_as_the_engine_answers_it(
    cluster: RunningCluster, running: dict[str, Any], engine: OpenAI
) -> None:
    engine.chat.completions.create(model=running["id"], **TOOL_CHAT_ARGS)  # warms the grammar
    expected = stable(engine.chat.completions.create(model=running["id"], **TOOL_CHAT_ARGS))
    (call,) = expected["choices"][0]["message"]["tool_calls"]
    assert call["function"]["name"] == "get_weather"
    assert "city" in json.loads(call["function"]["arguments"])
    assert expected["choices"][0]["finish_reason"] == "tool_calls"
    got = stable(
        openai_client(cluster).chat.completions.create(model=running["id"], **TOOL_CHAT_ARGS)
    )
    assert counted_from_text(without_tool_call_ids(got)) == counted_from_text(
        without_tool_call_ids(expected)
    )


@pytest.mark.parametrize(("kind", "change", "param"), LLAMA_CPP_REFUSALS)
def test_what_llama_cpp_would_drop_is_a_400_naming_it(
    cluster: RunningCluster, running: dict[str, Any], kind: str, change: dict[str, Any], param: str
) -> None:
    assert_runtime_refusal(openai_client(cluster), running["id"], kind, change, param)


def test_models_are_openais_model_objects_and_an_unknown_one_is_a_404(
    cluster: RunningCluster, running: dict[str, Any]
) -> None:
    client = openai_client(cluster)
    listing = cluster.owner().get(f"{LOCAL_V1}/models").json()
    assert_models_shape(listing)
    (listed,) = [item for item in listing["data"] if item["id"] == running["id"]]
    created = datetime.fromisoformat(running["created_at"].replace("Z", "+00:00"))
    assert listed["created"] == int(created.timestamp())
    assert cluster.owner().get(f"{LOCAL_V1}/models/{running['id']}").json() == listed
    assert client.models.retrieve(running["id"]).id == running["id"]
    with pytest.raises(openai.NotFoundError) as missing:
        client.models.retrieve("svc_unknown")
    body = missing.value.body
    assert isinstance(body, dict), body
    assert body["type"] == "invalid_request_error"
    assert body["param"] == "model"


def test_embeddings_are_the_engines_pooled_vectors_in_openais_shape(
    cluster: RunningCluster, embedder: dict[str, Any]
) -> None:
    (replica,) = embedder["replicas"]
    engine_url = f"http://127.0.0.1:{replica['port']}"
    expected = pooled_engine_embeddings(engine_url, engine_api_key(replica), embedder["id"])
    client = openai_client(cluster)
    # The official client asks for base64 and decodes it unless told a format: both forms.
    for chosen in ({}, {"encoding_format": "float"}):
        got = client.embeddings.create(model=embedder["id"], input=EMBEDDING_INPUT, **chosen)
        assert_same_embeddings(got.model_dump(), expected)
    raw = httpx.post(
        f"{cluster.url}{LOCAL_V1}/embeddings",
        json={"model": embedder["id"], "input": EMBEDDING_INPUT, "encoding_format": "base64"},
        headers={"Authorization": f"Bearer {cluster.owner_token}"},
        timeout=60,
    )
    assert raw.status_code == 200, raw.text[:300]
    encoded = raw.json()["data"][0]["embedding"]
    values = struct.unpack(f"<{len(expected['data'][0]['embedding'])}f", base64.b64decode(encoded))
    assert list(values) == pytest.approx(expected["data"][0]["embedding"], rel=1e-5, abs=1e-6)


def test_an_embeddings_service_serves_embeddings_only_and_a_chat_service_none(
    cluster: RunningCluster, running: dict[str, Any], embedder: dict[str, Any]
) -> None:
    client = openai_client(cluster)
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model=embedder["id"], **CHAT_ARGS)
    assert isinstance(refused.value.body, dict)
    assert refused.value.body["param"] == "model"
    assert "embeddings only" in refused.value.body["message"]
    with pytest.raises(openai.BadRequestError) as refused:
        client.embeddings.create(model=running["id"], input=EMBEDDING_INPUT)
    assert isinstance(refused.value.body, dict)
    assert refused.value.body["param"] == "model"
    assert "options.embeddings" in refused.value.body["message"]
    for change, param in [({"dimensions": 8}, "dimensions"), ({"input": [[1, 2]]}, "input")]:
        with pytest.raises(openai.BadRequestError) as refused:
            client.embeddings.create(model=embedder["id"], **{"input": "Hi", **change})
        assert isinstance(refused.value.body, dict)
        assert refused.value.body["param"] == param
    # Nothing was lost: both services still answer.
    assert client.embeddings.create(model=embedder["id"], input="Hi").data
    assert plain_chat(client, running["id"])["choices"]


RESPONSES_ARGS: dict[str, Any] = {
    "input": "Say hello.",
    "instructions": "You answer in one short sentence.",
    "max_output_tokens": 8,
    "temperature": 0,
}
"""The chat of ``RESPONSES_CHAT`` as a Responses request."""
RESPONSES_CHAT: dict[str, Any] = {
    "messages": [
        {"role": "system", "content": "You answer in one short sentence."},
        {"role": "user", "content": "Say hello."},
    ],
    "max_tokens": 8,
    "temperature": 0,
}


def _chat_usage_in_responses_names(client: OpenAI, model: str) -> dict[str, Any]:
    usage = client.chat.completions.create(model=model, **RESPONSES_CHAT).usage
    assert usage is not None
    return {
        "input_tokens": usage.prompt_tokens,
        "output_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
    }


def test_the_responses_api_answers_plain_and_streamed_with_the_chat_answers_usage(
    cluster: RunningCluster, running: dict[str, Any]
) -> None:
    """llama.cpp's server has no Responses API: FICC answers it with chat completions, through
    the official client's ``responses.create``, plain and streamed, usage included."""
    client = openai_client(cluster)
    expected = _chat_usage_in_responses_names(client, running["id"])
    plain = client.responses.create(model=running["id"], **RESPONSES_ARGS)
    assert plain.object == "response"
    assert plain.status in {"completed", "incomplete"}
    assert plain.output_text
    assert plain.usage is not None
    usage = plain.usage.model_dump(include={"input_tokens", "output_tokens", "total_tokens"})
    assert usage == expected
    events = list(client.responses.create(model=running["id"], stream=True, **RESPONSES_ARGS))
    kinds = [event.type for event in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:-1] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ]
    assert kinds[-1] == f"response.{plain.status}"
    assert [event.sequence_number for event in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == plain.output_text
    last = events[-1].response  # type: ignore[union-attr]
    assert last.output_text == plain.output_text
    assert last.usage is not None
    assert last.usage.model_dump(include=set(expected)) == expected


def test_the_responses_api_formats_json_by_schema_and_keeps_no_state(
    cluster: RunningCluster, running: dict[str, Any]
) -> None:
    client = openai_client(cluster)
    schema = {
        "type": "object",
        "properties": {"n": {"type": "integer"}},
        "required": ["n"],
    }
    answer = client.responses.create(
        model=running["id"],
        input="Give a number as JSON.",
        max_output_tokens=16,
        temperature=0,
        text={"format": {"type": "json_schema", "name": "number", "schema": schema}},
    )
    assert isinstance(json.loads(answer.output_text)["n"], int)
    for param, value in (("store", True), ("previous_response_id", answer.id)):
        with pytest.raises(openai.BadRequestError) as refused:
            client.responses.create(
                model=running["id"], input="Hi", max_output_tokens=4, **{param: value}
            )
        assert refused.value.body["param"] == param  # type: ignore[index]
        assert refused.value.body["type"] == "invalid_request_error"  # type: ignore[index]


def test_a_developer_message_is_answered_as_the_system_message_it_replaces(
    cluster: RunningCluster, running: dict[str, Any]
) -> None:
    """llama.cpp's server refuses OpenAI's ``developer`` role; FICC sends it as
    ``system``, so the answer is the system message's, word for word at temperature 0."""
    client = openai_client(cluster)

    def answer(role: str) -> str | None:
        asked = [{"role": role, "content": "Answer in one word."}, *QUESTION]
        plain = client.chat.completions.create(
            model=running["id"], messages=asked, max_tokens=8, temperature=0
        )
        return plain.choices[0].message.content

    assert answer("developer") == answer("system")


def test_a_prompt_past_the_context_is_a_400_plain_or_streamed(
    cluster: RunningCluster, running: dict[str, Any]
) -> None:
    """llama.cpp's server ends such a stream empty; the local URL answered it 502."""
    client = openai_client(cluster)
    too_long = [{"role": "user", "content": "x " * 3000}]
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(
                model=running["id"], messages=too_long, max_tokens=4, stream=stream
            )
        assert refused.value.code == "context_length_exceeded"
        assert refused.value.param == "messages"
    assert plain_chat(client, running["id"])["choices"]  # the engine serves the next one
