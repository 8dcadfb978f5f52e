"""A replica placed on a Ray node beside one FICC launches itself: request overhead and start time.

A local Ray cluster (a head and one worker node, ``ray.cluster_utils``) and two real ``ficc
serve`` processes: one plain, one with ``--ray`` whose service is pinned to the worker node.
Both run the example model (SmolLM2) with the ``llama.cpp`` runtime. The same short chat
(``max_tokens`` 2, temperature 0) goes to each FICC's local OpenAI URL, alternately, on one
keep-alive client; and the time from the start request to ``running`` is measured for both.

Rows: the p50 of a request through the Ray-placed replica beside the local one (the ratio is
Ray's cost: both go through FICC and over loopback HTTP to the engine), and start-to-running
for both (Ray adds placing the actor, starting its worker and verifying the model's digest).
``FICC_BENCH_RAY_REQUESTS`` changes the number of measured requests per target.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Final

import httpx

from benchmarks import row
from benchmarks.processes import ficc_cli, running_process, wait_until

REQUESTS: Final = int(os.environ.get("FICC_BENCH_RAY_REQUESTS", "60"))
WARM_UP: Final = 5
START_SECONDS: Final = 120.0
LOCAL_V1: Final = "/api/v1/inference/v1"


def _serving(stack: ExitStack, state: Path, *extra: str) -> tuple[str, str]:
    """(url, owner token) of a fresh `ficc serve` on ``state``."""
    argv = [sys.executable, "-m", "ficc", "serve", "--state-dir", str(state)]
    argv += ["--listen", "127.0.0.1:0", "--hypernet-bind", "127.0.0.1:0", *extra]
    process = stack.enter_context(running_process(argv, state.parent / f"{state.name}.log"))
    server_json = state / "server.json"

    def serving() -> bool:
        try:
            return bool(json.loads(server_json.read_text())["pid"] == process.pid)
        except (OSError, ValueError, KeyError):
            return False

    wait_until(serving, "ficc serve", process)
    url = str(json.loads(server_json.read_text())["url"])
    return url, (state / "owner.token").read_text().strip()


def _start_seconds(client: httpx.Client, spec: dict[str, Any]) -> tuple[float, str]:
    """Create the service, start it: seconds from the start request until it runs, its ID."""
    created = client.post("/api/v1/inference/services", json=spec)
    created.raise_for_status()
    service = created.json()
    began = time.perf_counter()
    client.post(
        f"/api/v1/inference/services/{service['id']}/control",
        json={"revision": service["revision"], "operation": "start"},
    ).raise_for_status()
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        shown = client.get(f"/api/v1/inference/services/{service['id']}").json()
        if shown["state"] == "running":
            return time.perf_counter() - began, str(service["id"])
        if shown["state"] == "failed":
            raise RuntimeError(f"service {spec['name']} failed: {shown['error']}")
        time.sleep(0.02)
    raise RuntimeError(f"service {spec['name']} did not start in {START_SECONDS:g} s")


def _p50(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[len(ordered) // 2]


def run() -> list[dict[str, Any]]:
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    from ray.cluster_utils import Cluster

    example = ficc_cli("example-model")
    with ExitStack() as stack, tempfile.TemporaryDirectory() as work_dir:
        work = Path(work_dir)
        cluster = Cluster(
            initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False}
        )
        stack.callback(cluster.shutdown)
        worker = cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        targets: dict[str, tuple[httpx.Client, str]] = {}
        starts: dict[str, float] = {}
        for name, extra in (("local", ()), ("ray", ("--ray", str(cluster.address)))):
            state = work / name
            url, token = _serving(stack, state, *extra)
            model = json.loads(
                ficc_cli("model-add", "--name", "smol", "--state-dir", str(state), example)
            )["id"]
            client = stack.enter_context(
                httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60)
            )
            spec: dict[str, Any] = {"name": "smol", "model": model, "runtime": "llama.cpp"}
            if name == "ray":
                nodes = client.get("/api/v1/nodes").json()["nodes"]
                (node,) = [n for n in nodes if n["ray_node_id"] == worker.node_id]
                spec["node"] = node["id"]
            starts[name], service_id = _start_seconds(client, spec)
            targets[name] = (client, service_id)
        body = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
        samples: dict[str, list[float]] = {name: [] for name in targets}
        for index in range(WARM_UP + REQUESTS):
            for name, (client, model) in targets.items():
                began = time.perf_counter()
                answer = client.post(
                    f"{LOCAL_V1}/chat/completions", json={**body, "model": model, "temperature": 0}
                )
                elapsed = time.perf_counter() - began
                answer.raise_for_status()
                if index >= WARM_UP:
                    samples[name].append(elapsed)
    return [
        row(
            "ray_invoke_p50",
            "chat through FICC, replica on a Ray node vs a local one",
            "ms",
            _p50(samples["ray"]) * 1000,
            "local replica",
            _p50(samples["local"]) * 1000,
        ),
        row(
            "ray_start_to_running",
            "service start request until running",
            "s",
            starts["ray"],
            "local replica",
            starts["local"],
        ),
    ]
