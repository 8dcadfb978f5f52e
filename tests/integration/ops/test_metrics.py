"""GET /metrics: a resources:read bearer token; figures that match the traffic sent."""

from __future__ import annotations

import secrets
from pathlib import Path

from tests.support.cluster import RunningCluster, start_cluster
from tests.support.federation import add_service, configure, error_of, ok, refresh, wait_for
from tests.support.ops import family_names, label_values, sample, scrape
from tests.support.transfers import (
    MiB,
    acquire,
    generated_model,
    pair_for_transfer,
    wait_until,
)

from ficc.adapters import metrics, state_gauges
from ficc.adapters.sql.database import Database, default_url
from ficc.adapters.sql.schema import upgrade

FAMILIES = {
    "ficc_http_requests",
    "ficc_http_request_duration_seconds",
    "ficc_federation_requests",
    "ficc_federation_request_duration_seconds",
    "ficc_federation_in_flight",
    "ficc_transfer_bytes",
    "ficc_hypernet_sessions",
    "ficc_hypernet_handshake_failures",
    "ficc_inference_services",
    "ficc_engine_restarts",
    "ficc_inference_restarts",
    "ficc_sqlite_lock_wait_seconds",
}


def test_metrics_need_a_token_with_resources_read(json_cluster: RunningCluster) -> None:
    error_of(json_cluster.client().get("/metrics"), 401)
    without = json_cluster.token("models:read", "discover")
    error = error_of(json_cluster.client(without).get("/metrics"), 403)
    assert error["code"] == "forbidden"
    with_scope = json_cluster.token("resources:read")
    response = json_cluster.client(with_scope).get("/metrics")
    assert response.status_code == 200
    assert family_names(response.text) >= FAMILIES


def test_http_figures_count_requests_by_route_template(json_cluster: RunningCluster) -> None:
    owner = json_cluster.owner()
    before = scrape(json_cluster)
    for _ in range(5):
        assert owner.get("/api/v1/projects").status_code == 200
    assert owner.request("PROPFIND", "/api/v1/projects").status_code in (400, 405)
    unknown = [f"model_{secrets.token_hex(8)}" for _ in range(3)]
    for model_id in unknown:
        assert owner.get(f"/api/v1/models/{model_id}").status_code == 404

    def growth(after: str, route: str, status: str) -> float:
        labels = {"method": "GET", "route": route, "status": status}
        name = "ficc_http_requests_total"
        return sample(after, name, **labels) - sample(before, name, **labels)

    def settled() -> str | None:
        """A request is counted once its response has gone: scrape until the last one is."""
        text = scrape(json_cluster)
        return text if growth(text, "/api/v1/models/{model_id}", "404") >= 3 else None

    after = wait_for(settled, what="the last request counted")

    def grew(route: str, status: str) -> float:
        return growth(after, route, status)

    assert grew("/api/v1/projects", "200") == 5
    assert grew("/api/v1/models/{model_id}", "404") == 3
    routes = label_values(after, "ficc_http_requests_total", "route")
    assert not any(model_id in route for route in routes for model_id in unknown)
    assert label_values(after, "ficc_http_requests_total", "method") <= {
        "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "other"
    }  # fmt: skip
    assert sample(after, "ficc_http_requests_total", method="other") >= 1
    count = "ficc_http_request_duration_seconds_count"
    labels = {"method": "GET", "route": "/api/v1/projects"}
    assert sample(after, count, **labels) - sample(before, count, **labels) == 5


def test_services_are_counted_by_state(json_cluster: RunningCluster) -> None:
    before = sample(scrape(json_cluster), "ficc_inference_services", state="stopped")
    add_service(json_cluster, "metered", json_cluster.state_dir.parent)
    after = scrape(json_cluster)
    assert sample(after, "ficc_inference_services", state="stopped") == before + 1
    assert sample(after, "ficc_engine_restarts") == 0


def test_transfer_bytes_match_the_model_acquired(tmp_path: Path) -> None:
    alpha = start_cluster(tmp_path / "alpha")
    beta = start_cluster(tmp_path / "beta")
    try:
        configure(alpha, "alpha")
        configure(beta, "beta")
        size = 3 * MiB + 17
        model = generated_model(beta, tmp_path / "files", "moved", [size])
        pairing = pair_for_transfer(alpha, beta, [model["id"]], 4 * MiB)
        ok(refresh(alpha.owner(), pairing.requester_peer, grant=pairing.grant))
        started = ok(acquire(alpha.owner(), pairing.requester_peer, model["id"]), 202)
        done = wait_until(alpha.owner(), started["id"])
        assert done["state"] == "complete", done
        received = sample(scrape(alpha), "ficc_transfer_bytes_total", direction="in")
        sent = sample(scrape(beta), "ficc_transfer_bytes_total", direction="out")
        assert received == sent == size
        served = sample(
            scrape(beta),
            "ficc_federation_requests_total",
            direction="in",
            operation="models.range",
            outcome="ok",
        )
        assert served >= 1
        assert sample(scrape(beta), "ficc_federation_in_flight") == 0
    finally:
        alpha.stop()
        beta.stop()


def test_a_scraper_other_than_the_owner_sees_one_in_flight_sum_and_no_grant_id(
    json_cluster: RunningCluster,
) -> None:
    """G12: grant IDs belong to projects; a resources:read token of one project sees the
    requests in flight as one sum, the local owner per grant."""
    reader = json_cluster.client(json_cluster.token("resources:read"))
    text = reader.get("/metrics").text
    assert label_values(text, "ficc_federation_in_flight", "grant") == {"all"}
    assert "all" not in label_values(scrape(json_cluster), "ficc_federation_in_flight", "grant")


async def test_the_in_flight_gauge_names_grants_only_when_asked_to(tmp_path: Path) -> None:
    database = Database(default_url(tmp_path))
    await upgrade(database)
    try:
        in_flight = {"grant_a": 2, "grant_b": 1}
        await state_gauges.refresh_state_gauges(database, in_flight, by_grant=False)
        summed = metrics.exposition().decode()
        await state_gauges.refresh_state_gauges(database, in_flight, by_grant=True)
        named = metrics.exposition().decode()
    finally:
        await database.dispose()
    assert label_values(summed, "ficc_federation_in_flight", "grant") == {"all"}
    assert sample(summed, "ficc_federation_in_flight") == 3
    assert label_values(named, "ficc_federation_in_flight", "grant") == {"grant_a", "grant_b"}


def test_only_operations_of_the_table_take_an_operation_label() -> None:
    """G12: made-up names from an unpaired peer count as ``other`` and take no label, so the
    real operations keep theirs however many names came first."""
    made_up = {metrics.operation_label(f"made.up.{index}") for index in range(100)}
    assert made_up == {metrics.OTHER_OPERATION}
    for operation in ("discover", "models.range", "pairing.offer", "inference.invoke"):
        assert metrics.operation_label(operation) == operation
