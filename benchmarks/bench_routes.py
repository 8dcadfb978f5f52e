"""Routes: what calling a route adds over calling its target directly, on one `ficc serve`.

The route's one target is a local service on the ``openai`` runtime in front of the instant
mock engine of :mod:`benchmarks.bench_inference`, so the figure is FICC's route look-up and
choice alone, not generation. Both calls go through FICC's local URL, one with ``model`` = the
route's name, the other with the service's ID, alternately (drift biases neither), plain and
streamed. Target: ≤ 0.3 ms added p50.

Then throughput: 8 clients on a ``least-busy`` route of two services against the sum of both
targets' own throughput, each measured alone under 8 clients. The two targets are paced
engines (:func:`engine`): each runs :data:`ENGINE_SLOTS` requests at once, each for
:data:`ENGINE_SECONDS`, and queues the rest, so a target's throughput is a property of its
engine, not of the two shared cores, and the sum is well defined. Each round measures target
one alone, target two alone and the route (the order turned each round: drift biases none);
the figure is the median of the rounds' ratios. Target: the route within 10 % of the sum.

``FICC_BENCH_ROUTES_REQUESTS`` changes the number of requests per latency series,
``FICC_BENCH_ROUTES_ROUNDS`` the number of throughput rounds.
"""

from __future__ import annotations

import asyncio
import os
import statistics
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
    mock_engine,
)
from benchmarks.processes import asgi_engine_running

REQUESTS: Final = int(os.environ.get("FICC_BENCH_ROUTES_REQUESTS", "300"))
ROUNDS: Final = int(os.environ.get("FICC_BENCH_ROUTES_ROUNDS", "5"))
TARGET_ADDED_P50_MS: Final = 0.3
CLIENTS: Final = 8
TARGET_THROUGHPUT_RATIO: Final = 0.9
LOCAL_V1: Final = "/api/v1/inference/v1"
ROUTE_NAME: Final = "bench-route"
PAIR_NAME: Final = "bench-pair"
ENGINE_SLOTS: Final = 2
"""Requests a paced engine runs at once; the rest wait in its queue, as on a GPU server."""
ENGINE_SECONDS: Final = 0.1
"""How long each request holds its slot: a paced engine alone does 20 requests a second."""
PACED: Final = ("/paced-one", "/paced-two")
"""Base-URL prefixes of the two paced engines (one process, a queue each)."""
PER_CLIENT_ALONE: Final = 5
"""Requests per client on one target alone (40 of them: about 2 s at 20 a second); on the
route twice as many, about as long at the sum's rate."""


_slots: dict[str, asyncio.Semaphore] = {}


async def engine(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The instant mock engine at the root; under each of :data:`PACED`, a paced one: a
    completion waits for one of its :data:`ENGINE_SLOTS` slots and holds it
    :data:`ENGINE_SECONDS`, then is answered as the mock engine answers."""
    path = scope.get("path", "")
    prefix = next((p for p in PACED if path.startswith(p + "/")), None)
    if prefix is None:
        await mock_engine(scope, receive, send)
        return
    inner = {**scope, "path": path.removeprefix(prefix)}
    if scope["method"] != "POST":
        await mock_engine(inner, receive, send)
        return
    slots = _slots.setdefault(prefix, asyncio.Semaphore(ENGINE_SLOTS))
    async with slots:
        await asyncio.sleep(ENGINE_SECONDS)
        await mock_engine(inner, receive, send)


def _engine_running(stack: ExitStack, work: Path) -> str:
    """The engine process (:func:`engine`) under uvicorn: its base URL."""
    return asgi_engine_running(
        stack, work, "benchmarks.bench_routes:engine", "paced", f"{PACED[0]}/v1/models"
    ).url


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


def _per_second(client_of: Callable[[], httpx.Client], model: str, each: int) -> float:
    """Streamed chats per second of :data:`CLIENTS` threads on ``model``, ``each`` apiece;
    the clock starts once every client is warmed up and stops when the last one is done."""
    errors: list[BaseException] = []
    opened: list[float] = []
    barrier = threading.Barrier(CLIENTS, action=lambda: opened.append(time.perf_counter()))

    def work() -> None:
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

    threads = [threading.Thread(target=work) for _ in range(CLIENTS)]
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


def _service(client: httpx.Client, name: str, base_url: str) -> str:
    spec = {
        "name": name,
        "model": MOCK_MODEL,
        "runtime": "openai",
        "options": {"base_url": base_url},
    }
    return str(_running_service(client, spec)["id"])


def _throughput_rows(client_of: Callable[[], httpx.Client], targets: list[str]) -> list[Any]:
    """Each round: each target alone under :data:`CLIENTS` clients, and the route; the
    rounds' ratios of the route to the sum of its targets, their median the figure."""
    measures: list[tuple[str, int]] = [
        *((target, PER_CLIENT_ALONE) for target in targets),
        (PAIR_NAME, PER_CLIENT_ALONE * len(targets)),
    ]
    ratios: list[float] = []
    sums: list[float] = []
    routed: list[float] = []
    for index in range(ROUNDS):
        turned = measures[index % len(measures) :] + measures[: index % len(measures)]
        seen = {model: _per_second(client_of, model, each) for model, each in turned}
        total = sum(seen[target] for target in targets)
        sums.append(total)
        routed.append(seen[PAIR_NAME])
        ratios.append(seen[PAIR_NAME] / total)
    shown = ", ".join(f"{ratio:.2f}" for ratio in ratios)
    return [
        row(
            "routes.two_targets.throughput",
            f"streamed chats/s, {CLIENTS} clients on a least-busy route of two paced engines "
            f"({ENGINE_SLOTS} at once, {ENGINE_SECONDS * 1000:g} ms each), median of {ROUNDS}",
            "req/s",
            statistics.median(routed),
            f"the sum of both targets' own, each alone under {CLIENTS} clients",
            statistics.median(sums),
        ),
        row(
            "routes.two_targets.throughput_ratio",
            f"the route's throughput over the sum of its targets', median of {ROUNDS} rounds "
            f"({shown})",
            "ratio",
            statistics.median(ratios),
            "target",
            TARGET_THROUGHPUT_RATIO,
        ),
    ]


def run() -> list[dict[str, Any]]:
    with (
        tempfile.TemporaryDirectory(prefix="ficc-bench-routes-") as temporary,
        ExitStack() as stack,
    ):
        work = Path(temporary)
        engine_url = _engine_running(stack, work)
        url, token, _ = _ficc_running(stack, work, engine_url)
        headers = {"Authorization": f"Bearer {token}"}

        def client_of() -> httpx.Client:
            return httpx.Client(base_url=url, headers=headers, timeout=60, transport=_no_delay())

        client = stack.enter_context(client_of())
        service = _service(client, "bench-mock", engine_url)
        route = {"name": ROUTE_NAME, "policy": "priority", "targets": [{"service": service}]}
        client.post("/api/v1/inference/routes", json=route).raise_for_status()
        chat = {"messages": [{"role": "user", "content": PROMPT}], "max_tokens": 2}
        path = f"{LOCAL_V1}/chat/completions"
        via_route = {**chat, "model": ROUTE_NAME}
        direct = {**chat, "model": service}
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
        targets = [
            _service(client, f"bench-paced-{index}", engine_url + prefix)
            for index, prefix in enumerate(PACED)
        ]
        pair = {
            "name": PAIR_NAME,
            "policy": "least-busy",
            "targets": [{"service": target} for target in targets],
        }
        client.post("/api/v1/inference/routes", json=pair).raise_for_status()
        return rows + _throughput_rows(client_of, targets)
