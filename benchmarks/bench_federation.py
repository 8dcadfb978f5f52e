"""Federation overhead: two real clusters over HyperNet beside the local URL and the engine.

Two `ficc serve` processes pair over real iroh on loopback. beta runs two services: the
example model (SmolLM2) on the ``llama.cpp`` runtime, and the ``openai`` runtime in front of
the instant mock engine of :mod:`benchmarks.bench_inference` (its own process), so that FICC's
own cost is not hidden by generation time.

Measured (every process on loopback; run in a loopback-only network namespace):

(a) ``discover`` through both clusters (HTTP POST /peers/{id}/request on alpha), p50/p99,
    beside a raw iroh round trip; target p50 ≤ 2 × raw + 1 ms.
(b) a streamed chat completion (``max_tokens`` 2, temperature 0): time to first byte and total
    time through both clusters (alpha's federated URL), through beta's local URL, and straight
    to the engine; p50/p99, sequentially and with 8 concurrent clients; requests per second
    with 8 clients. Targets through both clusters: ≤ 5 ms p50 and ≤ 15 ms p99 added over the
    engine directly; ≥ 0.5 × the direct throughput with 8 clients.

``FICC_BENCH_FEDERATION_REQUESTS`` changes the number of sequential requests per target.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import httpx

from benchmarks import row
from benchmarks.bench_hypernet import _raw_pair, _raw_round_trips
from benchmarks.bench_inference import MOCK_MODEL
from benchmarks.processes import mock_engine_running, running_process, wait_until

REQUESTS: Final = int(os.environ.get("FICC_BENCH_FEDERATION_REQUESTS", "300"))
ENGINE_REQUESTS: Final = max(REQUESTS // 6, 20)
"""The real engine takes tens of milliseconds a request: fewer are enough for percentiles."""
CLIENTS: Final = 8
WARM_UP: Final = 10
START_SECONDS: Final = 60.0
ROOT: Final = Path(__file__).resolve().parent.parent
API: Final = "/api/v1/federation"
LOCAL_V1: Final = "/api/v1/inference/v1"
TARGET_DISCOVER_FACTOR: Final = 2.0
TARGET_DISCOVER_EXTRA_MS: Final = 1.0
TARGET_ADDED_P50_MS: Final = 5.0
TARGET_ADDED_P99_MS: Final = 15.0
TARGET_THROUGHPUT_RATIO: Final = 0.5
CHAT: Final = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "temperature": 0}


# --- processes ------------------------------------------------------------------------------


@dataclass
class Cluster:
    url: str
    state: Path
    client: httpx.Client


def _cluster(stack: ExitStack, work: Path, name: str, *extra: str) -> Cluster:
    state = work / name
    argv = [sys.executable, "-m", "ficc", "serve", "--state-dir", str(state)]
    argv += ["--listen", "127.0.0.1:0", "--hypernet-bind", "127.0.0.1:0", *extra]
    process = stack.enter_context(running_process(argv, work / f"{name}.log"))
    server_json = state / "server.json"

    def serving() -> bool:
        try:
            return bool(json.loads(server_json.read_text())["pid"] == process.pid)
        except (OSError, ValueError, KeyError):
            return False

    wait_until(serving, f"ficc serve ({name})", process)
    url = str(json.loads(server_json.read_text())["url"])
    token = (state / "owner.token").read_text().strip()
    headers = {"Authorization": f"Bearer {token}"}
    client = stack.enter_context(httpx.Client(base_url=url, headers=headers, timeout=60))
    agent = {"agent_directory": str(work / f"{name}-agent"), "label": name}
    _ok(client.put(f"{API}/configuration", json=agent))
    return Cluster(url, state, client)


def _ok(response: httpx.Response, status: int = 200) -> Any:
    if response.status_code != status:
        raise RuntimeError(
            f"{response.request.url} answered {response.status_code}: {response.text}"
        )
    return response.json()


def _cli(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "ficc", *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        cwd=ROOT,
    )
    return done.stdout.strip()


def _running_service(client: httpx.Client, spec: dict[str, Any]) -> dict[str, Any]:
    service = _ok(client.post("/api/v1/inference/services", json=spec), 201)
    control = {"revision": service["revision"], "operation": "start"}
    _ok(client.post(f"/api/v1/inference/services/{service['id']}/control", json=control))
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        shown: dict[str, Any] = _ok(client.get(f"/api/v1/inference/services/{service['id']}"))
        if shown["state"] == "running":
            return shown
        if shown["state"] == "failed":
            raise RuntimeError(f"service {spec['name']} failed: {shown['error']}")
        time.sleep(0.05)
    raise RuntimeError(f"service {spec['name']} did not start in {START_SECONDS:g} s")


def _pair(alpha: Cluster, beta: Cluster, services: list[str]) -> str:
    """alpha's peer ID for beta, with a roomy grant over ``services`` selected."""
    identity = _ok(beta.client.get(f"{API}/"))["identity"]
    scopes = ["discover", "inference:invoke"]
    offer = {"service": identity["hypernet_id"], "scopes": scopes, "ticket": identity["ticket"]}
    sent = _ok(alpha.client.post(f"{API}/offers", json=offer), 201)
    grant = {"scopes": scopes, "services": services, "concurrent": 16, "requests": 1_000_000}
    approved = _ok(
        beta.client.post(f"{API}/offers/{sent['id']}/approve", json={"revision": 1, "grant": grant})
    )
    finish = {"receipt": approved["receipt"]["digest"]}
    finished = _ok(alpha.client.post(f"{API}/offers/{sent['id']}/finish", json=finish))
    return str(finished["peer"]["id"])


