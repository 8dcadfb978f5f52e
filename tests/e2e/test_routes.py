"""Routes over three real clusters: alpha routes to its own service, then beta's, then gamma's.

alpha and beta serve scripted OpenAI-compatible engines in this process, so the test decides
when an engine is busy and when one fails mid-stream: a user message ``hold`` keeps its
request until released, ``break`` ends the stream after its first chunk with a broken
connection. gamma runs llama.cpp's server on the tiny model, so what reaches it generates and
is metered for real. All three are real `ficc serve` processes over real iroh on loopback,
alpha paired with beta and with gamma, each granting alpha its service; the scenarios share
them, the destructive ones last (a revoked grant, then beta stopped).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.support.cluster import RunningCluster, ficc, start_cluster
from tests.support.federation import API, configure, ok, pair, refresh, wait_for
from tests.support.inference import spec, start_running
from tests.support.metering import PLAIN_TEXT, agree, new_request_id, usage
from tests.support.remote import add_model
from tests.support.tiny_gguf import write_tiny_gguf

from ficc.bootstrap import CONNECT_SECONDS_VARIABLE

LOCAL_V1 = "/api/v1/inference/v1"
ROUTES = "/api/v1/inference/routes"
CONNECT_SECONDS = 2.0
"""alpha's deadline for reaching a peer: the one slow refusal a stopped beta costs a route."""
HOLD_SECONDS = 60.0
USED = {"prompt_tokens": 5, "completion_tokens": 1000}
"""What a scripted engine's usage chunk says a stream took: one spends a small budget."""


@dataclass
class Engine:
    """A scripted engine: what it was asked, and the lever that holds a request."""

    name: str
    url: str = ""
    asked: list[str] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    holding: threading.Event = field(default_factory=threading.Event)


def _handler(engine: Engine) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            return None

        def do_GET(self) -> None:
            self._json({"object": "list", "data": [{"id": "mock", "object": "model"}]})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            said = str(body["messages"][-1]["content"])
            engine.asked.append(said)
            if said == "hold":
                engine.holding.set()
                engine.release.wait(HOLD_SECONDS)
            base = {"id": "c1", "created": 1, "model": "mock", "object": "chat.completion.chunk"}
            if not body.get("stream"):
                message = {"role": "assistant", "content": engine.name}
                choice = {"index": 0, "message": message, "finish_reason": "stop"}
                self._json({**base, "object": "chat.completion", "choices": [choice]})
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            first = {"index": 0, "delta": {"role": "assistant", "content": engine.name}}
            self._chunk({**base, "choices": [{**first, "finish_reason": None}]})
            if said == "break":
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(2)  # no last chunk: the stream is cut off
                return
            last = {"index": 0, "delta": {}, "finish_reason": "stop"}
            self._chunk({**base, "choices": [last]})
            if (body.get("stream_options") or {}).get("include_usage"):
                self._chunk({**base, "choices": [], "usage": USED})
            self._raw(b"data: [DONE]\n\n")
            self.wfile.write(b"0\r\n\r\n")

        def _chunk(self, event: dict[str, Any]) -> None:
            self._raw(b"data: " + json.dumps(event).encode() + b"\n\n")

        def _raw(self, data: bytes) -> None:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        def _json(self, value: dict[str, Any]) -> None:
            data = json.dumps(value).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


@dataclass
class Partner:
    """A peer of alpha's and its service: the IDs each side knows them by."""

    cluster: RunningCluster
    peer: str
    """the partner, as alpha's peer ID."""
    alpha_peer: str
    """alpha, as the partner's peer ID."""
    service: str

    @property
    def label(self) -> str:
        """The route target's label (``x-ficc-route-target``): PEER/SERVICE."""
        return f"{self.peer}/{self.service}"


