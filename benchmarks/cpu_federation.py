"""CPU per streamed federated chat on the mock engine, for comparing two trees of FICC.

``python -m benchmarks.cpu_federation`` (inside ``scripts/in-loopback-netns``; ``PYTHONPATH``
chooses the tree) starts the mock engine, alpha and beta as ``bench_federation`` does, without
llama.cpp or LiteLLM, and prints one JSON object: CPU ms per streamed chat through both
clusters (each server's loop thread and its other threads apart), through beta's local URL,
streamed chats of 128 and 512 tokens with 1, 8 and 32 KiB bodies (floats set) through both
clusters and the local URL (CPU per request and per chunk, by process; time to first token),
and 8-client throughput through both clusters beside the engine called directly. With
``FICC_BENCH_LITELLM`` naming LiteLLM's command, the same streamed chats through LiteLLM too.
Alternate two trees in the same conditions and compare the ratios: the machine's load moves
the absolute figures.

The split by part in docs/benchmarks.md came from running each server under cProfile with
``time.thread_time`` as its clock, a diagnostic kept out of this module.
"""

from __future__ import annotations

import functools
import json
import os
import tempfile
import time
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any, Final

import httpx

from benchmarks import bench_federation as federation
from benchmarks.bench_inference import MOCK_MODEL, PACED_PREFIX
from benchmarks.processes import (
    GATEWAY_KEY,
    LITELLM_ENV,
    GatewayModel,
    cpu_seconds,
    gateway_running,
    mock_engine_running,
)

REQUESTS: Final = int(os.environ.get("FICC_BENCH_FEDERATION_REQUESTS", "300"))
IDLE_SECONDS: Final = 10.0


def _thread_cpu_ms(pid: int) -> tuple[float, float]:
    """CPU ms the process used so far: its main (event loop) thread, and all its others."""
    tick = os.sysconf("SC_CLK_TCK")
    main = others = 0.0
    for task in Path(f"/proc/{pid}/task").iterdir():
        stat = (task / "stat").read_text()
        fields = stat[stat.rindex(")") + 2 :].split()
        used = (int(fields[11]) + int(fields[12])) * 1000 / tick
        if task.name == str(pid):
            main += used
        else:
            others += used
    return main, others


def measure() -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="ficc-cpu-") as temporary, ExitStack() as stack:
        work = Path(temporary)
        engine = mock_engine_running(stack, work)
        alpha = federation._cluster(stack, work, "alpha")
        beta = federation._cluster(stack, work, "beta", "--upstream-allow", engine.url)
        spec = {"name": "mock", "model": MOCK_MODEL, "runtime": "openai"}
        service = federation._running_service(
            beta.client, {**spec, "options": {"base_url": engine.url}}
        )
        paced = federation._running_service(
            beta.client,
            {**spec, "name": "paced", "options": {"base_url": engine.url + PACED_PREFIX}},
        )
        federated = federation.federated_target(alpha, beta, [service["id"], paced["id"]])
        alpha_auth = federated.headers
        beta_auth = {"Authorization": dict(beta.client.headers)["authorization"]}
        local = federation.Target("local", beta.url + federation.LOCAL_V1, beta_auth, service["id"])
        direct = federation.Target("direct", f"{engine.url}/v1", {}, MOCK_MODEL)
        found: dict[str, Any] = {}
        servers = {"alpha": alpha.pid, "beta": beta.pid}
        # What each server spends doing nothing (heartbeats, probes, timers): a slow stream
        # pays it for every second it lasts, whatever it relays.
        idle_before = {name: cpu_seconds(pid) for name, pid in servers.items()}
        time.sleep(IDLE_SECONDS)
        found["idle_cpu_ms_per_second"] = {
            name: (cpu_seconds(pid) - idle_before[name]) * 1000 / IDLE_SECONDS
            for name, pid in servers.items()
        }
        with httpx.Client(base_url=federated.base_url, headers=alpha_auth, timeout=60) as http:
            before = {name: _thread_cpu_ms(pid) for name, pid in servers.items()}
            found["federated_cpu_ms"] = federation._cpu_ms(
                {**servers, "engine": engine.pid},
                lambda: federation._streamed_chat(http, federated),
                REQUESTS,
            )
            count = REQUESTS + federation.WARM_UP
            found["federated_thread_cpu_ms"] = {
                name: {
                    "loop": (_thread_cpu_ms(pid)[0] - before[name][0]) / count,
                    "others": (_thread_cpu_ms(pid)[1] - before[name][1]) / count,
                }
                for name, pid in servers.items()
            }
            # The Responses API through both clusters, beside the chat it is translated to.
            for label, call in (
                ("federated_responses_cpu_ms", federation._streamed_response),
                ("federated_usage_chat_cpu_ms", federation._streamed_chat_with_usage),
            ):
                found[label] = federation._cpu_ms(
                    {**servers, "engine": engine.pid},
                    functools.partial(call, http, federated),
                    REQUESTS,
                )
        found["federated_responses_ratio"] = sum(
            found["federated_responses_cpu_ms"][name] for name in servers
        ) / sum(found["federated_usage_chat_cpu_ms"][name] for name in servers)
        with httpx.Client(base_url=local.base_url, headers=beta_auth, timeout=60) as http:
            found["local_cpu_ms"] = federation._cpu_ms(
                {"beta": beta.pid}, lambda: federation._streamed_chat(http, local), REQUESTS
            )
        # LiteLLM in front of the same paced engine, when its command is named.
        gateway: dict[str, federation.Target] = {}
        gateway_pids: dict[str, dict[str, int]] = {}
        if os.environ.get(LITELLM_ENV):
            proxy = gateway_running(
                stack, work, [GatewayModel("paced", engine.url + PACED_PREFIX, MOCK_MODEL, "-")]
            )
            headers = {"Authorization": f"Bearer {GATEWAY_KEY}"}
            gateway["gateway"] = federation.Target("gateway", f"{proxy.url}/v1", headers, "paced")
            gateway_pids["gateway"] = {"gateway": proxy.pid, "engine": engine.pid}
        # Real answer lengths and body sizes: CPU per request and per chunk, by process.
        found["streams"] = federation.stream_summary(
            federation.stream_costs(
                {
                    **gateway,
                    "federated": replace(federated, model=paced["id"]),
                    "local": replace(local, model=paced["id"]),
                    "direct": replace(direct, base_url=f"{engine.url}{PACED_PREFIX}/v1"),
                    # The engine sends the whole answer at once: every hop falls behind it,
                    # so what waits goes on together.
                    "federated_instant": federated,
                },
                {
                    "federated": {"alpha": alpha.pid, "beta": beta.pid, "engine": engine.pid},
                    "local": {"beta": beta.pid, "engine": engine.pid},
                    "direct": {"engine": engine.pid},
                    "federated_instant": {
                        "alpha": alpha.pid,
                        "beta": beta.pid,
                        "engine": engine.pid,
                    },
                    **gateway_pids,
                },
            )
        )
        each = max(REQUESTS // federation.CLIENTS, 3)
        rates = {
            target.label: federation._concurrent(target, federation.CLIENTS, each).per_second
            for target in (direct, federated)
        }
        found["c8_per_second"] = rates
        found["c8_ratio"] = rates["federated"] / rates["direct"]
        return found


if __name__ == "__main__":
    print(json.dumps(measure(), indent=1))
