"""Surviving failures: a standby's takeover, and N services brought back after a restart.

- ``standby_takeover_kill9``: two ``ficc serve`` on one PostgreSQL database and one state
  directory; from kill -9 of the active one until the standby answers ``/readyz`` 200 as the
  active one. The baseline is the lease's lapse (``FICC_LEASE_SECONDS``, 10 s by default),
  which no takeover after a crash can beat: the ratio shows what detection and start add.
- ``standby_takeover_sigterm``: the same after SIGTERM (the upgrade's path): the active one
  releases its lease as it stops, so the standby need not wait out the lapse.
- ``restore_services_after_kill9``: N running llama.cpp services (SmolLM2), kill -9 of
  ``ficc serve``, and ``ficc serve`` again: seconds from the new start until all N run again,
  with no call. The baseline is starting the same N services by hand on a running server.
- ``ray_service_back_after_kill9_adopted``: ``ficc serve --ray`` on a local Ray cluster (a head
  and one worker node) with one llama.cpp service on the worker, kill -9, and ``ficc serve``
  again: seconds from the new start until the service runs again, its replica adopted (no
  engine started). The baseline is starting that service by hand (launch and model load).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Final

import httpx

from benchmarks import row
from benchmarks.processes import ficc_cli, free_port, wait_until
from ficc.domain.lease import DEFAULT_LAPSE_SECONDS

SERVICES: Final = int(os.environ.get("FICC_BENCH_RESTORE_SERVICES", "3"))
LEASE_SECONDS: Final = float(os.environ.get("FICC_LEASE_SECONDS") or DEFAULT_LAPSE_SECONDS)
START_SECONDS: Final = 180.0


def _serve(state: Path, log_name: str, *extra: str) -> tuple[subprocess.Popen[bytes], str]:
    """``ficc serve`` on ``state`` on a port chosen here; (process, url)."""
    port = free_port()
    argv = [sys.executable, "-m", "ficc", "serve", "--state-dir", str(state)]
    argv += ["--listen", f"127.0.0.1:{port}", "--hypernet-bind", "127.0.0.1:0", *extra]
    with (state.parent / f"{log_name}.log").open("ab") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    return process, f"http://127.0.0.1:{port}"


def _role(url: str) -> str | None:
    """The role ``/readyz`` names: ``active`` only with 200; None while nothing answers."""
    try:
        answer = httpx.get(f"{url}/readyz", timeout=2)
    except httpx.HTTPError:
        return None
    role = answer.json().get("role")
    return str(role) if answer.status_code == 200 or role == "standby" else None


def _ended(stack: ExitStack, process: subprocess.Popen[bytes]) -> None:
    def end() -> None:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    stack.callback(end)


def _takeover_seconds(work: Path, url: str, how: signal.Signals) -> float:
    """Seconds from ``how`` sent to the active process until the standby is active."""
    state = work / f"takeover-{how.name.lower()}"
    with ExitStack() as stack:
        active, active_url = _serve(state, f"{state.name}-a", "--database", url)
        _ended(stack, active)
        wait_until(lambda: _role(active_url) == "active", "the active one", active)
        standby, standby_url = _serve(state, f"{state.name}-b", "--database", url)
        _ended(stack, standby)
        wait_until(lambda: _role(standby_url) == "standby", "the standby", standby)
        active.send_signal(how)
        began = time.perf_counter()
        active.wait(timeout=60)
        wait_until(lambda: _role(standby_url) == "active", "the takeover", standby, 120)
        return time.perf_counter() - began


def _client(url: str, state: Path) -> httpx.Client:
    token = (state / "owner.token").read_text().strip()
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60)


def _all_running(client: httpx.Client, ids: list[str]) -> bool:
    try:
        shown = client.get("/api/v1/inference/services").json()["services"]
    except (httpx.HTTPError, ValueError, KeyError):
        return False
    states = {s["id"]: s["state"] for s in shown}
    failed = [i for i in ids if states.get(i) == "failed"]
    if failed:
        raise RuntimeError(f"services failed: {failed}")
    return all(states.get(i) == "running" for i in ids)


def _restore_seconds(work: Path) -> tuple[float, float]:
    """(seconds to start N services by hand, seconds to bring them back after kill -9)."""
    state = work / "restore"
    example = ficc_cli("example-model")
    with ExitStack() as stack:
        first, url = _serve(state, "restore-1")
        _ended(stack, first)
        wait_until(lambda: _role(url) == "active", "ficc serve", first)
        model = json.loads(
            ficc_cli("model-add", "--name", "smol", "--state-dir", str(state), example)
        )["id"]
        client = stack.enter_context(_client(url, state))
        ids = []
        for index in range(SERVICES):
            spec = {"name": f"smol-{index}", "model": model, "runtime": "llama.cpp"}
            created = client.post("/api/v1/inference/services", json=spec)
            created.raise_for_status()
            ids.append(created.json())
        began = time.perf_counter()
        for service in ids:
            client.post(
                f"/api/v1/inference/services/{service['id']}/control",
                json={"revision": service["revision"], "operation": "start"},
            ).raise_for_status()
        names = [str(s["id"]) for s in ids]
        wait_until(lambda: _all_running(client, names), "N services", first, START_SECONDS)
        by_hand = time.perf_counter() - began
        first.send_signal(signal.SIGKILL)
        first.wait()
        second, url = _serve(state, "restore-2")
        began = time.perf_counter()
        _ended(stack, second)
        again = stack.enter_context(_client(url, state))
        wait_until(lambda: _all_running(again, names), "N services back", second, START_SECONDS)
        return by_hand, time.perf_counter() - began


def _ray_adopt_seconds(work: Path) -> tuple[float, float]:
    """(seconds to start a service on a Ray node by hand, seconds to have it running again
    after kill -9 and a new ``ficc serve``, its replica adopted)."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    from ray.cluster_utils import Cluster

    state = work / "ray"
    example = ficc_cli("example-model")
    with ExitStack() as stack:
        cluster = Cluster(
            initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False}
        )
        stack.callback(cluster.shutdown)
        worker = cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        first, url = _serve(state, "ray-1", "--ray", str(cluster.address))
        _ended(stack, first)
        wait_until(lambda: _role(url) == "active", "ficc serve --ray", first)
        model = json.loads(
            ficc_cli("model-add", "--name", "smol", "--state-dir", str(state), example)
        )["id"]
        client = stack.enter_context(_client(url, state))
        nodes = client.get("/api/v1/nodes").json()["nodes"]
        (node,) = [n["id"] for n in nodes if n["ray_node_id"] == worker.node_id]
        spec = {"name": "smol", "model": model, "runtime": "llama.cpp", "node": node}
        created = client.post("/api/v1/inference/services", json=spec)
        created.raise_for_status()
        service = created.json()
        began = time.perf_counter()
        client.post(
            f"/api/v1/inference/services/{service['id']}/control",
            json={"revision": service["revision"], "operation": "start"},
        ).raise_for_status()
        ids = [str(service["id"])]
        wait_until(lambda: _all_running(client, ids), "the service", first, START_SECONDS)
        by_hand = time.perf_counter() - began
        first.send_signal(signal.SIGKILL)
        first.wait()
        second, url = _serve(state, "ray-2", "--ray", str(cluster.address))
        began = time.perf_counter()
        _ended(stack, second)
        again = stack.enter_context(_client(url, state))
        wait_until(lambda: _all_running(again, ids), "the service back", second, START_SECONDS)
        return by_hand, time.perf_counter() - began


