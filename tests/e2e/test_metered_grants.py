"""Metered grants on two real clusters (llama.cpp's server on the tiny model, real HyperNet on
loopback): a token budget holds against concurrent streams, a cancelled or revoked stream
settles to what it sent, a rate rule refuses with Retry-After, and both sides' usage records
agree request by request."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest
from tests.support.cluster import ficc
from tests.support.federation import error_of, wait_for
from tests.support.metering import (
    agree,
    by_request,
    concurrent_streams,
    long_stream,
    new_request_id,
    revoked_stream,
    settled_sum,
    stream_chat,
    usage,
)
from tests.support.remote import Federated, federation, invoke_body
from tests.support.tiny_gguf import write_tiny_gguf

from ficc.bootstrap import CONNECT_SECONDS_VARIABLE

BUDGET = 500
"""A few streams' worth of the tiny model's tokens."""
PER_MINUTE = 2
"""The rate grant's ``requests_per_minute``."""


@pytest.fixture(scope="module")
def fed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Federated]:
    root = tmp_path_factory.mktemp("metered")
    tiny = write_tiny_gguf(root / "tiny.gguf")
    with pytest.MonkeyPatch.context() as env:
        env.setenv(CONNECT_SECONDS_VARIABLE, "2")
        with federation(root, "tiny", tiny, n_ctx=4096) as running:
            yield running


def metered(fed: Federated, **terms: object) -> str:
    return fed.grant(scopes=["inference:invoke"], services=[fed.service], **terms)


def both_sides(fed: Federated, grant: str) -> tuple[dict[str, object], dict[str, object]]:
    """Both sides' usage once neither has a request of the grant in flight."""
    fed.wait_idle(grant)
    return usage(fed.beta.owner(), grant), usage(fed.alpha.owner(), grant)


@pytest.fixture(scope="module")
def rated(fed: Federated) -> str:
    """A grant of :data:`PER_MINUTE` requests a minute, made as the module starts.

    Its window is 60 s of real time (the contract's), kept in beta's process: the first test
    fills it, the module's other tests run, and the last one meets the refusal with what is
    left of that minute as ``Retry-After``, waits it and is admitted again.
    """
    return metered(fed, requests_per_minute=PER_MINUTE)


def short_chat(client: httpx.Client, fed: Federated, request_id: str) -> httpx.Response:
    url = f"{fed.federated_base_url.removeprefix(fed.alpha.url)}/chat/completions"
    body = {"model": fed.service, "messages": [{"role": "user", "content": "x"}], "max_tokens": 2}
    return client.post(url, json=body, headers={"X-Request-ID": request_id})


def test_requests_per_minute_refuses_with_retry_after(fed: Federated, rated: str) -> None:
    fed.select(rated)
    client = fed.alpha.owner()
    for _ in range(PER_MINUTE):
        answered = short_chat(client, fed, new_request_id())
        assert answered.status_code == 200, answered.text
        assert answered.headers["x-ratelimit-limit-requests"] == str(PER_MINUTE)
    refused_id = new_request_id()
    refused = short_chat(client, fed, refused_id)
    error = error_of(refused, 429)
    # OpenAI's shape under the compatible URL: the message names the rule and the wait.
    retry_after = int(refused.headers["retry-after"])
    assert 1 <= retry_after <= 60
    assert error["code"] == "limit_exceeded"
    assert error["message"] == (
        f"the grant allows {PER_MINUTE} requests per minute; try again in {retry_after} s"
    )
    # FICC's shape (the Federation API's request): the refusal names the rule.
    answered = fed.request("inference.invoke", invoke_body(fed.service))
    error = error_of(answered, 429)
    assert error["code"] == "limit_exceeded"
    assert error["details"]["limit"] == "requests_per_minute"
    assert 1 <= int(answered.headers["retry-after"]) <= 60
    grantor, requester = both_sides(fed, rated)
    outcomes = [r["outcome"] for r in grantor["records"]]  # type: ignore[index]
    assert outcomes == ["completed", "completed", "refused", "refused"]
    # Refused before the engine ran: nothing counted.
    assert by_request(grantor["records"])[refused_id][4:6] == (0, 0)  # type: ignore[arg-type]
    agree(grantor["records"], requester["records"])  # type: ignore[arg-type]


