"""Upstream URLs and engine reads (F2, F14, F16, F17's engine part).

A peer can never point a service at a URL; local ``openai`` services reach only the prefixes
the owner allowed, matched on the parsed URL; every read from an engine is bounded; engines
answer only to their attempt's API key; peers see no options, engine text or paths.
"""

from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.security.conftest import Figures
from tests.support.cluster import RunningCluster, start_cluster
from tests.support.federation import add_service, configure, error_of, ok, pair
from tests.support.remote import ALL_REMOTE_SCOPES, local_node
from tests.support.tiny_gguf import write_tiny_gguf
from tests.support.upstream import EngineAt, hostile_upstream, peak_rss_growth, table_rows

from ficc.adapters.engines.client import CHAT_COMPLETIONS, MAX_MODELS_BODY_BYTES, EngineClient
from ficc.adapters.engines.pool import EngineClients
from ficc.adapters.engines.sse import MAX_LINE_BYTES
from ficc.adapters.runtimes import LlamaCppRuntime
from ficc.base.errors import EngineUnavailable, FiccError
from ficc.services.ports.runtimes import LaunchRequest, NodeInfo

API = "/api/v1/federation"
SERVICES = "/api/v1/inference/services"
ALLOWED = "http://127.0.0.1:9/allowed"
"""The one prefix beta's owner allows (nothing listens there: only the rule is tested)."""

ADDRESS_CLASSES = {
    "loopback v4": "http://127.0.0.1:8470",
    "loopback v6": "http://[::1]:8470",
    "loopback, other port of the allowed host": "http://127.0.0.1:10/allowed",
    "link-local metadata": "http://169.254.169.254/latest",
    "rfc1918 10/8": "http://10.0.0.5:8000",
    "rfc1918 172.16/12": "http://172.16.3.4",
    "rfc1918 192.168/16": "http://192.168.1.1/v1",
    "ula": "http://[fd00::1]:8000",
    "decimal loopback": "http://2130706433:8470",
    "hex loopback": "http://0x7f.1:8470",
    "octal loopback": "http://0177.0.0.1:8470",
    "v4-mapped v6 loopback": "http://[::ffff:127.0.0.1]:8470",
    "decimal metadata": "http://2852039166/latest",
    "prefix look-alike host": "http://127.0.0.1.nip.io:9/allowed",
    "prefix look-alike path": "http://127.0.0.1:9/allowedx",
    "path climbing out": "http://127.0.0.1:9/allowed/../admin",
    "userinfo trick": "http://127.0.0.1:9@169.254.169.254/allowed",
    "userinfo trick with backslash": "http://127.0.0.1:9\\@169.254.169.254/allowed",
    "public name": "https://api.example.com/v1",
}
SAME_AS_ALLOWED = {
    "decimal form": "http://2130706433:9/allowed/v1",
    "hex form": "http://0x7f.0.0.1:9/allowed/deeper",
    "mapped v6 form": "http://[::ffff:7f00:1]:9/allowed",
}


@pytest.fixture(scope="module")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """alpha paired with beta; beta allows one upstream prefix and grants inference:manage on
    one granted service, its model and its node."""
    root = tmp_path_factory.mktemp("upstream")
    alpha = start_cluster(root / "alpha")
    beta = start_cluster(root / "beta", "--upstream-allow", ALLOWED)
    try:
        configure(alpha, "alpha")
        configure(beta, "beta")
        service = add_service(beta, "granted", root)
        model = ok(beta.owner().get(f"{SERVICES}/{service}"))["spec"]["model"]
        node = local_node(beta)
        grant = {
            "scopes": ["inference:manage", "inference:invoke"],
            "services": [service],
            "models": [model],
            "nodes": [node],
        }
        pairing = pair(alpha, beta, scopes=ALL_REMOTE_SCOPES, grant=grant)
        yield {
            "alpha": alpha,
            "beta": beta,
            "peer": pairing.requester_peer,
            "service": service,
            "model": model,
            "node": node,
        }
    finally:
        alpha.stop()
        beta.stop()