@dataclass
class Routed:
    alpha: RunningCluster
    beta: Partner
    gamma: Partner
    engines: dict[str, Engine]
    local: str
    """alpha's own service (engine ``alpha``): the overflow route sends it one at a time."""
    gamma_grant: str

    def chat(
        self, model: str, say: str = "hi", *, max_tokens: int | None = 4, **extra: Any
    ) -> httpx.Response:
        body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": say}]}
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        return self.alpha.owner().post(
            f"{LOCAL_V1}/chat/completions", json={**body, **extra}, timeout=60
        )

    def grant(self, partner: Partner, **terms: Any) -> str:
        """A new grant of the partner's service to alpha, selected on alpha."""
        body = {"scopes": ["inference:invoke"], "services": [partner.service], **terms}
        given = ok(
            partner.cluster.owner().post(f"{API}/peers/{partner.alpha_peer}/grants", json=body),
            201,
        )
        ok(refresh(self.alpha.owner(), partner.peer))
        ok(refresh(self.alpha.owner(), partner.peer, grant=given["id"]))
        return str(given["id"])

    def count(self, route: str, target: str, outcome: str) -> float:
        """``ficc_route_requests_total`` of alpha for the route, target and outcome."""
        text = self.alpha.owner().get("/metrics").text
        wanted = {f'outcome="{outcome}"', f'route="{route}"', f'target="{target}"'}
        for line in text.splitlines():
            if line.startswith("ficc_route_requests_total{"):
                labels, value = line.removeprefix("ficc_route_requests_total{").rsplit("} ", 1)
                if set(labels.split(",")) == wanted:
                    return float(value)
        return 0.0

    def gamma_records(self) -> list[dict[str, Any]]:
        """gamma's usage records of its grant to alpha."""
        records: list[dict[str, Any]] = usage(self.gamma.cluster.owner(), self.gamma_grant)[
            "records"
        ]
        return records


def _engines() -> tuple[dict[str, Engine], list[ThreadingHTTPServer]]:
    engines = {name: Engine(name) for name in ("alpha", "beta")}
    servers = []
    for engine in engines.values():
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(engine))
        server.daemon_threads = True
        engine.url = f"http://127.0.0.1:{server.server_address[1]}"
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
    return engines, servers


def _scripted(cluster: RunningCluster, engine: Engine) -> str:
    body = {
        "name": engine.name,
        "model": "mock",
        "runtime": "openai",
        "options": {"base_url": engine.url},
    }
    return str(start_running(cluster.owner(), body)["id"])


def _tiny(cluster: RunningCluster, root: Path) -> str:
    model = add_model(cluster, "tiny", write_tiny_gguf(root / "tiny.gguf"))
    return str(start_running(cluster.owner(), spec("tiny", model, options={"n_ctx": 4096}))["id"])


def _partner(alpha: RunningCluster, cluster: RunningCluster, service: str) -> Partner:
    pairing = pair(alpha, cluster, scopes=["discover", "inference:invoke"])
    return Partner(cluster, pairing.requester_peer, pairing.service_peer, service)


@pytest.fixture(scope="module")
def routed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Routed]:
    root = tmp_path_factory.mktemp("routes")
    engines, servers = _engines()
    allow = [arg for e in engines.values() for arg in ("--upstream-allow", e.url)]
    clusters: list[RunningCluster] = []
    try:
        with pytest.MonkeyPatch.context() as env, ThreadPoolExecutor(3) as pool:
            env.setenv(CONNECT_SECONDS_VARIABLE, str(CONNECT_SECONDS))
            started = [pool.submit(start_cluster, root / n, *allow) for n in ("a", "b", "g")]
            clusters += [future.result() for future in started]
        alpha, beta, gamma = clusters
        for cluster, label in zip(clusters, ("alpha", "beta", "gamma"), strict=True):
            configure(cluster, label)
        with ThreadPoolExecutor(3) as pool:
            made = [
                pool.submit(_scripted, alpha, engines["alpha"]),
                pool.submit(_scripted, beta, engines["beta"]),
                pool.submit(_tiny, gamma, root),
            ]
            local, beta_service, gamma_service = (future.result() for future in made)
        routed = Routed(
            alpha,
            _partner(alpha, beta, beta_service),
            _partner(alpha, gamma, gamma_service),
            engines,
            local,
            "",
        )
        routed.grant(routed.beta)
        routed.gamma_grant = routed.grant(routed.gamma, tokens=100_000)
        # The CLI makes the route that starts at beta; the API the overflow route, whose
        # local service takes one request at a time (an openai runtime has no bound of its own).
        made_route = ficc(
            "route-create",
            "--name",
            "partner",
            "--policy",
            "priority",
            "--target",
            routed.beta.label,
            "--target",
            routed.gamma.label,
            state_dir=alpha.state_dir,
        )
        assert made_route.returncode == 0, made_route.stderr
        targets = [
            {"service": local, "max_in_flight": 1},
            {"peer": routed.beta.peer, "service": beta_service},
            {"peer": routed.gamma.peer, "service": gamma_service},
        ]
        body = {"name": "overflow", "policy": "priority", "targets": targets}
        ok(alpha.owner().post(ROUTES, json=body), 201)
        yield routed
    finally:
        for engine in engines.values():
            engine.release.set()
        for cluster in clusters:
            cluster.stop()
        for server in servers:
            server.shutdown()
            server.server_close()


