"""/livez and /readyz: no credential, no secrets; 503 with the failing check when not ready."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

from tests.support.cluster import RunningCluster, start_cluster

from ficc.adapters.sql.schema import head_revision, previous_revision


def test_livez_and_readyz_answer_without_a_credential(json_cluster: RunningCluster) -> None:
    client = json_cluster.client()
    live = client.get("/livez")
    assert (live.status_code, live.json()) == (200, {"status": "ok"})
    ready = client.get("/readyz")
    assert ready.status_code == 200, ready.text
    body = ready.json()
    assert body["status"] == "ok"
    assert body["role"] == "active", "one process on SQLite is always the active one"
    assert body["checks"]["database"] == "ok"
    assert body["checks"]["schema"] == "ok"
    assert body["checks"]["schema_revision"] == head_revision()
    assert body["checks"]["companion"] == "unconfigured"
    assert json_cluster.owner_token not in ready.text
    assert str(json_cluster.state_dir) not in ready.text


def test_readyz_is_503_when_the_database_is_gone(tmp_path: Path) -> None:
    database_dir = tmp_path / "database"
    database_dir.mkdir()
    url = f"sqlite:///{database_dir / 'ficc.db'}"
    cluster = start_cluster(tmp_path / "state", "--database", url)
    try:
        client = cluster.client()
        assert client.get("/readyz").status_code == 200
        shutil.rmtree(database_dir)
        ready = client.get("/readyz")
        assert ready.status_code == 503, ready.text
        body = ready.json()
        assert body["status"] == "unavailable"
        assert body["checks"]["database"] == "unavailable"
        assert str(database_dir) not in ready.text
        assert client.get("/livez").status_code == 200
    finally:
        cluster.stop()


def test_readyz_is_503_when_the_schema_is_not_the_one_the_code_expects(tmp_path: Path) -> None:
    cluster = start_cluster(tmp_path / "state")
    try:
        client = cluster.client()
        previous = previous_revision(head_revision())
        connection = sqlite3.connect(cluster.state_dir / "ficc.db")
        with connection:
            connection.execute("UPDATE alembic_version SET version_num = ?", (previous,))
        connection.close()
        ready = client.get("/readyz")
        assert ready.status_code == 503, ready.text
        checks = ready.json()["checks"]
        assert (checks["database"], checks["schema"]) == ("ok", "outdated")
        assert checks["schema_revision"] == previous
    finally:
        cluster.stop()
