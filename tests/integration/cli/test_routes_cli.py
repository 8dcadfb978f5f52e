"""`ficc route-create`, `routes`, `route-show` and `route-remove` through the real entry point
against a real server: flags or ``--input`` make the body, refusals keep their exit status."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from tests.support.cli import ok, refused
from tests.support.cluster import RunningCluster, start_cluster

LOCAL = "svc_" + "a" * 26
PEER = "per_" + "b" * 26


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCluster]:
    running = start_cluster(tmp_path_factory.mktemp("routes-cli") / "state")
    try:
        yield running
    finally:
        running.stop()


def test_a_route_is_made_from_flags_listed_shown_and_removed(cluster: RunningCluster) -> None:
    state = cluster.state_dir
    made = ok(
        state,
        "route-create",
        "--name",
        "chat",
        "--policy",
        "least-busy",
        "--target",
        LOCAL,
        "--target",
        f"{PEER}/{LOCAL}",
    )
    assert made["targets"] == [
        {"service": LOCAL, "weight": 1, "max_in_flight": None},
        {"peer": PEER, "service": LOCAL, "weight": 1, "max_in_flight": None},
    ]
    assert ok(state, "routes") == {"routes": [made]}
    assert ok(state, "route-show", made["id"]) == made
    assert ok(state, "route-remove", made["id"]) == {"removed": made["id"]}
    assert ok(state, "routes") == {"routes": []}
    assert refused(state, "route-show", made["id"], status=1)["code"] == "not_found"


def test_input_makes_the_whole_body_and_bad_input_names_the_field(
    cluster: RunningCluster,
) -> None:
    state = cluster.state_dir
    body = {"name": "weighted", "policy": "priority", "targets": [{"service": LOCAL, "weight": 5}]}
    made = ok(state, "route-create", "--input", "-", stdin=json.dumps(body))
    assert made["targets"][0]["weight"] == 5
    bad = {**body, "targets": [{"service": LOCAL, "weight": 0}]}
    error = refused(state, "route-create", "--input", "-", stdin=json.dumps(bad), status=1)
    assert (error["code"], error["details"]["field"]) == ("invalid_request", "targets[0].weight")
    usage = refused(state, "route-create", "--name", "x", status=2)
    assert "--policy" in usage["message"]
    assert "--target" in usage["message"]
