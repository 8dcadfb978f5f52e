"""JSON logs: one object a line, an access line per request carrying its ID, also across peers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support.cluster import RunningCluster, start_cluster
from tests.support.federation import API, configure, ok, pair, refresh, wait_for
from tests.support.ops import access_lines, error_request_id, json_lines, sample, scrape

RECORD_KEYS = {"time", "level", "logger", "message", "request_id"}


def test_a_well_formed_request_id_is_kept_and_logged(json_cluster: RunningCluster) -> None:
    request_id = "ops-kept-0001"
    response = json_cluster.owner().get("/api/v1/projects", headers={"X-Request-ID": request_id})
    assert response.status_code == 200
    assert response.headers["x-request-id"] == request_id
    lines = wait_for(
        lambda: access_lines(json_cluster.log_path, request_id), what="the access line"
    )
    assert len(lines) == 1
    line = lines[0]
    assert set(line) >= RECORD_KEYS
    assert (line["level"], line["status"], line["route"]) == ("info", 200, "/api/v1/projects")


@pytest.mark.parametrize("sent", ['bad id"', "x" * 200, "-leading-dash"])
def test_a_malformed_request_id_is_replaced(json_cluster: RunningCluster, sent: str) -> None:
    response = json_cluster.owner().get("/api/v1/projects", headers={"X-Request-ID": sent})
    given = response.headers["x-request-id"]
    assert given != sent
    assert len(given) == 32
    wait_for(lambda: access_lines(json_cluster.log_path, given), what="the access line")


def test_errors_and_unauthenticated_requests_carry_the_id(json_cluster: RunningCluster) -> None:
    missing = json_cluster.owner().get("/api/v1/models/model_nothere")
    assert missing.status_code == 404
    assert error_request_id(missing) == missing.headers["x-request-id"]
    anonymous = json_cluster.client().get("/api/v1/projects", headers={"X-Request-ID": "anon-1"})
    assert anonymous.status_code == 401
    assert error_request_id(anonymous) == "anon-1"
    lines = wait_for(lambda: access_lines(json_cluster.log_path, "anon-1"), what="the line")
    assert lines[0]["status"] == 401


def test_every_stderr_line_is_one_json_object(json_cluster: RunningCluster) -> None:
    json_cluster.client().get("/livez")
    text = json_cluster.log_path.read_text().splitlines()
    # stdout carries the two start-up lines for people; everything else is a log record.
    plain = [line for line in text if not line.startswith("{")]
    assert len(plain) == 2, plain
    records = json_lines(json_cluster.log_path)
    assert records
    assert all(set(record) >= RECORD_KEYS for record in records)


@pytest.fixture
def pair_of_clusters(tmp_path: Path) -> Iterator[tuple[RunningCluster, RunningCluster]]:
    alpha = start_cluster(tmp_path / "alpha", "--log-format", "json")
    beta = start_cluster(tmp_path / "beta", "--log-format", "json")
    try:
        yield alpha, beta
    finally:
        alpha.stop()
        beta.stop()


def test_a_federated_request_shows_the_same_id_in_both_clusters_logs(
    pair_of_clusters: tuple[RunningCluster, RunningCluster],
) -> None:
    alpha, beta = pair_of_clusters
    configure(alpha, "alpha")
    configure(beta, "beta")
    pairing = pair(alpha, beta)
    ok(refresh(alpha.owner(), pairing.requester_peer, grant=pairing.grant))
    operation = "discover"
    counted = "ficc_federation_requests_total"
    sent_before = sample(scrape(alpha), counted, direction="out", operation=operation)
    served_before = sample(scrape(beta), counted, direction="in", operation=operation)
    request_id = "ops-federated-42"
    response = alpha.owner().post(
        f"{API}/peers/{pairing.requester_peer}/request",
        json={"operation": "discover", "body": {}},
        headers={"X-Request-ID": request_id},
    )
    ok(response)
    assert response.headers["x-request-id"] == request_id

    def federation_lines(cluster: RunningCluster, direction: str) -> list[dict[str, Any]]:
        return [
            record
            for record in json_lines(cluster.log_path)
            if record["logger"] == "ficc.federation.access"
            and record["request_id"] == request_id
            and record["direction"] == direction
        ]

    sent = wait_for(lambda: federation_lines(alpha, "out"), what="alpha's federation line")
    served = wait_for(lambda: federation_lines(beta, "in"), what="beta's federation line")
    assert sent[0]["operation"] == served[0]["operation"] == "discover"
    assert sent[0]["outcome"] == served[0]["outcome"] == "ok"
    # The access line is written once the response has gone: wait for it.
    access = wait_for(lambda: access_lines(alpha.log_path, request_id), what="the access line")
    assert access[0]["status"] == 200
    labels = {"operation": operation, "outcome": "ok"}
    assert sample(scrape(alpha), counted, direction="out", **labels) == sent_before + 1
    assert sample(scrape(beta), counted, direction="in", **labels) == served_before + 1
    # alpha's session of no pairing (generation 0: the offer and the finish, until it idles
    # out) and its session of the pairing, which carried the request.
    assert sample(scrape(beta), "ficc_hypernet_sessions") == 2


def test_a_login_link_secret_never_reaches_the_log(json_cluster: RunningCluster) -> None:
    secret = "s3cr3t-" + "a" * 40
    response = json_cluster.client().get(f"/login/{secret}", headers={"X-Request-ID": "login-1"})
    assert response.status_code in (302, 303, 400, 401, 404)
    line = wait_for(lambda: access_lines(json_cluster.log_path, "login-1"), what="the line")[0]
    assert line["path"] == line["route"] == "/login/{secret}"
    assert secret not in json_cluster.log_path.read_text()
