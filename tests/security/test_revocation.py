"""Revocation, expiry and peer removal end work in flight, even for a grantee that stopped reading.

alpha is the grantee, beta the grantor; both are real `ficc serve` processes over real HyperNet
on loopback. beta's service fronts a mock engine that, like llama.cpp's server, serves one
completion at a time, so an abandoned request it still serves blocks everyone. A caller that
stops reading blocks alpha, then QUIC flow control blocks beta's writes: nothing downstream
reads again, so only cancelling the task that serves the request can end it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pytest
from tests.security.conftest import Figures
from tests.support.cluster import start_cluster
from tests.support.federation import API, configure, error_of, ok, wait_for
from tests.support.inference import get, start_running
from tests.support.remote import (
    Federated,
    add_model,
    federate,
    invoke_body,
    new_mutation_id,
)
from tests.support.revocation import MOCK_MODEL, MockEngine, StalledCaller, mock_engine
from tests.support.tiny_gguf import write_tiny_gguf

from ficc.adapters.hypernet.streams import WRITE_STALL_VARIABLE

END_SECONDS = 1.0
"""The promise: work in flight under an ended grant stops within a second."""
WRITE_STALL_SECONDS = 5.0
"""beta's write deadline in these tests (30 s by default): long enough not to end a stalled
stream before the test revokes it or its grant expires (a stream stalls within about a second,
see ``STREAM_GRANT_LIFETIME``), short enough to watch it end one by itself."""
STREAM_GRANT_LIFETIME = 3
"""Seconds a grant lasts when its expiry must end a stalled stream: a flood stalls in about half a
second, so the stream is stalled well before expiry, and expiry comes well before the write
deadline."""
SERVICE_GRANT_LIFETIME = 5
"""Seconds a grant lasts when its expiry must stop a service: the tiny model's engine runs in
about a second, so it is running well before expiry."""
RANGE_FILE_BYTES = 48 * 1024 * 1024
MAX_RESPONSE_BYTES = 256 * 1024 * 1024


@dataclass
class Setup:
    fed: Federated
    engine: MockEngine
    weights: str
    """A 48 MiB model file on beta, to stream with models.range."""
    tiny: str
    """A tiny GGUF model on beta, for services the grantee creates."""


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    root = tmp_path_factory.mktemp("revocation")
    with pytest.MonkeyPatch.context() as env, mock_engine(root / "mock.log") as engine:
        env.setenv(WRITE_STALL_VARIABLE, str(WRITE_STALL_SECONDS))
        alpha = start_cluster(root / "alpha")
        beta = start_cluster(root / "beta", "--upstream-allow", engine.url)
        try:
            configure(alpha, "alpha")
            configure(beta, "beta")
            weights_file = root / "weights.bin"
            weights_file.write_bytes(os.urandom(RANGE_FILE_BYTES))
            weights = add_model(beta, "weights", weights_file)
            tiny = add_model(beta, "tiny", write_tiny_gguf(root / "tiny.gguf"))
            spec = {
                "name": "mock",
                "model": MOCK_MODEL,
                "runtime": "openai",
                "options": {"base_url": engine.url},
            }
            service = start_running(beta.owner(), spec)
            fed = federate(alpha, beta, service, weights)
            yield Setup(fed, engine, weights, tiny)
        finally:
            alpha.stop()
            beta.stop()


def roomy_grant(setup: Setup, **terms: Any) -> str:
    """Invoke and transfer on the mock service and the weights, selected on alpha."""
    fed = setup.fed
    base: dict[str, Any] = {
        "scopes": ["inference:invoke", "models:transfer", "models:read"],
        "services": [fed.service],
        "models": [setup.weights],
        "transfer_bytes": 1 << 30,
        "response_bytes": MAX_RESPONSE_BYTES,
    }
    return fed.grant(**{**base, **terms})


def flood_request(fed: Federated) -> dict[str, Any]:
    body = invoke_body(fed.service, stream=True, mock="flood")
    return {"operation": "inference.invoke", "body": body}


def range_request(setup: Setup) -> dict[str, Any]:
    manifest = setup.fed.result("models.manifest", {"model": setup.weights})["manifest"]
    (entry,) = manifest["files"]
    body = {
        "model": setup.weights,
        "file": entry["path"],
        "offset": 0,
        "length": entry["size"],
        "digest": entry["sha256"],
    }
    return {"operation": "models.range", "body": body}


def stalled_caller(fed: Federated, payload: dict[str, Any]) -> StalledCaller:
    caller = StalledCaller(
        fed.alpha.url, f"{API}/peers/{fed.peer}/request", fed.alpha.owner_token, payload
    )
    assert caller.status() == 200
    return caller


def seconds_until_idle(fed: Federated, grant: str, since: float) -> float:
    """Seconds from ``since`` (monotonic) until beta shows nothing in flight under ``grant``."""
    fed.wait_idle(grant, seconds=30)
    return time.monotonic() - since


def engine_freed(setup: Setup, gone_before: int) -> None:
    """The engine saw the abandoned completion go, and serves the next one at once."""
    wait_for(
        lambda: setup.engine.stats()["gone"] > gone_before and setup.engine.stats()["open"] == 0,
        seconds=5,
        what="the mock engine sees the abandoned completion closed",
    )
    fed = setup.fed
    body = {**invoke_body(fed.service)["body"], "model": fed.service}
    started = time.monotonic()
    answer = ok(fed.beta.owner().post("/api/v1/inference/v1/chat/completions", json=body))
    assert answer["choices"][0]["message"]["content"] == "ok"
    assert time.monotonic() - started < END_SECONDS


def served_under(fed: Federated, grant: str, code: str) -> int:
    """How many requests under an ended grant are served (each must be refused with ``code``)."""
    response = fed.request("inference.invoke", invoke_body(fed.service))
    if response.status_code == 200:
        return 1
    assert error_of(response, 403)["code"] == code
    assert fed.grantor_view(grant)["in_flight"] == 0
    return 0


# --- the caller leaves before the first byte -------------------------------------------------


@pytest.mark.parametrize("url", ["request", "openai"])
def test_a_caller_gone_before_the_first_byte_frees_the_slot_and_the_engine(
    setup: Setup, figures: Figures, url: str
) -> None:
    fed = setup.fed
    grant = roomy_grant(setup)
    if url == "request":
        path = f"{API}/peers/{fed.peer}/request"
        payload = {"operation": "inference.invoke", "body": invoke_body(fed.service, stream=True)}
        payload["body"]["body"]["mock"] = "hold"
    else:
        path = f"{API}/peers/{fed.peer}/v1/chat/completions"
        payload = {**invoke_body(fed.service, stream=True, mock="hold")["body"]}
        payload["model"] = fed.service
    gone_before = setup.engine.stats()["gone"]
    caller = StalledCaller(fed.alpha.url, path, fed.alpha.owner_token, payload)
    wait_for(lambda: setup.engine.stats()["open"] == 1, seconds=10, what="the engine holds it")
    assert fed.grantor_view(grant)["in_flight"] == 1
    started = time.monotonic()
    caller.close()
    took = seconds_until_idle(fed, grant, started)
    engine_freed(setup, gone_before)
    assert took < END_SECONDS
    figures.record(tries=1, end_latency_ms=round(took * 1000), slots_leaked=0)


# --- the grantee stops reading, then the grant ends ------------------------------------------


def test_revoking_ends_a_stalled_invoke_stream_within_a_second(
    setup: Setup, figures: Figures
) -> None:
    fed = setup.fed
    grant = roomy_grant(setup)
    gone_before = setup.engine.stats()["gone"]
    caller = stalled_caller(fed, flood_request(fed))
    try:
        stalled_at = setup.engine.wait_stalled()
        assert fed.grantor_view(grant)["in_flight"] == 1
        started = time.monotonic()
        ok(fed.beta.owner().delete(f"{API}/grants/{grant}"))
        took = seconds_until_idle(fed, grant, started)
        engine_freed(setup, gone_before)
        served = served_under(fed, grant, "grant_revoked")
    finally:
        caller.close()
    assert took < END_SECONDS
    assert served == 0
    figures.record(
        tries=1,
        refused=1,
        served_after_revocation=served,
        slots_leaked=fed.grantor_view(grant)["in_flight"],
        end_latency_ms=round(took * 1000),
        stalled_at_mib=round(stalled_at / 2**20, 1),
    )


def test_revoking_ends_a_stalled_range_stream_within_a_second(
    setup: Setup, figures: Figures
) -> None:
    fed = setup.fed
    grant = roomy_grant(setup)
    caller = stalled_caller(fed, range_request(setup))
    try:
        unread = caller.wait_stalled()
        assert fed.grantor_view(grant)["in_flight"] == 1
        started = time.monotonic()
        ok(fed.beta.owner().delete(f"{API}/grants/{grant}"))
        took = seconds_until_idle(fed, grant, started)
        served = served_under(fed, grant, "grant_revoked")
    finally:
        caller.close()
    assert took < END_SECONDS
    assert served == 0
    figures.record(
        tries=1,
        refused=1,
        served_after_revocation=served,
        slots_leaked=fed.grantor_view(grant)["in_flight"],
        end_latency_ms=round(took * 1000),
        unread_kib=unread // 1024,
    )


def test_a_stalled_stream_is_reset_by_the_write_deadline_without_any_revocation(
    setup: Setup, figures: Figures
) -> None:
    fed = setup.fed
    grant = roomy_grant(setup)
    gone_before = setup.engine.stats()["gone"]
    caller = stalled_caller(fed, flood_request(fed))
    try:
        setup.engine.wait_stalled()
        started = time.monotonic()
        took = seconds_until_idle(fed, grant, started)
        engine_freed(setup, gone_before)
    finally:
        caller.close()
    # The deadline runs from the first write that made no progress, a little before the
    # engine's own writes were seen to stall.
    assert took < WRITE_STALL_SECONDS + END_SECONDS
    assert fed.grantor_view(grant)["state"] == "active"
    figures.record(tries=1, slots_leaked=0, end_after_stall_ms=round(took * 1000))


def test_expiry_ends_a_stalled_invoke_stream_within_a_second(
    setup: Setup, figures: Figures
) -> None:
    fed = setup.fed
    grant = roomy_grant(setup, lifetime=STREAM_GRANT_LIFETIME)
    expires_at = datetime.fromisoformat(fed.grantor_view(grant)["expires_at"]).timestamp()
    gone_before = setup.engine.stats()["gone"]
    caller = stalled_caller(fed, flood_request(fed))
    try:
        setup.engine.wait_stalled()
        assert fed.grantor_view(grant)["in_flight"] == 1
        assert time.time() < expires_at, "the stream stalled too late to test expiry"
        fed.wait_idle(grant, seconds=30)
        took = time.time() - expires_at
        engine_freed(setup, gone_before)
        served = served_under(fed, grant, "grant_expired")
    finally:
        caller.close()
    assert took < END_SECONDS
    assert served == 0
    figures.record(
        tries=1,
        refused=1,
        served_after_revocation=served,
        slots_leaked=fed.grantor_view(grant)["in_flight"],
        end_latency_ms=round(max(took, 0) * 1000),
    )


def test_expiry_stops_the_services_of_a_stop_on_revoke_grant_by_itself(
    setup: Setup, figures: Figures
) -> None:
    fed = setup.fed
    grant = fed.grant(
        scopes=["inference:manage", "inference:invoke"],
        models=[setup.tiny],
        nodes=[fed.node],
        stop_on_revoke=True,
        lifetime=SERVICE_GRANT_LIFETIME,
    )
    spec = {"name": "grantee-made", "model": setup.tiny, "runtime": "llama.cpp"}
    created = fed.result("inference.create", {"spec": spec}, new_mutation_id())
    fed.result(
        "inference.control",
        {"service": created["id"], "revision": created["revision"], "operation": "start"},
        new_mutation_id(),
    )
    beta = fed.beta.owner()
    wait_for(lambda: get(beta, created["id"])["state"] == "running", seconds=60, what="it runs")
    expires_at = datetime.fromisoformat(fed.grantor_view(grant)["expires_at"]).timestamp()
    assert time.time() < expires_at, "the service started too late to test expiry"
    # No request is made from here on: only a timer can stop the service.
    stopped = wait_for(
        lambda: get(beta, created["id"])["state"] == "stopped", seconds=40, what="it stops"
    )
    took = time.time() - expires_at
    assert stopped
    assert took < END_SECONDS + 1  # stopping the engine process takes its own moment
    assert fed.grantor_view(grant)["state"] == "expired"
    figures.record(tries=1, end_latency_ms=round(took * 1000), served_after_revocation=0)


def test_removing_the_peer_ends_a_stalled_stream_and_closes_its_sessions(
    setup: Setup, figures: Figures
) -> None:
    fed = setup.fed
    grant = roomy_grant(setup)
    gone_before = setup.engine.stats()["gone"]
    caller = stalled_caller(fed, flood_request(fed))
    try:
        setup.engine.wait_stalled()
        assert fed.grantor_view(grant)["in_flight"] == 1
        started = time.monotonic()
        ok(fed.beta.owner().delete(f"{API}/peers/{fed.beta_peer}"))
        took = seconds_until_idle(fed, grant, started)
        engine_freed(setup, gone_before)
    finally:
        caller.close()
    assert took < END_SECONDS
    # alpha learns of the removal, and its requests are refused: it is no longer paired.
    response = fed.request("inference.invoke", invoke_body(fed.service))
    assert response.status_code in (403, 409), response.text
    figures.record(
        tries=1,
        refused=1,
        served_after_revocation=0,
        slots_leaked=fed.grantor_view(grant)["in_flight"],
        end_latency_ms=round(took * 1000),
    )
