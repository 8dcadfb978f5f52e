"""How many system calls one streamed federated chat costs each cluster, by call.

``python -m benchmarks.syscalls`` (inside ``scripts/in-loopback-netns``, with ``strace`` on
the ``PATH``) starts the mock engine, alpha and beta as ``cpu_federation`` does, attaches
``strace -f -c`` to each server over :data:`CHATS` streamed chats after a warm-up, and prints
one JSON object: the calls per chat on each side, by name. A write to a loopback socket also
runs the reader's side of TCP, so fewer writes are less CPU on both ends. With
``FICC_SYSCALLS_PACED_TOKENS`` set (say 512), the chats are instead streamed answers of that
many tokens from the paced mock engine (a token a millisecond, 8 KiB bodies), counted per
chunk: what each chunk costs each side when nothing can go together. A diagnostic: it counts,
it does not time (strace slows what it watches).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Final

import httpx

from benchmarks import bench_federation as federation
from benchmarks.bench_inference import MOCK_MODEL, PACED_PREFIX
from benchmarks.processes import mock_engine_running

CHATS: Final = 200
PACED_CHATS: Final = 10
WARM_UP: Final = 20
PACED_TOKENS: Final = int(os.environ.get("FICC_SYSCALLS_PACED_TOKENS", "0"))
ATTACH_SECONDS: Final = 2.0
"""How long strace is given to attach to every thread before the counted chats."""


def _counted(summary: str) -> dict[str, int]:
    """The calls column of ``strace -c``'s table, by system call."""
    calls: dict[str, int] = {}
    for line in summary.splitlines():
        fields = line.split()
        if len(fields) >= 5 and fields[0][0].isdigit() and fields[-1] != "total":
            calls[fields[-1]] = int(fields[3])
    return calls


def measure() -> dict[str, Any]:
    strace = shutil.which("strace")
    if strace is None:
        raise SystemExit("strace is not installed (apt-get install strace)")
    with tempfile.TemporaryDirectory(prefix="ficc-syscalls-") as temporary, ExitStack() as stack:
        work = Path(temporary)
        engine = mock_engine_running(stack, work)
        alpha = federation._cluster(stack, work, "alpha")
        beta = federation._cluster(stack, work, "beta", "--upstream-allow", engine.url)
        spec = {"name": "mock", "model": MOCK_MODEL, "runtime": "openai"}
        upstream = engine.url + (PACED_PREFIX if PACED_TOKENS else "")
        service = federation._running_service(
            beta.client, {**spec, "options": {"base_url": upstream}}
        )
        target = federation.federated_target(alpha, beta, [service["id"]])
        pids = {"alpha": alpha.pid, "beta": beta.pid}
        body = federation.history_body(8, PACED_TOKENS)
        chats, chunks = (PACED_CHATS, 0) if PACED_TOKENS else (CHATS, 1)

        def chat(http: httpx.Client) -> int:
            if PACED_TOKENS:
                return federation._counted_stream(http, target, body)[0]
            federation._streamed_chat(http, target)
            return 0

        with httpx.Client(base_url=target.base_url, headers=target.headers, timeout=120) as http:
            for _ in range(WARM_UP if not PACED_TOKENS else 2):
                chat(http)
            tracers = {
                name: subprocess.Popen(
                    [strace, "-f", "-c", "-o", str(work / f"{name}.strace"), "-p", str(pid)],
                    stderr=subprocess.DEVNULL,
                )
                for name, pid in pids.items()
            }
            time.sleep(ATTACH_SECONDS)
            for _ in range(chats):
                chunks += chat(http)
            for tracer in tracers.values():
                tracer.send_signal(signal.SIGINT)
                tracer.wait()
        each = chunks if PACED_TOKENS else chats
        per_chat = {
            name: {
                call: round(count / each, 2)
                for call, count in sorted(_counted((work / f"{name}.strace").read_text()).items())
            }
            for name in pids
        }
        if PACED_TOKENS:
            return {"chats": chats, "chunks": chunks, "calls_per_chunk": per_chat}
        return {"chats": chats, "calls_per_chat": per_chat}


if __name__ == "__main__":
    print(json.dumps(measure(), indent=1))
