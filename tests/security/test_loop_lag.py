"""A login flood must not stall the event loop that also carries HyperNet heartbeats and the API.

A real server; twenty attackers, each from its own loopback address, send wrong passwords
from another process while this one times a cheap authenticated request (the node list) again
and again. A request waits for the server's loop, so its worst time bounds the loop's worst
stall. With Argon2 on the loop each wrong password held it for a full hash (~50-250 ms), one
after another.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from tests.security.conftest import Figures
from tests.support.authority import query, set_owner_password
from tests.support.cluster import RunningCluster
from tests.support.hostile_peer import memory_kib
from tests.support.loop_watchdog import loop_watchdog

from ficc.adapters.engines.client import EMBEDDINGS, EngineClient
from ficc.base.errors import LimitExceeded
from ficc.base.units import MiB
from ficc.domain.inference import RuntimeName
from ficc.domain.openai_requests import EMBEDDINGS_PATH
from ficc.services.inference.invoke import encoded_answer

ROOT = Path(__file__).resolve().parents[2]
ATTACKERS = 20
TRIES_EACH = 5
MAX_LOOP_LAG_SECONDS = 1.0
"""Heartbeats go every second and a peer silent for 3.5 s is dead: a probe answered within a
second means no heartbeat is late enough to matter. (With Argon2 on the loop the worst probe
took 16 s; with the hashes in two worker threads on two cores it is about 80-260 ms, the hashes
and the loop competing for the same cores.)"""
FLOOD_DEADLINE_SECONDS = 120.0

FLOOD = """
import asyncio, json, sys
import httpx

async def attacker(url, tries, address):
    codes = []
    transport = httpx.AsyncHTTPTransport(local_address=address)
    async with httpx.AsyncClient(base_url=url, timeout=60, transport=transport) as client:
        for _ in range(tries):
            answer = await client.post(
                "/api/v1/session", json={"username": "owner", "password": "guess guess"}
            )
            codes.append(answer.status_code)
    return codes

async def main(url, attackers, tries):
    # Each attacker from its own loopback address, so per-address limits do not stop them all.
    results = await asyncio.gather(
        *(attacker(url, tries, f"127.0.0.{index + 2}") for index in range(attackers))
    )
    print(json.dumps([code for codes in results for code in codes]))

asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
"""


def test_a_flood_of_wrong_passwords_never_stalls_the_event_loop(
    cluster: RunningCluster, figures: Figures
) -> None:
    set_owner_password(cluster)
    owner = cluster.owner()
    baseline = []
    for _ in range(10):
        started = time.perf_counter()
        assert owner.get("/api/v1/nodes").status_code == 200
        baseline.append(time.perf_counter() - started)
    flood = subprocess.Popen(
        [sys.executable, "-c", FLOOD, cluster.url, str(ATTACKERS), str(TRIES_EACH)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    probes: list[float] = []
    deadline = time.monotonic() + FLOOD_DEADLINE_SECONDS
    while flood.poll() is None:
        assert time.monotonic() < deadline, "the flood did not finish in time"
        started = time.perf_counter()
        assert owner.get("/api/v1/nodes").status_code == 200
        probes.append(time.perf_counter() - started)
    output, errors = flood.communicate()
    assert flood.returncode == 0, errors
    codes = json.loads(output)
    assert len(codes) == ATTACKERS * TRIES_EACH
    assert set(codes) <= {401, 429}
    # A refused login leaves no session behind.
    assert query(cluster.state_dir, "SELECT id FROM web_sessions") == []
    worst = max(probes)
    figures.record(
        tries=len(codes),
        refused=len(codes),
        throttled=codes.count(429),
        probes=len(probes),
        baseline_probe_ms=round(max(baseline) * 1000, 1),
        max_loop_lag_ms=round(worst * 1000, 1),
    )
    assert worst < MAX_LOOP_LAG_SECONDS


MAX_FLOOD_STALL_SECONDS = 0.25
"""The worst stall any of the body floods below may cause (G2, G7, G8)."""
BODY_FLOOD = """
import asyncio, json, sys
import httpx

async def attacker(url, body, tries):
    codes = []
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        for _ in range(tries):
            answer = await client.post(
                "/api/v1/federation/peers/x/request",
                content=body,
                headers={"content-type": "application/json"},
            )
            codes.append(answer.status_code)
    return codes

async def main(url, attackers, tries, mib):
    # {"operation":"discover","body":{"a":[{},{},...]}}: the review's 64 MiB body (G2).
    count = (mib * 2**20 - 64) // 3
    body = b'{"operation":"discover","body":{"a":[' + b"{}," * count + b'{}]}}'
    results = await asyncio.gather(*(attacker(url, body, tries) for _ in range(attackers)))
    print(json.dumps([code for codes in results for code in codes]))

asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])))
"""


def test_unauthenticated_64_mib_bodies_are_refused_before_they_are_read(
    cluster: RunningCluster, figures: Figures
) -> None:
    """G2: without a credential nothing past 1 MiB is read, held or decoded, on any route: a
    flood of 64 MiB bodies on the federated request route is answered 401 while the owner's
    requests go on being served at once."""
    owner = cluster.owner()
    pid = cluster.process.pid
    before = memory_kib(pid)
    flood = subprocess.Popen(
        [sys.executable, "-c", BODY_FLOOD, cluster.url, "2", "2", "64"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    probes: list[float] = []
    deadline = time.monotonic() + FLOOD_DEADLINE_SECONDS
    while flood.poll() is None:
        assert time.monotonic() < deadline, "the flood did not finish in time"
        started = time.perf_counter()
        assert owner.get("/api/v1/nodes").status_code == 200
        probes.append(time.perf_counter() - started)
    output, errors = flood.communicate()
    assert flood.returncode == 0, errors
    codes = json.loads(output)
    after = memory_kib(pid)
    worst = max(probes)
    peak_growth_mib = (after["VmHWM"] - before["VmHWM"]) / 1024
    figures.record(
        bodies=len(codes),
        body_mib=64,
        peak_rss_mib=round(after["VmHWM"] / 1024),
        peak_growth_mib=round(peak_growth_mib),
        worst_stall_ms=round(worst * 1000, 1),
        friends_served=len(probes),
    )
    assert codes == [401] * 4
    assert worst < MAX_FLOOD_STALL_SECONDS
    assert peak_growth_mib < 64


def _per_token_embeddings(inputs: int, tokens: int, width: int) -> bytes:
    """An engine's answer as llama.cpp gives it for a model without pooling: one vector per
    token of each input (the review's case: 1900 inputs x 3 tokens x 576 floats, 36 MiB)."""
    vector = "[" + ",".join(f"{0.001 * (i % 997) - 0.5:.7f}" for i in range(width)) + "]"
    item = '{"index":%d,"object":"embedding","embedding":[' + ",".join([vector] * tokens) + "]}"
    data = ",".join(item % index for index in range(inputs))
    return ('{"object":"list","model":"m","data":[' + data + "]}").encode()


@contextlib.asynccontextmanager
async def embeddings_engine(answer: bytes) -> AsyncIterator[str]:
    """A bare HTTP engine answering every request with ``answer``."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length")
        )
        await reader.readexactly(length)
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\nconnection: close\r\n\r\n" % len(answer)
        )
        # As a real engine (another process) sends it: a MiB at a time, never copied whole
        # into this loop's write buffer, which would be a stall of the test's own making.
        with contextlib.suppress(ConnectionError):
            for start in range(0, len(answer), MiB):
                writer.write(answer[start : start + MiB])
                await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    async with server:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


async def _embeddings_under_watch() -> dict[str, Any]:
    """The G7 scenario below, as figures: the refusal past 1 MiB, then a 36 MiB answer read,
    decoded, averaged and encoded while a watchdog ticks on the loop."""
    answer = _per_token_embeddings(1900, 3, 576)
    body = {"model": "m", "input": ["x"] * 1900}
    async with embeddings_engine(answer) as url, EngineClient(url) as client:
        try:
            await client.complete(EMBEDDINGS, body, max_bytes=MiB)
            refused: dict[str, Any] | None = None
        except LimitExceeded as exc:
            refused = dict(exc.details)
        async with loop_watchdog() as lag:
            ticks_before = lag.ticks
            value = await client.complete(EMBEDDINGS, body, max_bytes=64 * MiB)
            content, size = await asyncio.to_thread(
                encoded_answer, RuntimeName.LLAMA_CPP, EMBEDDINGS_PATH, body, value, gradual=True
            )
        served = lag.ticks - ticks_before
    shaped = json.loads(content)
    return {
        "refused": refused,
        "answer_mib": round(len(answer) / MiB),
        "shaped_kib": round(size / 1024),
        "inputs": len(shaped["data"]),
        "width": len(shaped["data"][0]["embedding"]),
        "worst_stall_seconds": lag.worst_seconds,
        "loop_ticks_during": served,
    }


EMBEDDINGS_UNDER_WATCH = (
    "import asyncio, json\n"
    "from tests.security.test_loop_lag import _embeddings_under_watch\n"
    "print(json.dumps(asyncio.run(_embeddings_under_watch())))\n"
)


def test_a_large_embeddings_answer_is_bounded_by_response_bytes_and_decoded_off_the_loop(
    figures: Figures,
) -> None:
    """G7 (embeddings): the engine's answer counts against the grant's response_bytes while it
    is read; within it, a 36 MiB answer of per-token vectors is decoded, averaged and encoded
    (the encoding that measures it and is sent) in a worker thread while the loop ticks.

    It runs in a process of its own, as a server does, so that what earlier tests left in
    the suite's process (its heap, its threads) is not part of what it measures."""
    done = subprocess.run(
        [sys.executable, "-c", EMBEDDINGS_UNDER_WATCH],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.splitlines()[-1])
    figures.record(
        answer_mib=found["answer_mib"],
        shaped_kib=found["shaped_kib"],
        worst_stall_ms=round(found["worst_stall_seconds"] * 1000, 1),
        loop_ticks_during=found["loop_ticks_during"],
    )
    assert found["refused"] == {"limit": "response_bytes", "allowed": MiB}
    assert (found["inputs"], found["width"]) == (1900, 576)
    assert found["worst_stall_seconds"] < MAX_FLOOD_STALL_SECONDS
