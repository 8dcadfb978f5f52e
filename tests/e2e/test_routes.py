"""Routes over two real clusters: alpha routes to its own service, then beta's, then a second
service of its own (the issue's third cluster, gamma, is played by that local service: a
third `ficc serve` and pairing would double this module's time for no rule of its own).

Every engine is a scripted OpenAI-compatible server in this process, so the test decides when
an engine is busy and when one fails mid-stream: a user message ``hold`` keeps its request
until released, ``break`` ends the stream after its first chunk with a broken connection.
Both clusters are real `ficc serve` processes over real iroh on loopback; the last test stops
beta.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from tests.support.cluster import RunningCluster, ficc, start_cluster
from tests.support.federation import API, configure, ok, pair, refresh
from tests.support.inference import start_running

from ficc.bootstrap import CONNECT_SECONDS_VARIABLE

LOCAL_V1 = "/api/v1/inference/v1"
ROUTES = "/api/v1/inference/routes"
CONNECT_SECONDS = 2.0
"""alpha's deadline for reaching beta: the one slow refusal a stopped beta costs a route."""
HOLD_SECONDS = 60.0


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
class Routed:
    alpha: RunningCluster
    beta: RunningCluster
    engines: dict[str, Engine]
    local: str
    """alpha's first service (engine ``alpha``): it takes one request at a time."""
    spare: str
    """alpha's second service (engine ``spare``): gamma's place."""
    remote: str
    """beta's service (engine ``beta``) as alpha names it: PEER/SERVICE."""
    peer: str
    beta_peer: str
    beta_service: str

    def chat(self, model: str, say: str = "hi", **extra: Any) -> httpx.Response:
        body = {"model": model, "messages": [{"role": "user", "content": say}], **extra}
        return self.alpha.owner().post(f"{LOCAL_V1}/chat/completions", json=body, timeout=60)

    def grant(self) -> str:
        """A new grant of beta's service to alpha, selected on alpha."""
        terms = {"scopes": ["inference:invoke"], "services": [self.beta_service]}
        given = ok(self.beta.owner().post(f"{API}/peers/{self.beta_peer}/grants", json=terms), 201)
        ok(refresh(self.alpha.owner(), self.peer))
        ok(refresh(self.alpha.owner(), self.peer, grant=given["id"]))
        return str(given["id"])

    def skips(self, route: str, target: str, outcome: str) -> float:
        """``ficc_route_requests_total`` of alpha for the route, target and outcome."""
        text = self.alpha.owner().get("/metrics").text
        wanted = {f'outcome="{outcome}"', f'route="{route}"', f'target="{target}"'}
        for line in text.splitlines():
            if line.startswith("ficc_route_requests_total{"):
                labels, value = line.removeprefix("ficc_route_requests_total{").rsplit("} ", 1)
                if set(labels.split(",")) == wanted:
                    return float(value)
        return 0.0


@pytest.fixture(scope="module")
def routed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Routed]:
    root = tmp_path_factory.mktemp("routes")
    engines = {name: Engine(name) for name in ("alpha", "spare", "beta")}
    servers = []
    for engine in engines.values():
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(engine))
        server.daemon_threads = True
        engine.url = f"http://127.0.0.1:{server.server_address[1]}"
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
    allow = [arg for e in engines.values() for arg in ("--upstream-allow", e.url)]
    with pytest.MonkeyPatch.context() as env:
        env.setenv(CONNECT_SECONDS_VARIABLE, str(CONNECT_SECONDS))
        alpha = start_cluster(root / "alpha", *allow)
        beta = start_cluster(root / "beta", *allow)
    try:
        configure(alpha, "alpha")
        configure(beta, "beta")

        def service(cluster: RunningCluster, name: str) -> str:
            body = {
                "name": name,
                "model": "mock",
                "runtime": "openai",
                "options": {"base_url": engines[name].url},
            }
            return str(start_running(cluster.owner(), body)["id"])

        local, spare, beta_service = (
            service(alpha, "alpha"),
            service(alpha, "spare"),
            service(beta, "beta"),
        )
        pairing = pair(alpha, beta, scopes=["discover", "inference:invoke"])
        routed = Routed(
            alpha,
            beta,
            engines,
            local,
            spare,
            f"{pairing.requester_peer}/{beta_service}",
            pairing.requester_peer,
            pairing.service_peer,
            beta_service,
        )
        routed.grant()
        # The CLI makes the route that starts at beta; the API the overflow route, whose
        # local service takes one request at a time (an openai runtime has no bound of its own).
        made = ficc(
            "route-create",
            "--name",
            "partner",
            "--policy",
            "priority",
            "--target",
            routed.remote,
            "--target",
            spare,
            state_dir=alpha.state_dir,
        )
        assert made.returncode == 0, made.stderr
        targets = [
            {"service": local, "max_in_flight": 1},
            {"peer": routed.peer, "service": beta_service},
            {"service": spare},
        ]
        body = {"name": "overflow", "policy": "priority", "targets": targets}
        ok(alpha.owner().post(ROUTES, json=body), 201)
        yield routed
    finally:
        for engine in engines.values():
            engine.release.set()
        alpha.stop()
        beta.stop()
        for server in servers:
            server.shutdown()
            server.server_close()


