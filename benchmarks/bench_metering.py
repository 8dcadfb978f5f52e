"""Metered grants: CPU per federated streamed chat with token rules beside the same grant
without them, and a token budget's admission under 8 concurrent clients.

On the mock engine (an ``openai`` service, so no tokenizer call: what is measured is FICC's
own work). ``python -m benchmarks metering``; ``FICC_BENCH_METERING_REQUESTS`` sets the count.
"""

from __future__ import annotations

import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Final

import httpx

from benchmarks import bench_federation as federation
from benchmarks import row
from benchmarks.bench_inference import MOCK_MODEL
from benchmarks.processes import mock_engine_running

REQUESTS: Final = int(os.environ.get("FICC_BENCH_METERING_REQUESTS", "300"))
CLIENTS: Final = 8
METERED: Final = {"tokens": 10**12, "tokens_per_minute": 10**9, "requests_per_minute": 10**6}
"""Token rules that never refuse here: what they cost, not what they refuse."""


def _grant(alpha: federation.Cluster, beta: federation.Cluster, peer: str, **terms: Any) -> str:
    """A further grant from beta to alpha over the service, selected on alpha."""
    overview = federation._ok(beta.client.get(f"{federation.API}/"))
    (beta_peer,) = [p["id"] for p in overview["peers"]]
    given = federation._ok(
        beta.client.post(f"{federation.API}/peers/{beta_peer}/grants", json=terms), 201
    )
    federation._ok(alpha.client.post(f"{federation.API}/peers/{peer}/refresh", json={}))
    federation._ok(
        alpha.client.post(f"{federation.API}/peers/{peer}/refresh", json={"grant": given["id"]})
    )
    return str(given["id"])


def _admissions(target: federation.Target, budget_requests: int) -> tuple[float, int, int]:
    """8 clients racing for a budget: ms per admission decision (admitted or refused), and
    how many of each."""
    body = {**federation.CHAT, "model": target.model, "stream": True}
    statuses: list[int] = []

    def one(_: int) -> int:
        with (
            httpx.Client(base_url=target.base_url, headers=target.headers, timeout=60) as http,
            http.stream("POST", "/chat/completions", json=body) as response,
        ):
            for _ in response.iter_lines():
                pass
            return response.status_code

    started = time.perf_counter()
    with ThreadPoolExecutor(CLIENTS) as pool:
        statuses = list(pool.map(one, range(budget_requests)))
    elapsed = (time.perf_counter() - started) * 1000
    return elapsed / len(statuses), statuses.count(200), statuses.count(429)


def run() -> list[dict[str, Any]]:
    with (
        tempfile.TemporaryDirectory(prefix="ficc-bench-metering-") as temporary,
        ExitStack() as stack,
    ):
        work = Path(temporary)
        engine = mock_engine_running(stack, work)
        alpha = federation._cluster(stack, work, "alpha")
        beta = federation._cluster(stack, work, "beta", "--upstream-allow", engine.url)
        spec = {"name": "mock", "model": MOCK_MODEL, "runtime": "openai"}
        service = federation._running_service(
            beta.client, {**spec, "options": {"base_url": engine.url}}
        )["id"]
        peer = federation._pair(alpha, beta, [service])
        auth = {"Authorization": dict(alpha.client.headers)["authorization"]}
        target = federation.Target(
            "federated", f"{alpha.url}{federation.API}/peers/{peer}/v1", auth, service
        )
        pids = {"alpha": alpha.pid, "beta": beta.pid}
        base = {"scopes": ["inference:invoke"], "services": [service], "concurrent": 16}
        used: dict[str, dict[str, float]] = {}
        # Alternated, so the machine's drift weighs on both alike.
        for round_ in range(2):
            for label, terms in (("off", {}), ("on", METERED)):
                _grant(alpha, beta, peer, **base, requests=1_000_000, **terms)
                with httpx.Client(base_url=target.base_url, headers=auth, timeout=60) as http:
                    found = federation._cpu_ms(
                        pids, lambda: federation._streamed_chat(http, target), REQUESTS // 2
                    )
                previous = used.get(label, {"alpha": 0.0, "beta": 0.0})
                used[label] = {k: previous[k] + found[k] / 2 for k in ("alpha", "beta")}
            del round_
        rows = [
            row(
                f"metering.cpu.streamed_chat.{side}",
                f"CPU ms {side} used per streamed chat under a metered grant",
                "CPU ms",
                used["on"][side],
                "the same grant without token rules",
                used["off"][side],
            )
            for side in ("alpha", "beta")
        ]
        on, off = sum(used["on"].values()), sum(used["off"].values())
        rows.append(
            row(
                "metering.cpu.streamed_chat.clusters",
                "CPU ms alpha + beta per streamed chat under a metered grant",
                "CPU ms",
                on,
                "the same grant without token rules",
                off,
            )
        )
        # A budget of about 20 chats' reservations ("Hi": 2 bytes + 72 of template, and 2 of
        # completion), raced by 8 clients asking for 80.
        chat_tokens = 76
        _grant(alpha, beta, peer, **base, tokens=20 * chat_tokens, requests=1_000_000)
        per_ms, admitted, refused = _admissions(target, 80)
        rows.append(
            row(
                "metering.admission.c8",
                f"ms per token-budget decision, 8 clients ({admitted} admitted, {refused} refused)",
                "ms",
                per_ms,
                "admitted + refused",
                float(admitted + refused),
            )
        )
        return rows


if __name__ == "__main__":
    import json

    print(json.dumps(run(), indent=1))
