"""One received grant split between two teams' tokens on two real clusters (llama.cpp's server
on the tiny model, real HyperNet on loopback): each team stops at its own budget while the
grant still has room, a token a team minted spends from the team's budget, and the usage
each token made sums to the grant's usage on the requester."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from tests.support.federation import ok
from tests.support.metering import PLAIN_TEXT, agree, settled_sum, usage
from tests.support.remote import Federated, federation
from tests.support.tiny_gguf import write_tiny_gguf

from ficc.bootstrap import CONNECT_SECONDS_VARIABLE

GRANT_TOKENS = 100_000
TEAM_SCOPES = ["federation:invoke", "federation:read", "tokens:manage"]


@pytest.fixture(scope="module")
def fed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Federated]:
    root = tmp_path_factory.mktemp("teams")
    tiny = write_tiny_gguf(root / "tiny.gguf")
    with pytest.MonkeyPatch.context() as env:
        env.setenv(CONNECT_SECONDS_VARIABLE, "2")
        with federation(root, "tiny", tiny, n_ctx=4096) as running:
            yield running


def team_token(client: httpx.Client, **rules: Any) -> dict[str, Any]:
    made = ok(client.post("/api/v1/tokens", json={"scopes": TEAM_SCOPES, **rules}), 201)
    return made


def chat_until_refused(fed: Federated, secret: str, *, stream: bool) -> tuple[int, dict[str, Any]]:
    """Chats on alpha's federated URL with ``secret`` until one is refused: how many were
    answered and the refusal (OpenAI's error object)."""
    client = fed.alpha.client(secret)
    url = f"{fed.federated_base_url.removeprefix(fed.alpha.url)}/chat/completions"
    body = {
        "model": fed.service,
        "messages": [{"role": "user", "content": "hello there"}],
        "max_tokens": 40,
        "temperature": 0,
        "logit_bias": PLAIN_TEXT,
        "stream": stream,
    }
    for answered in range(60):
        response = client.post(url, json=body, timeout=120)
        if response.status_code == 429:
            return answered, response.json()["error"]
        assert response.status_code == 200, response.text
    raise AssertionError("the team's budget was never spent")


def test_two_teams_share_one_grant_each_within_its_own_budget(fed: Federated) -> None:
    grant = fed.grant(scopes=["inference:invoke"], services=[fed.service], tokens=GRANT_TOKENS)
    owner = fed.alpha.owner()
    team_a = team_token(owner, tokens=900, peers=[fed.peer], services=[fed.service])
    team_b = team_token(owner, tokens=600, requests_per_minute=100)
    # Team A's lead mints a token for a member: no budget of its own, team A's is its bound.
    member = team_token(fed.alpha.client(team_a["token"]))
    assert (member["peers"], member["services"]) == ([fed.peer], [fed.service])
    answered_member, _ = chat_until_refused(fed, member["token"], stream=True)
    answered_a, refused_a = chat_until_refused(fed, team_a["token"], stream=False)
    answered_b, refused_b = chat_until_refused(fed, team_b["token"], stream=True)
    assert refused_a["code"] == refused_b["code"] == "limit_exceeded"
    assert "token" in refused_a["message"]
    assert answered_member > 0
    assert answered_b > 0
    # Once the member spent team A's budget, team A itself has nothing left either.
    assert answered_a == 0
    fed.wait_idle(grant)
    listed = {t["id"]: t for t in ok(owner.get("/api/v1/tokens"))["tokens"]}
    spent: dict[str, int] = {}
    for made in (team_a, team_b, member):
        page = ok(owner.get(f"/api/v1/tokens/{made['id']}/usage", params={"limit": 1000}))
        assert {r["token"] for r in page["records"]} <= {made["id"]}
        spent[made["id"]] = settled_sum(page["records"])
    assert spent[team_a["id"]] == 0
    # Each team stayed within its budget, and what remains is what it did not spend.
    assert spent[member["id"]] <= 900
    assert spent[team_b["id"]] <= 600
    assert listed[team_a["id"]]["remaining"]["tokens"] == 900 - spent[member["id"]]
    assert listed[team_a["id"]]["used"]["prompt_tokens"] > 0
    assert listed[team_b["id"]]["remaining"]["tokens"] == 600 - spent[team_b["id"]]
    # The grant still has room; the teams' use is all of its use on the requester.
    grantor, requester = usage(fed.beta.owner(), grant), usage(owner, grant)
    agree(grantor["records"], requester["records"])
    assert settled_sum(requester["records"]) == sum(spent.values())
    assert fed.requester_view(grant)["remaining"]["tokens"] == GRANT_TOKENS - sum(spent.values())
    assert {r["token"] for r in requester["records"]} == {member["id"], team_b["id"]}