def answered_by(response: httpx.Response) -> str:
    assert response.status_code == 200, response.text
    return response.headers["x-ficc-route-target"]


def content(response: httpx.Response) -> str:
    """What a streamed answer said, its chunks' contents joined."""
    said = []
    for line in response.text.splitlines():
        data = line.removeprefix("data: ")
        if line.startswith("data: ") and data != "[DONE]":
            for choice in json.loads(data).get("choices", []):
                said.append(choice.get("delta", {}).get("content") or "")
    return "".join(said)


def test_a_route_answers_plain_and_streamed_from_its_first_target(routed: Routed) -> None:
    plain = routed.chat("overflow")
    assert answered_by(plain) == routed.local
    assert plain.json()["choices"][0]["message"]["content"] == "alpha"
    streamed = routed.chat("overflow", stream=True)
    assert answered_by(streamed) == routed.local
    assert streamed.headers["content-type"].startswith("text/event-stream")
    assert content(streamed) == "alpha"
    assert streamed.text.rstrip().endswith("data: [DONE]")
    models = ok(routed.alpha.owner().get(f"{LOCAL_V1}/models"))["data"]
    assert {"overflow", "partner"} <= {m["id"] for m in models}


def test_a_busy_local_engine_overflows_to_the_first_peer(routed: Routed) -> None:
    engine = routed.engines["alpha"]
    engine.release.clear()
    engine.holding.clear()
    held: list[httpx.Response] = []
    holder = threading.Thread(target=lambda: held.append(routed.chat(routed.local, "hold")))
    holder.start()
    try:
        assert engine.holding.wait(30)
        overflowed = routed.chat("overflow", stream=True)
        assert answered_by(overflowed) == routed.beta.label
        assert content(overflowed) == "beta"
    finally:
        engine.release.set()
        holder.join(30)
    assert held[0].status_code == 200
    assert routed.count("overflow", routed.local, "busy") >= 1
    # Free again: the local service answers.
    assert answered_by(routed.chat("overflow")) == routed.local


def test_a_request_the_peer_accepted_and_failed_mid_stream_is_not_retried(
    routed: Routed,
) -> None:
    beta_before = len(routed.engines["beta"].asked)
    gamma_before = len(routed.gamma_records())
    broken = routed.chat("partner", "break", stream=True)
    assert answered_by(broken) == routed.beta.label
    events = [line for line in broken.text.splitlines() if line.startswith("data: ")]
    assert '"beta"' in events[0]
    assert "error" in events[-1]
    assert len(routed.engines["beta"].asked) == beta_before + 1
    assert len(routed.gamma_records()) == gamma_before  # nothing replayed at gamma
    assert routed.count("partner", routed.gamma.label, "ok") == 0


def test_a_token_budget_too_small_or_spent_sends_the_route_to_the_next_peer(
    routed: Routed,
) -> None:
    asked = len(routed.engines["beta"].asked)
    # Too small for the request: beta's grantor refuses it before its engine is asked.
    routed.grant(routed.beta, tokens=50)
    assert answered_by(routed.chat("partner")) == routed.gamma.label
    assert len(routed.engines["beta"].asked) == asked
    # Spent by one stream (beta's engine says it took them all): the next is not even sent.
    routed.grant(routed.beta, tokens=200)
    spending = routed.chat("partner", max_tokens=None, stream=True)
    assert answered_by(spending) == routed.beta.label
    assert answered_by(routed.chat("partner")) == routed.gamma.label
    assert len(routed.engines["beta"].asked) == asked + 1
    assert routed.count("partner", routed.beta.label, "limit_exceeded") == 2


