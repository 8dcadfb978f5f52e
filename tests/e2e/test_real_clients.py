"""Real clients none of us wrote, on the local and the federated compatible URL, over two clusters.

beta runs the SmolLM2 example model (and a second service of it with embeddings on); alpha
reaches both through one grant. Each client runs as a subprocess from its own installation
(``make setup-test``: the official Node client from tests/clients/node's lock file; LangChain
and the OpenAI Agents SDK in .venv-clients), driven by a small script under tests/clients, and
what it got is compared with what FICC answers the same request over plain HTTP. Those plain
answers, and every streamed chunk and event, are held against OpenAI's published schemas
(tests/support/openai_schemas.json). The official Python client is driven by
test_openai_federated.py and test_openai_conformance_federated.py.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.support.cluster import ficc
from tests.support.example_model import end_token_ids
from tests.support.inference import spec, start_running
from tests.support.openai_schemas import assert_matches
from tests.support.remote import LOCAL_V1, Federated, federation, sse_events

ROOT = Path(__file__).resolve().parents[2]
CLIENTS = ROOT / "tests" / "clients"
NODE_SCRIPT = CLIENTS / "node" / "clients.mjs"
PYTHON_SCRIPT = CLIENTS / "python" / "clients.py"
CLIENTS_PYTHON = ROOT / ".venv-clients" / "bin" / "python"
SET_UP = "the real clients are installed by make setup-test"

QUESTION = "What is the capital of France?"
MAX_TOKENS = 8
CHAT: dict[str, Any] = {
    "messages": [{"role": "user", "content": QUESTION}],
    "max_tokens": MAX_TOKENS,
    "temperature": 0,
}
RESPONSE: dict[str, Any] = {
    "input": QUESTION,
    "instructions": "Answer briefly.",
    "max_output_tokens": MAX_TOKENS,
    "temperature": 0,
}
EMBEDDING_INPUT = ["The capital of France is Paris.", "Dragons hoard gold."]
ENDLESS_MAX_TOKENS = 400
"""About nine seconds of SmolLM2 on one thread: a stream that is still going when it is left."""
AGENT_MAX_TOKENS = 64
"""Enough for the brief answer to end by itself."""
CLIENT_SECONDS = 120


@dataclass(frozen=True)
class Url:
    """One compatible base URL and the bearer token that may use it."""

    name: str
    base_url: str
    token: str

    def post(self, path: str, body: dict[str, Any]) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.token}"}
        return httpx.post(f"{self.base_url}{path}", json=body, headers=headers, timeout=60)

    def answer(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """FICC's plain answer to ``body``."""
        answered = self.post(path, body)
        assert answered.status_code == 200, answered.text
        found: dict[str, Any] = answered.json()
        return found

    def events(self, path: str, body: dict[str, Any]) -> list[Any]:
        """FICC's streamed answer to ``body``: each event's JSON (``[DONE]`` as the string)."""
        answered = self.post(path, {**body, "stream": True})
        assert answered.status_code == 200, answered.text
        return sse_events(answered.text)

    def request(self, scenario: str, **fields: Any) -> str:
        return json.dumps(
            {"scenario": scenario, "base_url": self.base_url, "api_key": self.token, **fields}
        )


@dataclass(frozen=True)
class Setting:
    fed: Federated
    grant: str
    embedder: str
    endless: dict[str, Any]
    urls: dict[str, Url]


@pytest.fixture(scope="module")
def setting(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setting]:
    assert shutil.which("node"), f"node is missing: {SET_UP}"
    assert (CLIENTS / "node" / "node_modules" / "openai").is_dir(), SET_UP
    assert CLIENTS_PYTHON.exists(), SET_UP
    found = ficc("example-model")
    assert found.returncode == 0, found.stderr
    model_path = Path(found.stdout.strip())
    with federation(tmp_path_factory.mktemp("clients"), "smol", model_path) as fed:
        embedder = start_running(
            fed.beta.owner(), spec("smol-embed", fed.model, options={"embeddings": True})
        )
        grant = fed.grant(scopes=["inference:invoke"], services=[fed.service, embedder["id"]])
        banned = {str(token): -100 for token in end_token_ids(model_path)}
        urls = {
            "local": Url("local", fed.beta.url + LOCAL_V1, fed.beta.owner_token),
            "federated": Url("federated", fed.federated_base_url, fed.alpha.owner_token),
        }
        endless = {
            "messages": [{"role": "user", "content": "Write a very long story about a dragon."}],
            "temperature": 0,
            "max_tokens": ENDLESS_MAX_TOKENS,
            "logit_bias": banned,
        }
        yield Setting(fed, grant, str(embedder["id"]), endless, urls)