def run() -> list[dict[str, Any]]:
    from tests.support.postgres import start_postgres

    with ExitStack() as stack, tempfile.TemporaryDirectory(prefix="ficc-bench-standby-") as d:
        work = Path(d)
        postgres = start_postgres()
        stack.callback(postgres.stop)
        killed = _takeover_seconds(work, postgres.database("kill"), signal.SIGKILL)
        stopped = _takeover_seconds(work, postgres.database("term"), signal.SIGTERM)
        by_hand, restored = _restore_seconds(work)
        ray_by_hand, ray_adopted = _ray_adopt_seconds(work)
    lapse = f"the lease's lapse ({LEASE_SECONDS:g} s)"
    return [
        row("standby_takeover_kill9", "kill -9 of the active to the standby active", "s",
            killed, lapse, LEASE_SECONDS),
        row("standby_takeover_sigterm", "SIGTERM of the active to the standby active", "s",
            stopped, lapse, LEASE_SECONDS),
        row(f"restore_{SERVICES}_services_after_kill9",
            f"ficc serve started again to {SERVICES} services running, no call", "s",
            restored, f"starting the {SERVICES} services by hand", by_hand),
        row("ray_service_back_after_kill9_adopted",
            "ficc serve --ray started again to its service running, replica adopted", "s",
            ray_adopted, "starting the service on the Ray node by hand", ray_by_hand),
    ]  # fmt: skip