def peer_request(
    clusters: dict[str, Any], operation: str, body: dict[str, Any], mutation: bool = True
) -> httpx.Response:
    payload: dict[str, Any] = {"operation": operation, "body": body}
    if mutation:
        payload["mutation_id"] = secrets.token_hex(16)
    alpha: RunningCluster = clusters["alpha"]
    return alpha.owner().post(f"{API}/peers/{clusters['peer']}/request", json=payload, timeout=60)


def grantor_rows(beta: RunningCluster) -> dict[str, list[tuple[object, ...]]]:
    return {t: table_rows(beta.state_dir, t) for t in ("services", "mutation_receipts")}


def test_a_peer_cannot_create_replace_or_preview_a_service_at_any_url(
    clusters: dict[str, Any], figures: Figures
) -> None:
    beta: RunningCluster = clusters["beta"]
    model, service = clusters["model"], clusters["service"]
    before = grantor_rows(beta)
    specs: list[dict[str, Any]] = []
    for url in [ALLOWED, *ADDRESS_CLASSES.values()]:
        specs.append(
            {"name": "up", "model": "gpt", "runtime": "openai", "options": {"base_url": url}}
        )
        specs.append(
            {"name": "up", "model": model, "runtime": "llama.cpp", "options": {"base_url": url}}
        )
        specs.append(
            {"name": "up", "model": model, "runtime": "llama.cpp", "options": {"n": [{"u": url}]}}
        )
    tries = refused = 0
    for spec in specs:
        for operation, body, mutation in (
            ("inference.create", {"spec": spec}, True),
            ("inference.preview", {"spec": spec}, False),
            ("inference.replace", {"service": service, "revision": 1, "spec": spec}, True),
        ):
            tries += 1
            error = error_of(peer_request(clusters, operation, body, mutation), 403)
            assert error["code"] == "forbidden", (operation, spec, error)
            refused += 1
    after = grantor_rows(beta)
    # Nothing created or changed, and no receipt left behind (not even an uncertain one).
    assert after == before
    created = len(after["services"]) - len(before["services"])
    figures.record(tries=tries, refused=refused, created=created)


def test_a_peer_cannot_replace_a_granted_service_it_did_not_create(
    clusters: dict[str, Any], figures: Figures
) -> None:
    """The prompt-capture path: re-specifying a service the grantor's own users call."""
    beta: RunningCluster = clusters["beta"]
    model, service = clusters["model"], clusters["service"]
    before = grantor_rows(beta)
    same_runtime = {"name": "taken", "model": model, "runtime": "llama.cpp"}
    replace = {"service": service, "revision": 1, "spec": same_runtime}
    error = error_of(peer_request(clusters, "inference.replace", replace), 403)
    assert error["details"]["reason"] == "service_not_created_by_grant"
    remove = {"service": service, "revision": 1, "operation": "remove"}
    error = error_of(peer_request(clusters, "inference.control", remove), 403)
    assert error["details"]["reason"] == "service_not_created_by_grant"
    assert grantor_rows(beta) == before
    shown = ok(beta.owner().get(f"{SERVICES}/{service}"))
    assert (shown["spec"]["name"], shown["revision"]) == ("granted", 1)
    # Its own service: replaced, but never onto another runtime.
    created = ok(peer_request(clusters, "inference.create", {"spec": same_runtime}))["result"]
    vllm = {"name": "taken", "model": model, "runtime": "vllm"}
    change = {"service": created["id"], "revision": 1, "spec": vllm}
    error = error_of(peer_request(clusters, "inference.replace", change), 403)
    assert error["details"]["reason"] == "runtime_change_refused"
    assert ok(beta.owner().get(f"{SERVICES}/{created['id']}"))["spec"]["runtime"] == "llama.cpp"
    figures.record(tries=3, refused=3)