def answered_by(response: httpx.Response) -> str:
    assert response.status_code == 200, response.text
    return response.headers["x-ficc-route-target"]


def test_a_route_answers_plain_and_streamed_from_its_first_target(routed: Routed) -> None:
    plain = routed.chat("overflow")
    assert answered_by(plain) == routed.local
    assert plain.json()["choices"][0]["message"]["content"] == "alpha"
    streamed = routed.chat("overflow", stream=True)
    assert answered_by(streamed) == routed.local
    assert streamed.headers["content-type"].startswith("text/event-stream")
    assert '"content": "alpha"' in streamed.text or '"content":"alpha"' in streamed.text
    assert streamed.text.rstrip().endswith("data: [DONE]")
    models = ok(routed.alpha.owner().get(f"{LOCAL_V1}/models"))["data"]
    assert {"overflow", "partner"} <= {m["id"] for m in models}


def test_a_busy_local_engine_overflows_to_the_peer(routed: Routed) -> None:
    engine = routed.engines["alpha"]
    engine.release.clear()
    engine.holding.clear()
    held: list[httpx.Response] = []
    holder = threading.Thread(target=lambda: held.append(routed.chat(routed.local, "hold")))
    holder.start()
    try:
        assert engine.holding.wait(30)
        overflowed = routed.chat("overflow", stream=True)
        assert answered_by(overflowed) == routed.remote
        assert '"content": "beta"' in overflowed.text or '"content":"beta"' in overflowed.text
    finally:
        engine.release.set()
        holder.join(30)
    assert held[0].status_code == 200
    assert routed.skips("overflow", routed.local, "busy") >= 1
    # Free again: the local service answers.
    assert answered_by(routed.chat("overflow")) == routed.local


def test_a_request_the_peer_accepted_and_failed_mid_stream_is_not_retried(
    routed: Routed,
) -> None:
    spare_before = len(routed.engines["spare"].asked)
    beta_before = len(routed.engines["beta"].asked)
    broken = routed.chat("partner", "break", stream=True)
    assert answered_by(broken) == routed.remote
    events = [line for line in broken.text.splitlines() if line.startswith("data: ")]
    assert '"beta"' in events[0]
    assert "error" in events[-1]
    assert len(routed.engines["beta"].asked) == beta_before + 1
    assert len(routed.engines["spare"].asked) == spare_before  # nothing replayed


def test_a_revoked_grant_sends_the_route_to_its_next_target(routed: Routed) -> None:
    grant = routed.grant()
    assert answered_by(routed.chat("partner")) == routed.remote
    ok(routed.beta.owner().delete(f"{API}/grants/{grant}"))
    spare = routed.chat("partner", stream=True)
    assert answered_by(spare) == routed.spare
    assert "spare" in spare.text
    skipped = sum(
        routed.skips("partner", routed.remote, outcome) for outcome in ("grant_revoked", "not_sent")
    )
    assert skipped >= 1


def test_a_stopped_peer_costs_one_slow_refusal_then_is_skipped(routed: Routed) -> None:
    routed.grant()
    assert answered_by(routed.chat("partner")) == routed.remote
    routed.beta.stop()
    for _ in range(5):
        assert answered_by(routed.chat("partner")) == routed.spare
    assert routed.skips("partner", routed.remote, "peer_unreachable") == 1
    assert routed.skips("partner", routed.remote, "circuit_open") == 4