# --- measuring ------------------------------------------------------------------------------


def _percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def _raw_iroh_ms(count: int) -> list[float]:
    async def measure() -> list[float]:
        server, client, server_connection, client_connection = await _raw_pair()
        try:
            return await _raw_round_trips(server_connection, client_connection)
        finally:
            await client.close()
            await server.close()

    return [sample * 1000 for sample in asyncio.run(measure())][:count]


def _discover_ms(alpha: Cluster, peer: str, count: int) -> list[float]:
    url = f"{API}/peers/{peer}/request"
    body = {"operation": "discover", "body": {}}
    for _ in range(WARM_UP):
        _ok(alpha.client.post(url, json=body))
    samples = []
    for _ in range(count):
        started = time.perf_counter()
        _ok(alpha.client.post(url, json=body))
        samples.append((time.perf_counter() - started) * 1000)
    return samples


@dataclass(frozen=True)
class Target:
    """One way to reach the engine: a base URL, headers and the model name it takes."""

    label: str
    base_url: str
    headers: dict[str, str]
    model: str


def _streamed_chat(client: httpx.Client, target: Target) -> tuple[float, float]:
    """(time to first byte, total) in ms of one streamed chat, checked to end with [DONE]."""
    body = {**CHAT, "model": target.model, "stream": True}
    started = time.perf_counter()
    first = 0.0
    last = ""
    with client.stream("POST", "/chat/completions", json=body) as response:
        if response.status_code != 200:
            raise RuntimeError(f"{target.label} answered {response.status_code}")
        for line in response.iter_lines():
            if line.startswith("data: "):
                if not first:
                    first = time.perf_counter()
                last = line
    ended = time.perf_counter()
    if last != "data: [DONE]":
        raise RuntimeError(f"{target.label}: the stream did not end with [DONE]: {last[:200]}")
    return (first - started) * 1000, (ended - started) * 1000


@dataclass
class Samples:
    ttfb: list[float]
    total: list[float]
    per_second: float = 0.0


def _sequential(targets: list[Target], count: int) -> dict[str, Samples]:
    """Round robin over the targets (drift biases none), one request at a time."""
    clients = {
        t.label: httpx.Client(base_url=t.base_url, headers=t.headers, timeout=60) for t in targets
    }
    try:
        for target in targets:
            for _ in range(WARM_UP):
                _streamed_chat(clients[target.label], target)
        found = {t.label: Samples([], []) for t in targets}
        for _ in range(count):
            for target in targets:
                ttfb, total = _streamed_chat(clients[target.label], target)
                found[target.label].ttfb.append(ttfb)
                found[target.label].total.append(total)
        return found
    finally:
        for client in clients.values():
            client.close()


def _concurrent(target: Target, clients: int, each: int) -> Samples:
    """``clients`` threads, each with its own connection, ``each`` requests apiece."""
    found = Samples([], [])
    lock = threading.Lock()
    errors: list[BaseException] = []
    barrier = threading.Barrier(clients)

    def work() -> None:
        try:
            with httpx.Client(base_url=target.base_url, headers=target.headers, timeout=60) as http:
                _streamed_chat(http, target)
                barrier.wait()
                for _ in range(each):
                    ttfb, total = _streamed_chat(http, target)
                    with lock:
                        found.ttfb.append(ttfb)
                        found.total.append(total)
        except (httpx.HTTPError, RuntimeError, threading.BrokenBarrierError) as exc:
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=work) for _ in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    if errors:
        raise RuntimeError(f"{target.label}: {errors[0]!r}") from errors[0]
    found.per_second = len(found.total) / elapsed
    return found