def test_a_peer_sees_no_options_engine_text_or_paths(clusters: dict[str, Any]) -> None:
    beta: RunningCluster = clusters["beta"]
    service = clusters["service"]
    spec = {
        "name": "granted",
        "model": clusters["model"],
        "runtime": "llama.cpp",
        "options": {"n_ctx": 4096},
    }
    ok(beta.owner().put(f"{SERVICES}/{service}", json={"revision": 1, "spec": spec}))
    shown = ok(peer_request(clusters, "inference.get", {"service": service}, False))["result"]
    assert "options" not in shown["spec"]
    assert shown["spec"]["name"] == "granted"
    # A replayed creation shows what the first answer showed, not the receipt's owner view.
    alpha: RunningCluster = clusters["alpha"]
    own = {"name": "mine", "model": clusters["model"], "runtime": "llama.cpp"}
    payload = {"operation": "inference.create", "body": {"spec": own}}
    payload["mutation_id"] = secrets.token_hex(16)
    url = f"{API}/peers/{clusters['peer']}/request"
    first, again = (ok(alpha.owner().post(url, json=payload)) for _ in range(2))
    assert again["replayed"] is True
    assert "options" not in first["result"]["spec"]
    assert again["result"] == first["result"]
    prepared = ok(peer_request(clusters, "inference.prepare", {}, False))["result"]
    for offer in prepared["offers"]:
        for reason in offer["reasons"]:
            assert "/" not in reason, reason


def test_a_local_token_reaches_only_the_upstreams_the_owner_allowed(
    clusters: dict[str, Any], figures: Figures
) -> None:
    beta: RunningCluster = clusters["beta"]
    manager = beta.client(beta.token("inference:manage", "inference:read"))
    before = table_rows(beta.state_dir, "services")
    tries = refused = 0
    for name, url in ADDRESS_CLASSES.items():
        spec = {"name": "up", "model": "gpt", "runtime": "openai", "options": {"base_url": url}}
        tries += 1
        response = manager.post(SERVICES, json=spec)
        assert response.status_code in {400, 403}, (name, response.text)
        refused += 1
        if response.status_code == 403:
            error = response.json()["error"]
            assert error["code"] == "forbidden"
            assert error["details"]["field"] == "options.base_url"
            assert "--upstream-allow" in error["message"]
    assert table_rows(beta.state_dir, "services") == before
    # The allowed prefix, however its host is spelled, is one canonical URL.
    for name, url in SAME_AS_ALLOWED.items():
        spec = {"name": "up", "model": "gpt", "runtime": "openai", "options": {"base_url": url}}
        made = ok(manager.post(SERVICES, json=spec), 201)
        assert made["spec"]["options"]["base_url"].startswith(ALLOWED), name
    figures.record(tries=tries, refused=refused, created=0)


def test_a_server_started_without_the_allow_flag_refuses_every_upstream(
    tmp_path: Path,
) -> None:
    cluster = start_cluster(tmp_path / "closed")
    try:
        spec = {"name": "up", "model": "gpt", "runtime": "openai", "options": {"base_url": ALLOWED}}
        error = error_of(cluster.owner().post(SERVICES, json=spec), 403)
        assert error["details"]["reason"] == "upstream_not_allowed"
        assert ok(cluster.owner().get(SERVICES))["services"] == []
    finally:
        cluster.stop()


# --- bounded reads ---------------------------------------------------------------------------


async def test_a_hostile_upstream_cannot_fill_memory(figures: Figures) -> None:
    async with hostile_upstream() as hostile, peak_rss_growth() as growth:
        async with EngineClient(hostile.url) as client:
            with pytest.raises(EngineUnavailable, match="model list"):
                await client.list_models()
            with pytest.raises(EngineUnavailable, match="line longer"):
                await client.complete(CHAT_COMPLETIONS, {"messages": []})
            # A stream is opened with its first event: the bound is passed before it returns.
            with pytest.raises(EngineUnavailable, match="line longer"):
                await client.open_stream(CHAT_COMPLETIONS, {"messages": []})
        async with EngineClient(hostile.url + "/error") as client:
            with pytest.raises(FiccError):
                await client.list_models()
        # Each connection was closed by FICC soon after its bound, not at the server's limit.
        await hostile.wait_closed_by_client(4)
    assert hostile.closed_by_client == 4
    sent_mib = hostile.sent_bytes / 2**20
    assert hostile.sent_bytes < 4 * (max(MAX_LINE_BYTES, MAX_MODELS_BODY_BYTES) + 8 * 2**20)
    assert growth[0] < 32, f"resident memory grew {growth[0]:.1f} MiB"
    figures.record(
        tries=4,
        refused=4,
        peak_rss_growth_mib=round(growth[0], 1),
        hostile_sent_mib=round(sent_mib, 1),
    )