@pytest.fixture(params=["local", "federated"])
def url(request: pytest.FixtureRequest, setting: Setting) -> Url:
    return setting.urls[request.param]


def run_client(command: list[str]) -> dict[str, Any]:
    """What a client script printed (its one JSON line); it must have succeeded."""
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=CLIENT_SECONDS, cwd=ROOT, check=False
    )
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    printed: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return printed


def node(url: Url, scenario: str, args: dict[str, Any]) -> dict[str, Any]:
    return run_client(["node", str(NODE_SCRIPT), url.request(scenario, args=args)])


def python_client(
    url: Url, scenario: str, model: str, max_tokens: int = MAX_TOKENS
) -> dict[str, Any]:
    request = url.request(scenario, model=model, max_tokens=max_tokens, prompt=QUESTION)
    return run_client([str(CLIENTS_PYTHON), str(PYTHON_SCRIPT), request])


def chunk_text(chunks: list[dict[str, Any]]) -> str:
    return "".join(
        chunk["choices"][0]["delta"].get("content") or "" for chunk in chunks if chunk["choices"]
    )


def without_ids(response: dict[str, Any]) -> dict[str, Any]:
    """A response object less what differs between two requests: its IDs and time."""
    kept = {key: value for key, value in response.items() if key not in ("id", "created_at")}
    kept["output"] = [
        {key: value for key, value in item.items() if key not in ("id", "call_id")}
        for item in response["output"]
    ]
    return kept


def test_ficcs_answers_match_openais_published_schemas(setting: Setting, url: Url) -> None:
    """Chat, streamed chunks, embeddings, a response and each streamed event, a function call
    as a response and as events: every field OpenAI's schemas require, of its type."""
    model = setting.fed.service
    assert_matches(
        "CreateChatCompletionResponse", url.answer("/chat/completions", {**CHAT, "model": model})
    )
    chunks = url.events(
        "/chat/completions",
        {**CHAT, "model": model, "stream_options": {"include_usage": True}},
    )
    assert chunks[-1] == "[DONE]"
    for chunk in chunks[:-1]:
        assert_matches("CreateChatCompletionStreamResponse", chunk)
    assert chunks[-2]["usage"]["total_tokens"] > 0
    embeddings = url.answer("/embeddings", {"model": setting.embedder, "input": EMBEDDING_INPUT})
    assert_matches("CreateEmbeddingResponse", embeddings)
    tool = {
        "type": "function",
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    }
    called = {
        "model": model,
        "input": "What is the weather in Paris?",
        "max_output_tokens": 30,
        "temperature": 0,
        "tools": [tool],
        "tool_choice": {"type": "function", "name": "get_weather"},
    }
    for body in ({**RESPONSE, "model": model}, called):
        response = url.answer("/responses", body)
        assert_matches("Response", response)
        events = url.events("/responses", body)
        for event in events:
            assert_matches("ResponseStreamEvent", event)
        assert events[-1]["type"] in ("response.completed", "response.incomplete")
        assert without_ids(events[-1]["response"]) == without_ids(response)
    assert [item["type"] for item in response["output"]] == ["function_call"]
    assert json.loads(response["output"][0]["arguments"])["city"]


def test_the_node_client_chats_plain_and_streamed_as_ficc_answers(
    setting: Setting, url: Url
) -> None:
    body = {**CHAT, "model": setting.fed.service}
    expected = url.answer("/chat/completions", body)
    plain = node(url, "chat", body)
    assert plain["object"] == "chat.completion"
    assert plain["choices"] == expected["choices"]
    assert plain["usage"] == expected["usage"]
    streamed = node(url, "stream", body)["chunks"]
    assert chunk_text(streamed) == expected["choices"][0]["message"]["content"]
    finishes = [c["choices"][0]["finish_reason"] for c in streamed if c["choices"]]
    assert finishes[-1] == expected["choices"][0]["finish_reason"]
    assert streamed[-1]["choices"] == []
    assert streamed[-1]["usage"] == expected["usage"]


