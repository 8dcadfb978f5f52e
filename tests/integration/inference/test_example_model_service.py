"""A service on the real example model (SmolLM2), used through FICC's local OpenAI-compatible URL.

One service runs for the whole module. The engine serves one request at a time, so a short
request that completes quickly right after a long one was abandoned proves the cancel reached
the engine: otherwise it would wait for the long one to run to ``max_tokens`` (~9 s).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from tests.support.cluster import RunningCluster, ficc
from tests.support.example_model import end_token_ids
from tests.support.inference import (
    LOCAL_V1,
    add_model,
    openai_client,
    spec,
    start_running,
    stop,
)

pytestmark = pytest.mark.engine

FREED_WITHIN_SECONDS = 2.0
LONG_MAX_TOKENS = 400
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def example_model(cluster: RunningCluster) -> tuple[str, Path]:
    """The example model's ID in this cluster, and its file (found with `ficc example-model`)."""
    found = ficc("example-model")
    assert found.returncode == 0, found.stderr
    path = Path(found.stdout.strip())
    return add_model(cluster, "smollm2", path), path


@pytest.fixture(scope="module")
def service(cluster: RunningCluster, example_model: tuple[str, Path]) -> Iterator[str]:
    """One running service on the example model; stopped at the end of the module."""
    owner = cluster.owner()
    running = start_running(owner, spec("smol", example_model[0]))
    yield str(running["id"])
    stop(owner, running["id"])


@pytest.fixture(scope="module")
def endless(example_model: tuple[str, Path]) -> dict[str, Any]:
    """A completion that runs to max_tokens: the model's end tokens are banned."""
    banned = {str(token): -100 for token in end_token_ids(example_model[1])}
    return {
        "prompt": "Write a very long story about a dragon.\n",
        "temperature": 0,
        "max_tokens": LONG_MAX_TOKENS,
        "logit_bias": banned,
    }


def short_request_seconds(cluster: RunningCluster, service: str) -> float:
    """How long a four-token completion takes through FICC, checked to be complete."""
    client = openai_client(cluster)
    started = time.monotonic()
    answer = client.completions.create(model=service, prompt="Hi", max_tokens=4, temperature=0)
    elapsed = time.monotonic() - started
    assert answer.choices[0].finish_reason == "length"
    return elapsed


def server_log_size(cluster: RunningCluster) -> int:
    return cluster.log_path.stat().st_size


def server_errors_since(cluster: RunningCluster, offset: int) -> list[str]:
    """Lines of FICC's own log, written since ``offset``, that report an error."""
    with cluster.log_path.open("rb") as log:
        log.seek(offset)
        text = log.read().decode(errors="replace")
    return [line for line in text.splitlines() if "Traceback" in line or "ERROR" in line]


def test_the_official_client_gets_a_sensible_chat_answer(
    cluster: RunningCluster, service: str
) -> None:
    answer = openai_client(cluster).chat.completions.create(
        model=service, messages=QUESTION, temperature=0, max_tokens=24
    )
    assert answer.object == "chat.completion"
    assert answer.model == service
    assert "Paris" in (answer.choices[0].message.content or "")
    assert answer.choices[0].finish_reason in {"stop", "length"}


def test_streamed_chat_text_equals_the_plain_answer_at_temperature_zero(
    cluster: RunningCluster, service: str
) -> None:
    client = openai_client(cluster)
    request: dict[str, Any] = {
        "model": service,
        "messages": QUESTION,
        "temperature": 0,
        "max_tokens": 40,
    }
    plain = client.chat.completions.create(**request)
    pieces = []
    finish = None
    for chunk in client.chat.completions.create(**request, stream=True):
        assert chunk.object == "chat.completion.chunk"
        for choice in chunk.choices:
            pieces.append(choice.delta.content or "")
            finish = choice.finish_reason or finish
    assert "".join(pieces) == plain.choices[0].message.content
    assert finish == plain.choices[0].finish_reason


def test_streamed_completion_text_equals_the_plain_answer_at_temperature_zero(
    cluster: RunningCluster, service: str
) -> None:
    client = openai_client(cluster)
    request: dict[str, Any] = {
        "model": service,
        "prompt": "The three primary colours are",
        "temperature": 0,
        "max_tokens": 24,
    }
    plain = client.completions.create(**request)
    streamed = "".join(
        choice.text
        for chunk in client.completions.create(**request, stream=True)
        for choice in chunk.choices
    )
    assert plain.choices[0].text
    assert streamed == plain.choices[0].text


def test_closing_a_plain_request_frees_the_engine_within_two_seconds(
    cluster: RunningCluster, service: str, endless: dict[str, Any]
) -> None:
    headers = {"Authorization": f"Bearer {cluster.owner_token}"}
    log_before = server_log_size(cluster)
    # The read timeout makes the caller give up (and close its connection) after 1 s.
    with (
        httpx.Client(base_url=cluster.url, headers=headers) as caller,
        pytest.raises(httpx.ReadTimeout),
    ):
        caller.post(
            f"{LOCAL_V1}/completions",
            json={"model": service, **endless},
            timeout=httpx.Timeout(30.0, read=1.0),
        )
    assert short_request_seconds(cluster, service) < FREED_WITHIN_SECONDS
    assert server_errors_since(cluster, log_before) == []


def test_closing_a_streamed_request_frees_the_engine_within_two_seconds(
    cluster: RunningCluster, service: str, endless: dict[str, Any]
) -> None:
    stream = openai_client(cluster).completions.create(model=service, stream=True, **endless)
    received = 0
    for chunk in stream:
        received += len(chunk.choices)
        if received >= 5:
            break
    log_before = server_log_size(cluster)
    stream.close()
    assert received >= 5
    assert short_request_seconds(cluster, service) < FREED_WITHIN_SECONDS
    assert server_errors_since(cluster, log_before) == []


def test_the_model_list_names_the_running_service(cluster: RunningCluster, service: str) -> None:
    listed = openai_client(cluster).models.list()
    assert service in [model.id for model in listed.data]


def test_an_unknown_model_is_a_not_found_error_in_openai_shape(
    cluster: RunningCluster, service: str
) -> None:
    unknown = "svc_" + "z" * 26
    with pytest.raises(openai.NotFoundError) as raised:
        openai_client(cluster).chat.completions.create(model=unknown, messages=QUESTION)
    assert raised.value.status_code == 404
    assert raised.value.code == "not_found"
    raw = cluster.owner().post(
        f"{LOCAL_V1}/chat/completions", json={"model": unknown, "messages": QUESTION}
    )
    assert raw.status_code == 404
    error = raw.json()["error"]
    assert {"message", "type", "code"} <= set(error)
    assert error["code"] == "not_found"
    assert error["type"] == "invalid_request_error"
    assert unknown in error["message"]


def test_a_caller_without_a_credential_gets_an_openai_shaped_401(
    cluster: RunningCluster, service: str
) -> None:
    with pytest.raises(openai.AuthenticationError) as raised:
        openai_client(cluster, token="not-a-token").models.list()
    assert raised.value.status_code == 401
    raw = httpx.get(f"{cluster.url}{LOCAL_V1}/models")
    assert raw.status_code == 401
    assert set(raw.json()["error"]) >= {"message", "type", "code"}


def test_a_token_without_inference_invoke_is_refused(cluster: RunningCluster, service: str) -> None:
    reader = cluster.token("inference:read")
    with pytest.raises(openai.PermissionDeniedError) as raised:
        openai_client(cluster, token=reader).chat.completions.create(
            model=service, messages=QUESTION, max_tokens=1
        )
    assert raised.value.code == "forbidden"
    assert raised.value.body is not None