async def test_an_upstreams_redirect_is_refused_never_followed() -> None:
    """An allowed prefix cannot send FICC on to an address the owner did not allow."""
    reached: list[bytes] = []

    async def elsewhere(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        reached.append(await reader.readuntil(b"\r\n\r\n"))
        writer.close()

    target = await asyncio.start_server(elsewhere, "127.0.0.1", 0)
    location = f"http://127.0.0.1:{target.sockets[0].getsockname()[1]}/v1/chat/completions"

    async def redirecting(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(
            f"HTTP/1.1 307 Temporary Redirect\r\nLocation: {location}\r\n"
            "Content-Length: 0\r\nConnection: close\r\n\r\n".encode()
        )
        await writer.drain()
        writer.close()

    upstream = await asyncio.start_server(redirecting, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{upstream.sockets[0].getsockname()[1]}"
    async with target, upstream, EngineClient(url) as client:
        with pytest.raises(EngineUnavailable, match="the engine failed"):
            await client.complete(CHAT_COMPLETIONS, {"messages": []})
        with pytest.raises(EngineUnavailable, match="the engine failed"):
            await client.list_models()
    assert reached == []


# --- engine API key and clients ---------------------------------------------------------------


@pytest.mark.engine
async def test_an_engine_answers_only_to_its_attempts_key(tmp_path: Path, figures: Figures) -> None:
    engines = EngineClients()
    runtime = LlamaCppRuntime(log_dir=tmp_path / "logs", engines=engines)
    model = write_tiny_gguf(tmp_path / "tiny.gguf")
    node = NodeInfo(node_id="nod_" + "l" * 26, local=True, gpu_count=0)
    request = LaunchRequest("att_" + "k" * 26, node, "svc-key", {"n_threads": 1}, model)
    handle = await runtime.launch(request)
    try:
        assert (await runtime.wait_ready(handle, 60)).healthy
        key = runtime.api_key(handle)
        assert key is not None
        assert handle.process is not None
        argv = await asyncio.to_thread(Path(f"/proc/{handle.process.pid}/cmdline").read_bytes)
        assert key.encode() not in argv  # argv is readable by every local user
        async with httpx.AsyncClient(base_url=handle.base_url) as direct:
            tries = [
                await direct.get("/v1/models"),
                await direct.get("/v1/models", headers={"Authorization": "Bearer guess"}),
                await direct.post(CHAT_COMPLETIONS, json={"messages": []}),
            ]
            assert [r.status_code for r in tries] == [401, 401, 401]
            keyed = await direct.get("/v1/models", headers={"Authorization": f"Bearer {key}"})
            assert keyed.status_code == 200
        answer = await engines.complete(
            handle,
            CHAT_COMPLETIONS,
            {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
        )
        assert answer["choices"]
        assert len(engines) == 1
    finally:
        await runtime.stop(handle, 5.0)
    # The stopped engine's client is closed and its key forgotten.
    assert len(engines) == 0
    assert runtime.api_key(handle) is None
    figures.record(tries=3, refused=3)


async def test_engine_clients_are_evicted_when_idle_or_over_the_bound() -> None:
    now = [0.0]
    engines = EngineClients(max_idle_clients=2, idle_seconds=10, clock=lambda: now[0])
    async with hostile_upstream() as hostile:
        for model in ("a", "b", "c", "d"):
            engine = EngineAt(hostile.url, model)
            with pytest.raises(EngineUnavailable):
                await engines.complete(engine, CHAT_COMPLETIONS, {"messages": []})
        assert len(engines) == 2
        now[0] = 11.0
        await engines.forget("http://127.0.0.1:1")
        assert len(engines) == 0
    await engines.aclose()


def test_old_engine_logs_are_pruned_per_service(tmp_path: Path) -> None:
    runtime = LlamaCppRuntime(log_dir=tmp_path)
    folder = tmp_path / "svc-logs"
    folder.mkdir()
    for index in range(9):
        log = folder / f"att_{index}.log"
        log.write_text("x")
        os.utime(log, (index, index))
    runtime._prune_logs("svc-logs")
    assert sorted(p.name for p in folder.iterdir()) == [f"att_{i}.log" for i in range(4, 9)]
