"""How many Python function calls one streamed federated chat costs each cluster, by part.

``python -m benchmarks.call_counts`` (inside ``scripts/in-loopback-netns``) starts the mock
engine, alpha and beta as ``cpu_federation`` does, each server under ``cProfile`` on its event
loop's thread, and prints one JSON object: calls per chat on each side after a warm-up, in all
and by part (a package, or a module of FICC's; a built-in call counts for its caller's part).
A diagnostic that counts: a machine's speed moves CPU figures by a factor of two from one
machine to the next, a call count not at all, and each call costs about the same anywhere.
(The profiler slows what it watches: its times are not the servers'.) With
``FICC_CALL_COUNTS_TOKENS`` set (say 512), the chats are instead streamed answers of that many
tokens from the paced mock engine (8 KiB bodies), counted per chunk.

Each server runs as ``python -m benchmarks.call_counts serve …``: FICC's own command line
with the profiler on; ``SIGUSR1`` writes what it counted since the last signal and starts
again.
"""

from __future__ import annotations

import collections
import cProfile
import json
import os
import pstats
import signal
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from types import FrameType
from typing import Any, Final

import httpx

from benchmarks import bench_federation as federation
from benchmarks.bench_inference import MOCK_MODEL, PACED_PREFIX
from benchmarks.processes import mock_engine_running

CHATS: Final = 200
WARM_UP: Final = 30
PACED_TOKENS: Final = int(os.environ.get("FICC_CALL_COUNTS_TOKENS", "0"))
PACED_CHATS: Final = 10
DUMP_VARIABLE: Final = "FICC_CALL_COUNTS_DUMP"
"""Where a profiled server writes its counts (``PATH.N`` at the N-th signal)."""


class _Profiled:
    """The profiler of this server's loop thread; each ``SIGUSR1`` dumps it and starts anew."""

    def __init__(self, dump: str) -> None:
        self._dump = dump
        self._dumps = 0
        self._profile = cProfile.Profile()

    def start(self) -> None:
        signal.signal(signal.SIGUSR1, self._dumped)
        self._profile.enable()

    def _dumped(self, _signal: int, _frame: FrameType | None) -> None:
        self._profile.disable()
        self._dumps += 1
        self._profile.dump_stats(f"{self._dump}.{os.getpid()}.{self._dumps}")
        self._profile = cProfile.Profile()
        self._profile.enable()


def _serve_profiled() -> None:
    """FICC's command line with the profiler on."""
    from ficc.cli.main import main

    _Profiled(os.environ[DUMP_VARIABLE]).start()
    main()


def _part(filename: str) -> str:
    """The part a function belongs to: FICC's module by its first two levels, else the
    package (or the standard library's module)."""
    if filename == "~":
        return "built-in"
    tail = filename.split("site-packages/")[-1].split("/src/")[-1]
    if tail.startswith("ficc/"):
        return "/".join(tail.removesuffix(".py").split("/")[:3])
    if "site-packages/" not in filename and "/lib/python" in filename:
        return "stdlib/" + filename.split("/lib/python")[-1].split("/")[1]
    return tail.split("/")[0]


def _counted(path: str, per: int) -> dict[str, Any]:
    stats: Any = pstats.Stats(path)
    parts: collections.Counter[str] = collections.Counter()
    for (filename, _line, _name), (_, calls, _, _, callers) in stats.stats.items():
        if filename == "~":
            for (caller, _, _), (_, from_there, _, _) in callers.items():
                parts[_part(caller)] += from_there
        else:
            parts[_part(filename)] += calls
    total = sum(parts.values())
    return {
        "calls": total / per,
        "by_part": {part: calls / per for part, calls in parts.most_common(25)},
    }


def measure() -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="ficc-calls-") as temporary, ExitStack() as stack:
        work = Path(temporary)
        dump = str(work / "counts")
        os.environ[DUMP_VARIABLE] = dump
        engine = mock_engine_running(stack, work)
        module = "benchmarks.call_counts"
        alpha = federation._cluster(stack, work, "alpha", module=module)
        beta = federation._cluster(
            stack, work, "beta", "--upstream-allow", engine.url, module=module
        )
        spec = {"name": "mock", "model": MOCK_MODEL, "runtime": "openai"}
        base_url = engine.url + (PACED_PREFIX if PACED_TOKENS else "")
        service = federation._running_service(
            beta.client, {**spec, "options": {"base_url": base_url}}
        )
        target = federation.federated_target(alpha, beta, [service["id"]])
        servers = {"alpha": alpha.pid, "beta": beta.pid}
        body = federation.history_body(8, PACED_TOKENS) if PACED_TOKENS else None
        chats = PACED_CHATS if PACED_TOKENS else CHATS
        chunks = 0

        def chat(http: httpx.Client) -> int:
            if body is None:
                federation._streamed_chat(http, target)
                return 1
            return federation._counted_stream(http, target, body)[0]

        with httpx.Client(base_url=target.base_url, headers=target.headers, timeout=120) as http:
            for _ in range(3 if PACED_TOKENS else WARM_UP):
                chat(http)
            time.sleep(1.0)  # what the warm-up left (a usage record's settling) is done
            for pid in servers.values():
                os.kill(pid, signal.SIGUSR1)
            time.sleep(0.5)
            for _ in range(chats):
                chunks += chat(http)
            time.sleep(0.5)
            for pid in servers.values():
                os.kill(pid, signal.SIGUSR1)
            time.sleep(1.0)
        per = chunks if PACED_TOKENS else chats
        counts = {name: _counted(f"{dump}.{pid}.2", per) for name, pid in servers.items()}
        return {**counts, "per": "chunk" if PACED_TOKENS else "chat", "counted": per}


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        _serve_profiled()
    else:
        print(json.dumps(measure(), indent=1))
