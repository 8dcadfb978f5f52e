"""Metered grants: CPU per federated streamed chat with token rules beside the same grant
without them, a token budget's admission under 8 concurrent clients, and the CPU a usage
receipt adds to a request (signed on the grantor, checked and kept on the requester, each in
the usage record's own transaction on a real SQLite file) beside the same records without one.

On the mock engine (an ``openai`` service, so no tokenizer call: what is measured is FICC's
own work). Each CPU figure alternates on and off ``FICC_BENCH_METERING_ROUNDS`` times (so the
machine's drift weighs on both alike) and is the median of the rounds, per side: alpha is the
requester, beta the grantor; the ``added`` rows are on minus off, against the targets (token
metering at most +0.3 ms a side, a receipt at most +0.2 ms over both sides).
``python -m benchmarks metering``; ``FICC_BENCH_METERING_REQUESTS`` sets the count.
"""

from __future__ import annotations

import asyncio
import os
import statistics
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

REQUESTS: Final = int(os.environ.get("FICC_BENCH_METERING_REQUESTS", "1200"))
"""Streamed chats of each label over all rounds: a process's CPU is read in clock ticks
(10 ms), so a round of 300 resolves about 0.03 ms a chat."""
ROUNDS: Final = int(os.environ.get("FICC_BENCH_METERING_ROUNDS", "4"))
"""How many times each CPU figure alternates on and off; the rows are the medians."""
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


def _admissions(
    target: federation.Target, budget_requests: int, max_tokens: int
) -> tuple[float, int, int]:
    """8 clients racing for a budget: ms per admission decision (admitted or refused), and
    how many of each."""
    body = {**federation.CHAT, "model": target.model, "stream": True, "max_tokens": max_tokens}
    statuses: list[int] = []

    def one(_: int) -> int:
        with (
            httpx.Client(base_url=target.base_url, headers=target.headers, timeout=60) as http,
            http.stream("POST", "/chat/completions", json=body) as response,
        ):
            for _line in response.iter_lines():
                pass
            return response.status_code

    started = time.perf_counter()
    with ThreadPoolExecutor(CLIENTS) as pool:
        statuses = list(pool.map(one, range(budget_requests)))
    elapsed = (time.perf_counter() - started) * 1000
    return elapsed / len(statuses), statuses.count(200), statuses.count(429)


RACE_REQUESTS: Final = 80
RACE_MAX_TOKENS: Final = 60
RACE_SETTLED: Final = 61
"""What one racing chat settles to: the mock engine's usage (1 prompt token, ``max_tokens``
of completion); its reservation is larger (the prompt's byte count and template, 74, plus
``max_tokens``), so the budget is spent by what settles, not by what is held."""
RACE_BUDGET: Final = 20 * RACE_SETTLED
"""About 20 chats' settled tokens, raced by 8 clients asking for 80."""


