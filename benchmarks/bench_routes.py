"""Routes: what calling a route adds over calling its target directly, on one `ficc serve`.

The route's one target is a local service on the ``openai`` runtime in front of the instant
mock engine of :mod:`benchmarks.bench_inference` (its own process), so the figure is FICC's
route look-up and choice alone, not generation. Both calls go through FICC's local URL, one
with ``model`` = the route's name, the other with the service's ID, alternately (drift biases
neither), plain and streamed. Target: ≤ 0.3 ms added p50.

Then throughput: 8 clients on a ``least-busy`` route of two such services, beside 8 clients
calling the two services by their IDs (4 each, at once: the sum of both targets). Target: the
route within 10 % of that sum.

``FICC_BENCH_ROUTES_REQUESTS`` changes the number of requests per series.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Final

import httpx

from benchmarks import row
from benchmarks.bench_inference import (
    MOCK_MODEL,
    PROMPT,
    _ficc_running,
    _measure,
    _no_delay,
    _percentile,
    _plain_call,
    _running_service,
    _streamed_call,
)
from benchmarks.processes import mock_engine_running

REQUESTS: Final = int(os.environ.get("FICC_BENCH_ROUTES_REQUESTS", "300"))
TARGET_ADDED_P50_MS: Final = 0.3
CLIENTS: Final = 8
TARGET_THROUGHPUT_RATIO: Final = 0.9
LOCAL_V1: Final = "/api/v1/inference/v1"
ROUTE_NAME: Final = "bench-route"


def _rows(mode: str, route_ms: list[float], direct_ms: list[float]) -> list[dict[str, Any]]:
    rows = []
    for name, fraction in (("p50", 0.5), ("p99", 0.99)):
        routed = _percentile(route_ms, fraction)
        direct = _percentile(direct_ms, fraction)
        rows.append(
            row(
                f"routes.{mode}.{name}",
                f"{name} total time, {len(route_ms)} {mode} chats with model = a route's name",
                "ms",
                routed,
                "the route's target service called by its ID",
                direct,
            )
        )
        rows.append(
            row(
                f"routes.{mode}.added_{name}",
                f"{name} time a route adds over its target (route − target)",
                "ms",
                routed - direct,
                "target p50" if name == "p50" else f"the target direct {name}",
                TARGET_ADDED_P50_MS if name == "p50" else direct,
            )
        )
    return rows


def _per_second(client_of: Callable[[], httpx.Client], models: list[str], each: int) -> float:
    """Streamed chats per second of :data:`CLIENTS` threads, client ``i`` asking
    ``models[i % len(models)]``; the clock starts once every client is warmed up."""
    errors: list[BaseException] = []
    opened: list[float] = []
    barrier = threading.Barrier(CLIENTS, action=lambda: opened.append(time.perf_counter()))

    def work(model: str) -> None:
        try:
            with client_of() as http:
                call = _streamed_call(http, f"{LOCAL_V1}/chat/completions", _chat(model))
                call()
                barrier.wait()
                for _ in range(each):
                    call()
        except (httpx.HTTPError, RuntimeError, threading.BrokenBarrierError) as exc:
            errors.append(exc)
            barrier.abort()

    threads = [
        threading.Thread(target=work, args=(models[i % len(models)],)) for i in range(CLIENTS)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ended = time.perf_counter()
    if errors:
        raise RuntimeError(f"throughput: {errors[0]!r}") from errors[0]
    return CLIENTS * each / (ended - opened[0])


def _chat(model: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": PROMPT}], "max_tokens": 2, "model": model}


def run() -> list[dict[str, Any]]:
    with (
        tempfile.TemporaryDirectory(prefix="ficc-bench-routes-") as temporary,
        ExitStack() as stack,
    ):
        work = Path(temporary)
        mock_url = mock_engine_running(stack, work).url
        url, token, _ = _ficc_running(stack, work, mock_url)
        headers = {"Authorization": f"Bearer {token}"}
        client = stack.enter_context(
            httpx.Client(base_url=url, headers=headers, timeout=60, transport=_no_delay())
        )
        service = _running_service(
            client,
            {
                "name": "bench-mock",
                "model": MOCK_MODEL,
                "runtime": "openai",
                "options": {"base_url": mock_url},
            },
        )
        route = {"name": ROUTE_NAME, "policy": "priority", "targets": [{"service": service["id"]}]}
        client.post("/api/v1/inference/routes", json=route).raise_for_status()
        chat = {"messages": [{"role": "user", "content": PROMPT}], "max_tokens": 2}
        path = f"{LOCAL_V1}/chat/completions"
        via_route = {**chat, "model": ROUTE_NAME}
        direct = {**chat, "model": service["id"]}
        rows = _rows(
            "plain",
            *_measure(
                _plain_call(client, path, via_route), _plain_call(client, path, direct), REQUESTS
            ),
        )
        rows += _rows(
            "streamed",
            *_measure(
                _streamed_call(client, path, via_route),
                _streamed_call(client, path, direct),
                REQUESTS,
            ),
        )
        second = _running_service(
            client,
            {
                "name": "bench-mock-2",
                "model": MOCK_MODEL,
                "runtime": "openai",
                "options": {"base_url": mock_url},
            },
        )
        pair = {
            "name": "bench-pair",
            "policy": "least-busy",
            "targets": [{"service": service["id"]}, {"service": second["id"]}],
        }
        client.post("/api/v1/inference/routes", json=pair).raise_for_status()

        def client_of() -> httpx.Client:
            return httpx.Client(base_url=url, headers=headers, timeout=60, transport=_no_delay())

        each = max(REQUESTS // CLIENTS, 10)
        both = [service["id"], second["id"]]
        routed, summed = [], []
        for _ in range(2):  # alternately: drift biases neither
            routed.append(_per_second(client_of, ["bench-pair"], each))
            summed.append(_per_second(client_of, both, each))
        routed_value, summed_value = max(routed), max(summed)
        rows.append(
            row(
                "routes.two_targets.throughput",
                f"streamed chats/s, {CLIENTS} clients on a least-busy route of two services",
                "req/s",
                routed_value,
                f"{CLIENTS} clients on the two services by ID (4 each): their sum",
                summed_value,
            )
        )
        rows.append(
            row(
                "routes.two_targets.throughput_ratio",
                "the route's throughput over the sum of its targets'",
                "ratio",
                routed_value / summed_value,
                "target",
                TARGET_THROUGHPUT_RATIO,
            )
        )
        return rows