def test_a_revoked_grant_sends_the_route_to_the_next_peer_with_streaming_and_usage(
    routed: Routed,
) -> None:
    grant = routed.grant(routed.beta)
    assert answered_by(routed.chat("partner")) == routed.beta.label
    ok(routed.beta.cluster.owner().delete(f"{API}/grants/{grant}"))
    streamed = routed.chat(
        "partner",
        max_tokens=6,
        stream=True,
        stream_options={"include_usage": True},
        temperature=0,
        logit_bias=PLAIN_TEXT,
    )
    assert answered_by(streamed) == routed.gamma.label
    assert streamed.text.rstrip().endswith("data: [DONE]")
    told = [json.loads(line[6:]) for line in streamed.text.splitlines() if '"usage":{' in line]
    assert [event["usage"]["completion_tokens"] for event in told] == [6]
    revoked = sum(
        routed.count("partner", routed.beta.label, outcome)
        for outcome in ("grant_revoked", "not_sent")
    )
    assert revoked >= 1
    # The plain answer's usage is gamma's engine's; both sides recorded the same requests.
    plain = routed.chat("partner", max_tokens=3, temperature=0, logit_bias=PLAIN_TEXT)
    assert answered_by(plain) == routed.gamma.label
    assert plain.json()["usage"]["completion_tokens"] == 3
    grantor = routed.gamma_records()
    requester = usage(routed.alpha.owner(), routed.gamma_grant)["records"]
    agree(grantor, requester)
    assert [r["completion_tokens"] for r in grantor][-2:] == [6, 3]


def test_a_cancelled_stream_through_a_route_settles_at_its_target(routed: Routed) -> None:
    request_id = new_request_id()
    body = {
        "model": "partner",
        "messages": [{"role": "user", "content": "hello"}],
        "max_tokens": 3000,
        "logit_bias": PLAIN_TEXT,
        "stream": True,
    }
    read = 0
    with routed.alpha.owner().stream(
        "POST",
        f"{LOCAL_V1}/chat/completions",
        json=body,
        headers={"X-Request-ID": request_id},
    ) as response:
        assert answered_by(response) == routed.gamma.label
        for line in response.iter_lines():
            read += line.startswith("data: ")
            if read == 10:
                break

    def settled() -> dict[str, Any] | None:
        done = [r for r in routed.gamma_records() if r["request"] == request_id]
        return done[0] if done else None

    record = wait_for(settled, what="gamma's record of the cancelled stream")
    assert record["outcome"] == "cancelled"
    assert read - 1 <= record["completion_tokens"] < 3000
    wait_for(
        lambda: (
            len(usage(routed.alpha.owner(), routed.gamma_grant)["records"])
            == len(routed.gamma_records())
        ),
        what="alpha's record of the cancelled stream",
    )
    agree(routed.gamma_records(), usage(routed.alpha.owner(), routed.gamma_grant)["records"])
    # Nothing of it is held: the grant's two concurrent requests both go to gamma (a slot
    # the cancelled stream kept would make the route skip gamma for the second).
    with ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(lambda _: routed.chat("partner"), range(2)))
    assert [answered_by(answer) for answer in answers] == [routed.gamma.label] * 2


def test_a_stopped_peer_costs_one_slow_refusal_then_is_skipped(routed: Routed) -> None:
    routed.grant(routed.beta)
    assert answered_by(routed.chat("partner")) == routed.beta.label
    routed.beta.cluster.stop()
    for _ in range(5):
        assert answered_by(routed.chat("partner")) == routed.gamma.label
    assert routed.count("partner", routed.beta.label, "peer_unreachable") == 1
    assert routed.count("partner", routed.beta.label, "circuit_open") == 4