def _chat_rows(engine: str, mode: str, found: dict[str, Samples]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    direct = found["direct"]
    for metric, pick in (("ttfb", "ttfb"), ("total", "total")):
        for name, fraction in (("p50", 0.5), ("p99", 0.99)):
            base = _percentile(getattr(direct, pick), fraction)
            for via in ("federated", "local"):
                value = _percentile(getattr(found[via], pick), fraction)
                rows.append(
                    row(
                        f"federation.chat.{engine}.{mode}.{via}.{metric}.{name}",
                        f"{name} {metric} of a streamed chat through "
                        + ("both clusters" if via == "federated" else "beta's local URL"),
                        "ms",
                        value,
                        f"{engine} engine directly",
                        base,
                    )
                )
            added = _percentile(getattr(found["federated"], pick), fraction) - base
            target = TARGET_ADDED_P50_MS if name == "p50" else TARGET_ADDED_P99_MS
            rows.append(
                row(
                    f"federation.chat.{engine}.{mode}.added.{metric}.{name}",
                    f"{name} {metric} both clusters add over the engine directly",
                    "ms",
                    added,
                    "target",
                    target,
                )
            )
    return rows


def _throughput_rows(engine: str, found: dict[str, Samples]) -> list[dict[str, Any]]:
    direct = found["direct"].per_second
    rows = [
        row(
            f"federation.chat.{engine}.c{CLIENTS}.{via}.throughput",
            f"streamed chats per second with {CLIENTS} clients",
            "req/s",
            found[via].per_second,
            f"{engine} engine directly",
            direct,
        )
        for via in ("federated", "local")
    ]
    rows.append(
        row(
            f"federation.chat.{engine}.c{CLIENTS}.throughput_ratio",
            "federated ÷ direct throughput beside the target ratio",
            "ratio",
            found["federated"].per_second / direct if direct else 0.0,
            "target",
            TARGET_THROUGHPUT_RATIO,
        )
    )
    return rows


def _engine_rows(engine: str, targets: list[Target], count: int) -> list[dict[str, Any]]:
    sequential = _sequential(targets, count)
    concurrent = {t.label: _concurrent(t, CLIENTS, max(count // CLIENTS, 3)) for t in targets}
    return (
        _chat_rows(engine, "sequential", sequential)
        + _chat_rows(engine, f"c{CLIENTS}", concurrent)
        + _throughput_rows(engine, concurrent)
    )


def run() -> list[dict[str, Any]]:
    with (
        tempfile.TemporaryDirectory(prefix="ficc-bench-federation-") as temporary,
        ExitStack() as stack,
    ):
        work = Path(temporary)
        mock_url = mock_engine_running(stack, work)
        alpha = _cluster(stack, work, "alpha")
        beta = _cluster(stack, work, "beta", "--upstream-allow", mock_url)
        example = _cli("example-model")
        model = json.loads(
            _cli("model-add", "--state-dir", str(beta.state), "--name", "smol", example)
        )
        llama = _running_service(
            beta.client, {"name": "bench-llama", "model": model["id"], "runtime": "llama.cpp"}
        )
        mock = _running_service(
            beta.client,
            {
                "name": "bench-mock",
                "model": MOCK_MODEL,
                "runtime": "openai",
                "options": {"base_url": mock_url},
            },
        )
        peer = _pair(alpha, beta, [llama["id"], mock["id"]])

        raw = _raw_iroh_ms(REQUESTS)
        discover = _discover_ms(alpha, peer, REQUESTS)
        raw_p50, raw_p99 = _percentile(raw, 0.5), _percentile(raw, 0.99)
        rows = [
            row(
                "federation.discover.p50",
                f"p50 of discover through both clusters ({REQUESTS} requests)",
                "ms",
                _percentile(discover, 0.5),
                "raw iroh round trip p50",
                raw_p50,
            ),
            row(
                "federation.discover.p99",
                "p99 of discover through both clusters",
                "ms",
                _percentile(discover, 0.99),
                "raw iroh round trip p99",
                raw_p99,
            ),
            row(
                "federation.discover.p50_vs_target",
                "discover p50 beside its target (2 × raw p50 + 1 ms)",
                "ms",
                _percentile(discover, 0.5),
                "target",
                TARGET_DISCOVER_FACTOR * raw_p50 + TARGET_DISCOVER_EXTRA_MS,
            ),
        ]

        alpha_token = dict(alpha.client.headers)["authorization"]
        beta_token = dict(beta.client.headers)["authorization"]
        federated_v1 = f"{alpha.url}{API}/peers/{peer}/v1"
        (replica,) = llama["replicas"]

        def targets(service: str, direct_url: str, direct_model: str) -> list[Target]:
            return [
                Target("federated", federated_v1, {"Authorization": alpha_token}, service),
                Target("local", beta.url + LOCAL_V1, {"Authorization": beta_token}, service),
                Target("direct", direct_url, {}, direct_model),
            ]

        rows += _engine_rows("mock", targets(mock["id"], f"{mock_url}/v1", MOCK_MODEL), REQUESTS)
        engine_url = f"http://127.0.0.1:{replica['port']}/v1"
        rows += _engine_rows(
            "llama_cpp", targets(llama["id"], engine_url, llama["id"]), ENGINE_REQUESTS
        )
        return rows


if __name__ == "__main__":
    for item in run():
        print(item)
