"""CPU per streamed federated chat of this tree beside another revision's, in one run.

``python -m benchmarks.side_by_side REV`` (inside ``scripts/in-loopback-netns``) exports
``REV``'s ``src`` with ``git archive``, starts an alpha and a beta of each tree on one mock
engine, and alternates blocks of streamed 2-token federated chats between the two pairs
(:data:`BLOCKS` blocks of :data:`BLOCK` chats, the order swapped each block), then the
8-client throughput of each pair beside the engine called directly, alternated the same way.
Then real answer lengths: streamed chats of 128 and 512 tokens from the paced mock engine (a
token a millisecond, 8 KiB bodies with floats set), alternated the same way, give each tree's
CPU per request and its growth per chunk from the shorter to the longer. It prints one JSON
object: CPU ms per chat by process and tree, this tree's over the baseline's, each round's
8-client ratio, and the paced streams' figures.

Why this and not two runs: the same tree measured on two machines of this workplace differed
by more than two times, and on one machine from one run to the next by a third; a change worth
5 % shows only when both trees meet the same moments of the machine. Every figure it prints
compares with the one beside it, never with another run's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import tempfile
from contextlib import ExitStack
from io import BytesIO
from pathlib import Path
from typing import Any, Final

import httpx

from benchmarks import bench_federation as federation
from benchmarks.bench_inference import MOCK_MODEL, PACED_PREFIX
from benchmarks.processes import cpu_seconds, mock_engine_running

BLOCK: Final = int(os.environ.get("FICC_SIDE_BY_SIDE_BLOCK", "50"))
BLOCKS: Final = int(os.environ.get("FICC_SIDE_BY_SIDE_BLOCKS", "12"))
ROUNDS: Final = int(os.environ.get("FICC_SIDE_BY_SIDE_ROUNDS", "4"))
"""8-client rounds: the engine direct, then each tree (in turn first)."""
EACH: Final = 40
"""Chats per client in an 8-client round."""
PACED_BLOCKS: Final = int(os.environ.get("FICC_SIDE_BY_SIDE_PACED_BLOCKS", "6"))
"""Blocks of paced streams: each tree streams one answer of each length per block."""
PACED_TOKENS: Final = (128, 512)
PACED_BODY_KIB: Final = 8
TREES: Final = ("baseline", "this")


def _exported(revision: str, into: Path) -> Path:
    """``revision``'s ``src`` written under ``into``; the folder to put on ``PYTHONPATH``."""
    archive = subprocess.run(
        ["git", "archive", revision, "src"],
        cwd=federation.ROOT,
        check=True,
        capture_output=True,
    ).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into / "src"


def measure(revision: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="ficc-side-") as temporary, ExitStack() as stack:
        work = Path(temporary)
        sources = {"baseline": _exported(revision, work / "baseline"), "this": None}
        engine = mock_engine_running(stack, work)
        spec = {"name": "mock", "model": MOCK_MODEL, "runtime": "openai"}
        pairs: dict[str, tuple[int, int, federation.Target, httpx.Client]] = {}
        paced_targets: dict[str, federation.Target] = {}
        for tree in TREES:
            source = sources[tree]
            alpha = federation._cluster(stack, work, f"alpha-{tree}", source=source)
            beta = federation._cluster(
                stack, work, f"beta-{tree}", "--upstream-allow", engine.url, source=source
            )
            service = federation._running_service(
                beta.client, {**spec, "options": {"base_url": engine.url}}
            )
            paced = federation._running_service(
                beta.client,
                {**spec, "name": "paced", "options": {"base_url": engine.url + PACED_PREFIX}},
            )
            target = federation.federated_target(alpha, beta, [service["id"], paced["id"]])
            paced_targets[tree] = federation.Target(
                "paced", target.base_url, target.headers, paced["id"]
            )
            http = stack.enter_context(
                httpx.Client(base_url=target.base_url, headers=target.headers, timeout=60)
            )
            for _ in range(federation.WARM_UP * 3):
                federation._streamed_chat(http, target)
            pairs[tree] = (alpha.pid, beta.pid, target, http)
        used = {tree: [0.0, 0.0] for tree in TREES}
        for block in range(BLOCKS):
            for tree in TREES if block % 2 == 0 else TREES[::-1]:
                alpha_pid, beta_pid, target, http = pairs[tree]
                before = cpu_seconds(alpha_pid), cpu_seconds(beta_pid)
                for _ in range(BLOCK):
                    federation._streamed_chat(http, target)
                used[tree][0] += cpu_seconds(alpha_pid) - before[0]
                used[tree][1] += cpu_seconds(beta_pid) - before[1]
        chats = BLOCK * BLOCKS
        found: dict[str, Any] = {"chats_each": chats, "baseline": revision}
        for tree in TREES:
            alpha_ms, beta_ms = (seconds * 1000 / chats for seconds in used[tree])
            found[tree] = {"alpha": alpha_ms, "beta": beta_ms, "both": alpha_ms + beta_ms}
        found["this_over_baseline"] = found["this"]["both"] / found["baseline"]["both"]
        direct = federation.Target("direct", f"{engine.url}/v1", {}, MOCK_MODEL)
        ratios: dict[str, list[float]] = {tree: [] for tree in TREES}
        for round_ in range(ROUNDS):
            alone = federation._concurrent(direct, federation.CLIENTS, EACH).per_second
            for tree in TREES if round_ % 2 == 0 else TREES[::-1]:
                rate = federation._concurrent(pairs[tree][2], federation.CLIENTS, EACH).per_second
                ratios[tree].append(rate / alone)
        found["c8_ratio"] = ratios
        found["paced_8k"] = _paced(pairs, paced_targets)
        return found


def _paced(
    pairs: dict[str, tuple[int, int, federation.Target, httpx.Client]],
    targets: dict[str, federation.Target],
) -> dict[str, Any]:
    """Each tree's CPU ms per paced streamed chat of each length (both clusters), and its
    growth per chunk from the shorter to the longer; blocks alternated as the chats are."""
    bodies = {tokens: federation.history_body(PACED_BODY_KIB, tokens) for tokens in PACED_TOKENS}
    used = {tree: dict.fromkeys(PACED_TOKENS, 0.0) for tree in TREES}
    chunks = dict.fromkeys(PACED_TOKENS, 0)
    for tree in TREES:
        http, target = pairs[tree][3], targets[tree]
        for tokens in PACED_TOKENS:
            federation._counted_stream(http, target, bodies[tokens])  # warm-up
    for block in range(PACED_BLOCKS):
        for tree in TREES if block % 2 == 0 else TREES[::-1]:
            alpha_pid, beta_pid, _, http = pairs[tree]
            for tokens in PACED_TOKENS:
                before = cpu_seconds(alpha_pid) + cpu_seconds(beta_pid)
                chunks[tokens], _ = federation._counted_stream(http, targets[tree], bodies[tokens])
                used[tree][tokens] += cpu_seconds(alpha_pid) + cpu_seconds(beta_pid) - before
    short, long = PACED_TOKENS
    found: dict[str, Any] = {"chunks": chunks}
    for tree in TREES:
        per_request = {tokens: used[tree][tokens] * 1000 / PACED_BLOCKS for tokens in PACED_TOKENS}
        found[tree] = {
            "both_ms": per_request,
            "growth_per_chunk_ms": (per_request[long] - per_request[short])
            / (chunks[long] - chunks[short]),
        }
    return found


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m benchmarks.side_by_side REVISION")
    print(json.dumps(measure(sys.argv[1]), indent=1))
