"""How many system calls one streamed federated chat costs each cluster, by call.

``python -m benchmarks.syscalls`` (inside ``scripts/in-loopback-netns``, with ``strace`` on
the ``PATH``) starts the mock engine, alpha and beta as ``cpu_federation`` does, attaches
``strace -f -c`` to each server over :data:`CHATS` streamed chats after a warm-up, and prints
one JSON object: the calls per chat on each side, by name. A write to a loopback socket also
runs the reader's side of TCP, so fewer writes are less CPU on both ends. A diagnostic: it
counts, it does not time (strace slows what it watches).
"""

from __future__ import annotations

import json
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
from benchmarks.bench_inference import MOCK_MODEL
from benchmarks.processes import mock_engine_running

CHATS: Final = 200
WARM_UP: Final = 20
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
        service = federation._running_service(
            beta.client, {**spec, "options": {"base_url": engine.url}}
        )
        peer = federation._pair(alpha, beta, [service["id"]])
        headers = {"Authorization": dict(alpha.client.headers)["authorization"]}
        target = federation.Target(
            "federated", f"{alpha.url}{federation.API}/peers/{peer}/v1", headers, service["id"]
        )
        pids = {"alpha": alpha.pid, "beta": beta.pid}
        with httpx.Client(base_url=target.base_url, headers=headers, timeout=60) as http:
            for _ in range(WARM_UP):
                federation._streamed_chat(http, target)
            tracers = {
                name: subprocess.Popen(
                    [strace, "-f", "-c", "-o", str(work / f"{name}.strace"), "-p", str(pid)],
                    stderr=subprocess.DEVNULL,
                )
                for name, pid in pids.items()
            }
            time.sleep(ATTACH_SECONDS)
            for _ in range(CHATS):
                federation._streamed_chat(http, target)
            for tracer in tracers.values():
                tracer.send_signal(signal.SIGINT)
                tracer.wait()
        per_chat = {
            name: {
                call: round(count / CHATS, 2)
                for call, count in sorted(_counted((work / f"{name}.strace").read_text()).items())
            }
            for name in pids
        }
        return {"chats": CHATS, "calls_per_chat": per_chat}


if __name__ == "__main__":
    print(json.dumps(measure(), indent=1))