def test_the_node_client_aborting_a_stream_frees_the_grants_slot_at_once(
    setting: Setting,
) -> None:
    """AbortController closes the connection mid-stream: the grant's in_flight is back to 0
    while the client still runs, and the engine is free for the next request."""
    fed = setting.fed
    url = setting.urls["federated"]
    request = url.request("abort", args={**setting.endless, "model": fed.service})
    with subprocess.Popen(
        ["node", str(NODE_SCRIPT), request],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    ) as client:
        assert client.stdin is not None
        assert client.stdout is not None
        aborted = json.loads(client.stdout.readline())
        assert aborted["ended"] == "aborted", aborted
        assert len(aborted["chunks"]) == 1
        fed.wait_idle(setting.grant, seconds=5)
        assert fed.requester_view(setting.grant)["in_flight"] == 0
        assert client.poll() is None, "the client was still running"
        client.stdin.close()
        assert client.wait(timeout=CLIENT_SECONDS) == 0
    # Had the engine gone on with the 400 tokens, this would wait behind them.
    assert fed.local_chat_seconds() < 2.0


def test_the_node_client_creates_responses_plain_and_streamed_as_ficc_answers(
    setting: Setting, url: Url
) -> None:
    body = {**RESPONSE, "model": setting.fed.service}
    expected = url.answer("/responses", body)
    plain = node(url, "responses", body)
    # The client adds output_text, its sum of the output's text.
    assert plain["response"].pop("output_text") == plain["output_text"]
    assert without_ids(plain["response"]) == without_ids(expected)
    assert plain["output_text"] == expected["output"][0]["content"][0]["text"]
    assert plain["response"]["usage"]["output_tokens"] > 0
    events = node(url, "responses_stream", body)["events"]
    assert [e["type"] for e in events] == [e["type"] for e in url.events("/responses", body)]
    deltas = [e["delta"] for e in events if e["type"] == "response.output_text.delta"]
    assert "".join(deltas) == plain["output_text"]
    assert without_ids(events[-1]["response"]) == without_ids(expected)
    # Nothing is stored (store: false): a response cannot be read back.
    headers = {"Authorization": f"Bearer {url.token}"}
    stored = httpx.get(f"{url.base_url}/responses/{expected['id']}", headers=headers, timeout=60)
    assert stored.status_code == 404
    assert stored.json()["error"]["code"] == "not_found"


def test_the_node_client_gets_ficcs_embeddings(setting: Setting, url: Url) -> None:
    """The Node client asks for base64 by default and decodes FICC's little-endian float32s."""
    body = {"model": setting.embedder, "input": EMBEDDING_INPUT}
    expected = url.answer("/embeddings", body)
    got = node(url, "embeddings", body)
    assert got["usage"] == expected["usage"]
    assert [item["index"] for item in got["data"]] == [0, 1]
    for mine, theirs in zip(got["data"], expected["data"], strict=True):
        assert len(mine["embedding"]) == len(theirs["embedding"]) > 0
        assert all(
            math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-7)
            for a, b in zip(mine["embedding"], theirs["embedding"], strict=True)
        )


def test_langchain_chats_plain_and_streamed_with_usage_as_ficc_answers(
    setting: Setting, url: Url
) -> None:
    """ChatOpenAI sends ``max_completion_tokens``, which llama.cpp's server ignored: its
    answers ran past the limit and differed from FICC's answer with ``max_tokens``."""
    expected = url.answer("/chat/completions", {**CHAT, "model": setting.fed.service})
    usage = expected["usage"]
    want = {
        "content": expected["choices"][0]["message"]["content"],
        "finish_reason": expected["choices"][0]["finish_reason"],
    }
    got = python_client(url, "langchain", setting.fed.service)
    for kind in ("plain", "streamed"):
        assert {key: got[kind][key] for key in want} == want, kind
        assert got[kind]["usage"]["input_tokens"] == usage["prompt_tokens"], kind
        assert got[kind]["usage"]["output_tokens"] == usage["completion_tokens"], kind
        assert got[kind]["usage"]["total_tokens"] == usage["total_tokens"], kind


def test_the_openai_agents_sdk_runs_an_agent_on_ficcs_responses(setting: Setting, url: Url) -> None:
    """The SDK raises on a response cut by ``max_output_tokens`` (status incomplete), as it
    would on OpenAI's: the agent is given room to finish."""
    body = {**RESPONSE, "model": setting.fed.service, "max_output_tokens": AGENT_MAX_TOKENS}
    expected = url.answer("/responses", body)
    assert expected["status"] == "completed"
    got = python_client(url, "agents", setting.fed.service, AGENT_MAX_TOKENS)
    assert got["final_output"] == expected["output"][0]["content"][0]["text"]
    assert got["response_id"].startswith("resp_")
    assert got["usage"] == {
        "requests": 1,
        "input_tokens": expected["usage"]["input_tokens"],
        "output_tokens": expected["usage"]["output_tokens"],
        "total_tokens": expected["usage"]["total_tokens"],
    }