def budget_race_rows(
    beta: federation.Cluster, grant: str, target: federation.Target
) -> list[dict[str, Any]]:
    """The race for :data:`RACE_BUDGET` under ``grant``: ms per decision, and the tokens
    the grant settled beside its budget (never above it)."""
    per_ms, admitted, refused = _admissions(target, RACE_REQUESTS, RACE_MAX_TOKENS)
    overview = federation._ok(beta.client.get(f"{federation.API}/"))
    (shown,) = [item for item in overview["grants"] if item["id"] == grant]
    settled = shown["used"]["prompt_tokens"] + shown["used"]["completion_tokens"]
    if settled > RACE_BUDGET or admitted + refused != RACE_REQUESTS:
        raise AssertionError(
            f"the budget race settled {settled} of {RACE_BUDGET} tokens "
            f"({admitted} admitted, {refused} refused of {RACE_REQUESTS})"
        )
    return [
        row(
            "metering.admission.c8",
            f"ms per token-budget decision, 8 clients ({admitted} admitted, {refused} refused)",
            "ms",
            per_ms,
            "admitted + refused",
            float(admitted + refused),
        ),
        row(
            "metering.admission.c8.settled",
            f"tokens settled by the 8 clients' race ({admitted} admitted, {refused} refused)",
            "tokens",
            float(settled),
            "the grant's tokens budget",
            float(RACE_BUDGET),
        ),
    ]


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
        samples: dict[str, dict[str, list[float]]] = {}
        # Alternated, so the machine's drift weighs on both alike.
        for round_ in range(ROUNDS):
            for label, terms in (("off", {}), ("on", METERED)):
                _grant(alpha, beta, peer, **base, requests=1_000_000, **terms)
                with httpx.Client(base_url=target.base_url, headers=auth, timeout=60) as http:
                    found = federation._cpu_ms(
                        pids,
                        lambda: federation._streamed_chat(http, target),
                        max(REQUESTS // ROUNDS, 1),
                    )
                for side in ("alpha", "beta"):
                    samples.setdefault(label, {}).setdefault(side, []).append(found[side])
            del round_
        used = {
            label: {side: statistics.median(values) for side, values in sides.items()}
            for label, sides in samples.items()
        }
        roles = {"alpha": "requester (alpha)", "beta": "grantor (beta)"}
        rows = [
            row(
                f"metering.cpu.streamed_chat.{side}",
                f"CPU ms the {roles[side]} used per streamed chat, token rules on",
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
                "CPU ms alpha + beta per streamed chat, token rules on",
                "CPU ms",
                on,
                "the same grant without token rules",
                off,
            )
        )
        rows.extend(
            row(
                f"metering.cpu.streamed_chat.added.{side}",
                f"CPU ms token metering adds per streamed chat on the {roles[side]} "
                "(target <= 0.3)",
                "CPU ms",
                used["on"][side] - used["off"][side],
                "the side's CPU ms without token rules",
                used["off"][side],
            )
            for side in ("alpha", "beta")
        )
        raced = _grant(alpha, beta, peer, **base, tokens=RACE_BUDGET, requests=1_000_000)
        rows.extend(budget_race_rows(beta, raced, target))
        rows.extend(receipt_rows(RECEIPT_REQUESTS))
        return rows


RECEIPT_REQUESTS: Final = int(os.environ.get("FICC_BENCH_RECEIPT_REQUESTS", "200"))
"""Requests of each round, on and off alike."""


def receipt_rows(requests: int) -> list[dict[str, Any]]:
    """CPU ms per request of each side's usage-record transaction with its receipt beside
    without (alternated :data:`ROUNDS` times, so drift weighs on both alike; medians)."""
    return asyncio.run(_receipt_rows(requests))


async def _receipt_rows(requests: int) -> list[dict[str, Any]]:
    from datetime import UTC, datetime

    from ficc.adapters.keys import ClusterKey, verify_signature
    from ficc.adapters.sql.database import Database
    from ficc.adapters.sql.unit_of_work import SqlUnitOfWorkFactory
    from ficc.domain import grants as g
    from ficc.domain import metering as m
    from ficc.domain import peers as p
    from ficc.domain.peers import PeerRole, PeerState
    from ficc.services.federation.usage_receipts import UsageReceipts
    from ficc.services.metering import Meter

    now = datetime(2026, 12, 2, tzinfo=UTC)
    key = ClusterKey.generate()
    samples: dict[str, dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory(prefix="ficc-bench-receipts-") as temporary:
        database = Database(f"sqlite+pysqlite:///{Path(temporary) / 'ficc.db'}")
        await database.migrate()
        factory = SqlUnitOfWorkFactory(database)
        peer = p.Peer(
            "per_" + "a" * 26,
            "default",
            None,
            "b" * 64,
            key.public_text,
            PeerState.PAIRED,
            1,
            PeerRole.SERVICE,
            None,
            None,
            None,
            now,
            now,
        )
        keeper = UsageReceipts(None, verify_signature)  # type: ignore[arg-type]
        try:
            for round_ in range(ROUNDS):
                for label, signing in (("off", False), ("on", True)):
                    grant = g.Grant(
                        id=f"grt_{round_}{label}".ljust(30, "x"),
                        project="default",
                        peer_id=peer.id,
                        terms=g.parse_grant({"scopes": ["inference:invoke"]}),
                        state=g.GrantState.ACTIVE,
                        created_at=now,
                        expires_at=now,
                        revoked_at=None,
                        requests_used=0,
                        transfer_bytes_used=0,
                    )
                    meter = Meter(factory, lambda: now, sign=key.sign if signing else None)
                    grantor = requester = 0.0
                    for index in range(requests):
                        tab = meter.open_tab(grant, f"req-{index}", "inference.invoke", None, 90)
                        await tab.admit(12, 30)
                        tab.engine_started, tab.completion_tokens = True, 30
                        started = time.process_time()
                        told = await meter.settle(tab, m.COMPLETED)
                        middle = time.process_time()
                        record = m.UsageRecord(
                            tab.request,
                            grant.id,
                            m.REQUESTER,
                            "inference.invoke",
                            None,
                            now,
                            now,
                            12,
                            30,
                            90,
                            0,
                            m.COMPLETED,
                            told=True,
                        )
                        async with factory() as uow:
                            await uow.usage.add(record)
                            if signing:
                                await keeper.keep(uow, peer, record, told.get("receipt"))
                            await uow.commit()
                        requester += time.process_time() - middle
                        grantor += middle - started
                    sides = samples.setdefault(label, {"grantor": [], "requester": []})
                    sides["grantor"].append(grantor * 1000 / requests)
                    sides["requester"].append(requester * 1000 / requests)
        finally:
            await database.dispose()
    used = {
        label: {side: statistics.median(values) for side, values in sides.items()}
        for label, sides in samples.items()
    }
    rows = [
        row(
            f"usage_receipts.cpu.{side}",
            f"CPU ms of the {side}'s usage-record transaction with its receipt",
            "CPU ms",
            used["on"][side],
            "the same record without a receipt",
            used["off"][side],
        )
        for side in ("grantor", "requester")
    ]
    on, off = sum(used["on"].values()), sum(used["off"].values())
    rows.append(
        row(
            "usage_receipts.cpu.added",
            "CPU ms a usage receipt adds per request, both sides (target <= 0.2)",
            "CPU ms",
            on - off,
            "both sides' records without receipts",
            off,
        )
    )
    return rows


if __name__ == "__main__":
    import json

    print(json.dumps(run(), indent=1))
