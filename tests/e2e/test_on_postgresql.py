"""Two real clusters on PostgreSQL (``ficc init|serve --database``), each on its own database of
the session's server: pairing to revocation, exactly-once mutations, the requests allowance under
concurrent requests, and a model transfer, over real HyperNet on loopback.

The rest of the end-to-end tier runs on SQLite; these are the paths whose storage differs most
(transactions that run concurrently instead of one at a time, JSON, the audit trigger).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psycopg
import pytest
from tests.support.cluster import ficc, start_cluster
from tests.support.federation import API, add_service, configure, error_of, ok
from tests.support.inference import add_model, spec, start_running
from tests.support.metering import (
    agree,
    concurrent_streams,
    new_request_id,
    settled_sum,
    stream_chat,
    usage,
)
from tests.support.openapi import check_answer
from tests.support.postgres import PostgresServer
from tests.support.remote import ALL_REMOTE_SCOPES, Federated, federate, local_node, new_mutation_id
from tests.support.tiny_gguf import write_tiny_gguf
from tests.support.transfers import (
    acquire,
    generated_model,
    local_model,
    transfer_bytes_served,
    wait_until,
)

MiB = 1 << 20


@pytest.fixture(scope="module")
def databases(postgres: PostgresServer) -> dict[str, str]:
    return {"alpha": postgres.database("alpha"), "beta": postgres.database("beta")}


@pytest.fixture(scope="module")
def fed(tmp_path_factory: pytest.TempPathFactory, databases: dict[str, str]) -> Iterator[Federated]:
    root = tmp_path_factory.mktemp("on-postgresql")
    # beta is created by `ficc init --database`, alpha by `serve` on an empty database.
    initialised = ficc("init", "--database", databases["beta"], state_dir=root / "beta")
    assert initialised.returncode == 0, initialised.stderr
    alpha = start_cluster(root / "alpha", "--database", databases["alpha"])
    beta = start_cluster(root / "beta", "--database", databases["beta"])
    try:
        configure(alpha, "alpha")
        configure(beta, "beta")
        service = add_service(beta, "stopped", root)
        shown = ok(beta.owner().get(f"/api/v1/inference/services/{service}"))
        pairing = federate(
            alpha, beta, {**shown, "replicas": [{"port": 0}]}, shown["spec"]["model"]
        )
        yield pairing
    finally:
        alpha.stop()
        beta.stop()


def full_grant(fed: Federated, **terms: Any) -> str:
    base: dict[str, Any] = {
        "scopes": ALL_REMOTE_SCOPES,
        "services": [fed.service],
        "models": [fed.model],
        "nodes": [local_node(fed.beta)],
        "transfer_bytes": 64 * MiB,
    }
    return fed.grant(**{**base, **terms})


def grant_row(url: str, grant_id: str) -> tuple[int, int]:
    """requests_used and transfer_bytes_used as the grantor's database holds them."""
    with psycopg.connect(url) as connection:
        row = connection.execute(
            "SELECT requests_used, transfer_bytes_used FROM grants WHERE id = %s", (grant_id,)
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def test_both_clusters_keep_their_state_in_postgresql_not_in_a_sqlite_file(
    fed: Federated, databases: dict[str, str]
) -> None:
    for cluster in (fed.alpha, fed.beta):
        assert not (cluster.state_dir / "ficc.db").exists()
        ready = ok(cluster.client().get("/readyz"))
        assert ready["checks"]["schema"] == "ok"
    with psycopg.connect(databases["beta"]) as connection:
        peers = connection.execute("SELECT id FROM peers").fetchall()
    assert [row[0] for row in peers] == [fed.beta_peer]


def test_a_grant_serves_until_revoked_and_the_audit_log_cannot_be_rewritten(
    fed: Federated, databases: dict[str, str]
) -> None:
    grant = full_grant(fed)
    assert [s["id"] for s in fed.result("discover")["services"]] == [fed.service]
    revoked = ok(fed.beta.owner().delete(f"{API}/grants/{grant}"))
    assert revoked["state"] == "revoked"
    error = error_of(fed.request("discover"), 403)
    assert error["code"] == "grant_revoked"
    assert grant_row(databases["beta"], grant) == (1, 0)
    with psycopg.connect(databases["beta"]) as connection:
        before = connection.execute("SELECT count(*) FROM audit_log").fetchone()
        with pytest.raises(psycopg.errors.RaiseException, match="append-only"):
            connection.execute("DELETE FROM audit_log WHERE target = %s", (grant,))
        connection.rollback()
        after = connection.execute("SELECT count(*) FROM audit_log").fetchone()
        targets = connection.execute(
            "SELECT action FROM audit_log WHERE target = %s", (grant,)
        ).fetchall()
    assert before == after
    assert targets, "the grant's audit entries are kept"


def test_a_mutation_retried_with_its_id_is_done_once(fed: Federated) -> None:
    grant = full_grant(fed)
    mutation_id = new_mutation_id()
    body = {"spec": {"name": "once", "model": fed.model, "runtime": "llama.cpp"}}
    first = ok(fed.request("inference.create", body, mutation_id))
    again = ok(fed.request("inference.create", body, mutation_id))
    assert (first["replayed"], again["replayed"]) == (False, True)
    assert again["result"] == first["result"]
    other = {"spec": {**body["spec"], "name": "other"}}
    conflict = error_of(fed.request("inference.create", other, mutation_id), 409)
    assert conflict["code"] == "mutation_conflict"
    assert fed.grantor_view(grant)["created_services"] == [first["result"]["id"]]


def test_concurrent_requests_never_pass_the_requests_allowance(
    fed: Federated, databases: dict[str, str]
) -> None:
    """PostgreSQL runs the admissions' transactions at once: each must count every other."""
    allowance, tries = 5, 16
    grant = full_grant(fed, requests=allowance, concurrent=tries)
    with ThreadPoolExecutor(max_workers=tries) as pool:
        statuses = list(pool.map(lambda _: fed.request("discover").status_code, range(tries)))
    assert statuses.count(200) == allowance, statuses
    assert statuses.count(429) == tries - allowance, statuses
    assert grant_row(databases["beta"], grant) == (allowance, 0)
    fed.wait_idle(grant)


def test_a_model_is_transferred_and_charged_exactly_its_bytes(
    fed: Federated, tmp_path: Path, databases: dict[str, str]
) -> None:
    sizes = [3 * MiB + 17, 1 * MiB]
    model = generated_model(fed.beta, tmp_path, "moved", sizes)
    given = fed.beta.owner().post(
        f"{API}/peers/{fed.beta_peer}/grants",
        json={"scopes": ["discover"], "models": [model["id"]]},
    )
    check_answer(
        ok(fed.beta.client().get("/api/v1/openapi.json")), f"{API}/peers/{{peer_id}}/grants", given
    )
    grant = fed.grant(
        scopes=["models:read", "models:transfer"],
        models=[model["id"]],
        transfer_bytes=16 * MiB,
        requests=1000,
    )
    started = ok(acquire(fed.alpha.owner(), fed.peer, model["id"]), 202)
    done = wait_until(fed.alpha.owner(), started["id"], what="the model acquired")
    assert done["state"] == "complete", done
    registered = local_model(fed.alpha, done["local_model"])
    assert registered["sha256"] == model["sha256"]
    assert registered["manifest"] == model["manifest"]
    assert transfer_bytes_served(fed.beta, grant) == sum(sizes)
    assert grant_row(databases["beta"], grant)[1] == sum(sizes)
    # The answers of a paired cluster (peers, offers, grants, transfers) are the documented ones.
    for cluster in (fed.alpha, fed.beta):
        document = ok(cluster.client().get("/api/v1/openapi.json"))
        shown = check_answer(document, f"{API}/", cluster.owner().get(f"{API}/"))
        assert shown["peers"]
        assert shown["offers"]
    check_answer(
        document,
        f"{API}/transfers/{{transfer_id}}",
        fed.alpha.owner().get(f"{API}/transfers/{started['id']}"),
    )
    with psycopg.connect(databases["alpha"]) as connection:
        row = connection.execute(
            "SELECT manifest FROM models WHERE id = %s", (done["local_model"],)
        ).fetchone()
    assert row is not None
    stored = row[0] if isinstance(row[0], dict) else json.loads(row[0])
    assert stored == model["manifest"]


def test_concurrent_streams_never_pass_a_token_budget(
    fed: Federated, databases: dict[str, str], tmp_path: Path
) -> None:
    """Eight streams at once on PostgreSQL, whose reservations run in concurrent transactions:
    the settled tokens never pass the budget, and once it is spent the next request is
    refused before its engine runs. What the grantor's row holds is what its records sum to."""
    model = add_model(fed.beta, "tiny", write_tiny_gguf(tmp_path / "tiny.gguf"))
    service = start_running(fed.beta.owner(), spec("metered", model, options={"n_ctx": 4096}))["id"]
    budget = 500
    grant = fed.grant(scopes=["inference:invoke"], services=[service], tokens=budget, concurrent=8)
    streamed = concurrent_streams(fed, service, 8, max_tokens=60)
    assert {status for _, status, _ in streamed} <= {200, 429}
    refused = None
    for _ in range(12):
        request_id = new_request_id()
        status, _ = stream_chat(fed, service, max_tokens=60, request_id=request_id)
        if status == 429:
            refused = request_id
            break
    assert refused is not None, "the budget was never spent"
    fed.wait_idle(grant)
    records = usage(fed.beta.owner(), grant)["records"]
    assert settled_sum(records) <= budget
    [last] = [r for r in records if r["request"] == refused]
    assert (last["outcome"], last["prompt_tokens"], last["completion_tokens"]) == ("refused", 0, 0)
    agree(records, usage(fed.alpha.owner(), grant)["records"])
    with psycopg.connect(databases["beta"]) as connection:
        row = connection.execute(
            "SELECT prompt_tokens_used + completion_tokens_used, tokens_reserved FROM grants "
            "WHERE id = %s",
            (grant,),
        ).fetchone()
    assert row == (settled_sum(records), 0)
