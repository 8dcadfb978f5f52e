"""How many JSON encodes one streamed federated chat costs each cluster, and where they are.

``python -m benchmarks.json_encodes`` (inside ``scripts/in-loopback-netns``) starts the mock
engine, alpha and beta as ``cpu_federation`` does, each server with a ``sitecustomize`` that
counts every call of orjson's and the standard library's encoders by the FICC function that
made it, and prints one JSON object: the encodes per chat on each side, by place, averaged over
:data:`CHATS` streamed chats after a warm-up. A diagnostic: nothing of it is in ``src/``.
"""

from __future__ import annotations

import json
import os
import signal
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Final

import httpx

from benchmarks import bench_federation as federation
from benchmarks.bench_inference import MOCK_MODEL
from benchmarks.processes import mock_engine_running

CHATS: Final = 50
WARM_UP: Final = 20

_COUNTING: Final = """
import collections, json, os, signal, sys
import orjson

_counts = collections.Counter()


def _caller():
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if "/ficc/" in name and not name.endswith("base/canonical.py"):
            return f"{name.split('/ficc/')[-1]}:{frame.f_code.co_name}"
        frame = frame.f_back
    return "elsewhere"


_orjson_dumps = orjson.dumps


def _counted_orjson(*args, **kwargs):
    _counts[_caller()] += 1
    return _orjson_dumps(*args, **kwargs)


orjson.dumps = _counted_orjson
_encode = json.JSONEncoder.encode


def _counted_encode(self, value):
    _counts[_caller()] += 1
    return _encode(self, value)


json.JSONEncoder.encode = _counted_encode


def _write(*_):
    with open(os.path.join(os.environ["FICC_ENCODES_DIR"], f"{os.getpid()}.json"), "w") as out:
        json.dump(dict(_counts), out)
    _counts.clear()


signal.signal(signal.SIGUSR2, _write)
"""
"""Put first on the servers' ``PYTHONPATH``: Python imports it before anything of FICC, so
every ``from orjson import dumps`` after it takes the counting one. SIGUSR2 writes the
counts to a file and starts them again."""


def _counts_now(pids: dict[str, int], where: Path) -> dict[str, dict[str, int]]:
    for pid in pids.values():
        os.kill(pid, signal.SIGUSR2)
    time.sleep(1.0)
    return {name: json.loads((where / f"{pid}.json").read_text()) for name, pid in pids.items()}


def measure() -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="ficc-encodes-") as temporary, ExitStack() as stack:
        work = Path(temporary)
        hooks = work / "hooks"
        hooks.mkdir()
        (hooks / "sitecustomize.py").write_text(_COUNTING)
        engine = mock_engine_running(stack, work)
        saved = dict(os.environ)
        os.environ["PYTHONPATH"] = os.pathsep.join(
            [str(hooks), *filter(None, [saved.get("PYTHONPATH")])]
        )
        os.environ["FICC_ENCODES_DIR"] = str(work)
        try:
            alpha = federation._cluster(stack, work, "alpha")
            beta = federation._cluster(stack, work, "beta", "--upstream-allow", engine.url)
        finally:
            os.environ.clear()
            os.environ.update(saved)
        spec = {"name": "mock", "model": MOCK_MODEL, "runtime": "openai"}
        service = federation._running_service(
            beta.client, {**spec, "options": {"base_url": engine.url}}
        )
        target = federation.federated_target(alpha, beta, [service["id"]])
        pids = {"alpha": alpha.pid, "beta": beta.pid}
        with httpx.Client(base_url=target.base_url, headers=target.headers, timeout=60) as http:
            for _ in range(WARM_UP):
                federation._streamed_chat(http, target)
            _counts_now(pids, work)
            for _ in range(CHATS):
                federation._streamed_chat(http, target)
            counts = _counts_now(pids, work)
        per_chat = {
            name: {place: round(n / CHATS, 2) for place, n in sorted(found.items())}
            for name, found in counts.items()
        }
        return {
            "chats": CHATS,
            "encodes_per_chat": per_chat,
            "total_per_chat": round(sum(sum(side.values()) for side in per_chat.values()), 2),
        }


if __name__ == "__main__":
    print(json.dumps(measure(), indent=1))