def test_eight_concurrent_streams_never_pass_the_budget_and_the_next_is_refused_unrun(
    fed: Federated,
) -> None:
    grant = metered(fed, tokens=BUDGET, concurrent=8)
    streamed = concurrent_streams(fed, fed.service, 8, max_tokens=60)
    assert {status for _, status, _ in streamed} <= {200, 429}
    # Until the budget is spent: every later request is admitted or refused by it.
    refused = None
    for _ in range(12):
        request_id = new_request_id()
        status, text = stream_chat(fed, fed.service, max_tokens=60, request_id=request_id)
        if status == 429:
            refused = (request_id, text)
            break
    assert refused is not None, "the budget was never spent"
    grantor, requester = both_sides(fed, grant)
    records = grantor["records"]
    assert isinstance(records, list)
    assert settled_sum(records) <= BUDGET
    agree(records, requester["records"])  # type: ignore[arg-type]
    last = by_request(records)[refused[0]]
    assert last[-1] == "refused"
    assert last[4:6] == (0, 0)  # no engine work: nothing counted
    shown = fed.grantor_view(grant)
    used = shown["used"]["prompt_tokens"] + shown["used"]["completion_tokens"]
    assert used == settled_sum(records)
    assert shown["remaining"]["tokens"] == BUDGET - used
    # The requester sees it too, in its copy and in OpenAI's headers.
    copy = fed.requester_view(grant)
    assert copy["remaining"]["tokens"] == BUDGET - used
    answer = fed.alpha.owner().post(
        f"{fed.federated_base_url.removeprefix(fed.alpha.url)}/chat/completions",
        json={"model": fed.service, "messages": [{"role": "user", "content": "x"}]},
    )
    assert error_of(answer, 429)["code"] == "limit_exceeded"
    # beta's console draws the grant's usage and what its budget leaves.
    browser = fed.beta.client()
    browser.get(ficc("login-link", state_dir=fed.beta.state_dir).stdout.strip())
    page = browser.get(f"/ui/p/default/grants/{grant}")
    assert page.status_code == 200, page.text
    assert 'class="usage-chart" role="img"' in page.text
    assert f"{BUDGET - used} of {BUDGET} left" in page.text


def test_a_cancelled_stream_settles_to_the_tokens_it_sent(fed: Federated) -> None:
    grant = metered(fed, tokens=100_000)
    request_id = new_request_id()
    read = 0
    with long_stream(fed, request_id) as response:
        assert response.status_code == 200
        assert response.headers["x-ratelimit-limit-tokens"] == "100000"
        for line in response.iter_lines():
            if line.startswith("data: "):
                read += 1
            if read == 20:
                break
    grantor, requester = both_sides(fed, grant)
    [mine] = [r for r in grantor["records"] if r["request"] == request_id]  # type: ignore[union-attr]
    assert mine["outcome"] == "cancelled"
    # What went out: at least what the caller read (less the role chunk), far below 3000.
    assert read - 1 <= mine["completion_tokens"] < 3000
    agree(grantor["records"], requester["records"])  # type: ignore[arg-type]
    shown = fed.grantor_view(grant)
    assert shown["remaining"]["tokens"] == 100_000 - settled_sum(grantor["records"])  # type: ignore[arg-type]


def test_a_revoked_stream_is_recorded_revoked_on_both_sides(fed: Federated) -> None:
    grant = metered(fed, tokens=100_000)
    assert "grant_revoked" in revoked_stream(fed, grant, new_request_id())
    wait_for(
        lambda: usage(fed.alpha.owner(), grant)["records"],
        what="the requester's record of the revoked stream",
    )
    grantor = usage(fed.beta.owner(), grant)
    requester = usage(fed.alpha.owner(), grant)
    assert [r["outcome"] for r in grantor["records"]] == ["revoked"]
    agree(grantor["records"], requester["records"])


@pytest.mark.slow
def test_a_rate_limit_admits_again_once_its_retry_after_has_passed(
    fed: Federated, rated: str
) -> None:
    """Last in the module, so the minute the first test opened has mostly passed: the wait
    is what the refusal names, real seconds on both clusters (alone, it fills the window
    itself and waits about a minute)."""
    fed.select(rated)
    client = fed.alpha.owner()
    refused: httpx.Response | None = None
    for _ in range(PER_MINUTE + 1):
        answered = short_chat(client, fed, new_request_id())
        if answered.status_code != 200:
            refused = answered
            break
    assert refused is not None, "the window never filled"
    error = error_of(refused, 429)
    retry_after = int(refused.headers["retry-after"])
    assert 1 <= retry_after <= 60
    assert error["code"] == "limit_exceeded"
    assert error["message"] == (
        f"the grant allows {PER_MINUTE} requests per minute; try again in {retry_after} s"
    )
    window = fed.grantor_view(rated)["windows"]["requests_per_minute"]
    assert window["remaining"] == 0, window
    # Waiting exactly what the refusal said is enough: a request of the window has left it.
    time.sleep(retry_after)
    admitted_id = new_request_id()
    admitted = short_chat(client, fed, admitted_id)
    assert admitted.status_code == 200, admitted.text
    assert admitted.headers["x-ratelimit-limit-requests"] == str(PER_MINUTE)
    grantor, requester = both_sides(fed, rated)
    records = by_request(grantor["records"])  # type: ignore[arg-type]
    assert records[admitted_id][-1] == "completed"
    refusals = [r for r in grantor["records"] if r["outcome"] == "refused"]  # type: ignore[union-attr]
    assert refusals
    assert all(r["prompt_tokens"] == r["completion_tokens"] == 0 for r in refusals)
    agree(grantor["records"], requester["records"])  # type: ignore[arg-type]
